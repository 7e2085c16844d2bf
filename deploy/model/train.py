#!/usr/bin/python3
"""Trains the byte-level models of model.py on licence texts every Debian
machine has, and writes the weights beside this file.

    /usr/bin/python3 deploy/model/train.py [--out DIR] [--threads 2]

Data: /usr/share/common-licenses (package base-files, Essential: yes, so
present on any Debian system, a minimal container included). The training
text is the files in TRAIN_FILES, the held-out text is HELD_OUT (the Apache
licence, whose wording shares little with the GNU, Mozilla and Artistic
licences trained on). A missing file stops the script with an error; a file
whose SHA-256 differs from the one recorded here (another Debian release's
base-files) only gets a warning, and the results then differ from the
committed ones.

Two models are trained, in order, each from a fixed seed, with a fixed
number of steps (not a time limit), so a rerun on the same machine and
torch build gives the same weights bit for bit:

* the target (model.Config(): 4 layers, 4 heads, d_model 128, d_ff 344),
  400 steps of 32 windows of 256 tokens, every tenth one 8 x 1024 instead
  (so that it sees long contexts at a useful learning rate: the attention
  traces use T up to 4096, evictd-llama runs past 1024);
* the draft model for speculative decoding (1 layer, 2 heads, d_model 64,
  d_ff 172), on the same schedule.

Every window is BOS at position 0 followed by bytes of the text from a
random place (T tokens: BOS and T - 1 bytes, each position predicting the
next byte, position 0 the first), as every use of the model starts with
BOS at position 0.

It reports, for each, the held-out loss (nats per byte, and bits) against a
unigram model's (byte frequencies of the training text, add-one smoothed),
and the training time, and stores them in the weights files' metadata
(model.meta()), beside the hyperparameters llama.cpp needs (norm_eps,
rope_base, BOS, EOS) and the machine's load during the run. See README.md
for the time it took.
"""

import time

T_START = time.monotonic()

import argparse  # noqa: E402
import hashlib  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402
from typing import List, Tuple  # noqa: E402

# torch runs its own 2 threads (set_num_threads); OpenBLAS threads of its own
# on top of them oversubscribe the 2 cores (measured: 1.3 s per step of
# 32 x 256 bytes with one BLAS thread, 1.6 to 3.8 s with two).
os.environ["OPENBLAS_NUM_THREADS"] = "1"


def keep_heap() -> bool:
    """Makes glibc's malloc serve every allocation from its heap and never
    give freed memory back (no mmap per large block, no trimming, one
    arena). A step's attention temporaries are [batch, heads, T, T] floats,
    128 MB each at 8 x 1024; by default each is a fresh mmap whose pages
    fault in one by one and go back to the kernel when freed, which on the
    development machine (a VM) took more time than the arithmetic: steps
    of 8 x 1024 took 6 to 13 s, 1.7 to 2.2 s with this, and steps of
    32 x 256 1.3 to 2.3 s, 0.8 to 1.0 s with it (same numbers computed).
    Returns False where mallopt is not available (not glibc)."""
    try:
        import ctypes
        libc = ctypes.CDLL("libc.so.6")
        # M_MMAP_MAX, M_TRIM_THRESHOLD, M_TOP_PAD, M_ARENA_MAX
        return all(libc.mallopt(param, value) == 1 for param, value in
                   ((-4, 0), (-1, 2 ** 31 - 1), (-2, 64 << 20), (-8, 1)))
    except (OSError, AttributeError):
        return False


HEAP_KEPT = keep_heap()

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from model import BOS, EOS, VOCAB, ByteLM, Config, save  # noqa: E402

LICENSES = "/usr/share/common-licenses"
# The training files and the held-out file, with their SHA-256 in Debian 12
# (base-files 12.4+deb12u11).
TRAIN_FILES = ("Artistic", "BSD", "CC0-1.0", "GFDL-1.2", "GFDL-1.3", "GPL-1",
               "GPL-2", "GPL-3", "LGPL-2", "LGPL-2.1", "LGPL-3", "MPL-1.1",
               "MPL-2.0")
HELD_OUT = ("Apache-2.0",)
SHA256 = {
    "Apache-2.0": "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30",
    "Artistic": "b7fd9b73ea99602016a326e0b62e6646060d18febdd065ceca8bb482208c3d88",
    "BSD": "5d588eb3b157d52112afea935c88a7ff9efddc1e2d95a42c25d3b96ad9055008",
    "CC0-1.0": "a2010f343487d3f7618affe54f789f5487602331c0a8d03f49e9a7c547cf0499",
    "GFDL-1.2": "d8e94ae5fdb5433fcae2961aeb1a8cf17174d6f4a0465d24bf37dd8a038bd439",
    "GFDL-1.3": "110535522396708cea37c72a802c5e7e81391139f5f7985631c93ef242b206a4",
    "GPL-1": "d77d235e41d54594865151f4751e835c5a82322b0e87ace266567c3391a4b912",
    "GPL-2": "8177f97513213526df2cf6184d8ff986c675afb514d4e68a404010521b880643",
    "GPL-3": "3972dc9744f6499f0f9b2dbf76696f2ae7ad8af9b23dde66d6af86c9dfb36986",
    "LGPL-2": "681e386e44a19d7d0674b4320272c90e66b6610b741e7e6305f8219c42e85366",
    "LGPL-2.1": "dc626520dcd53a22f727af3ee42c770e56c97a64fe3adb063799d8ab032fe551",
    "LGPL-3": "e3a994d82e644b03a792a930f574002658412f62407f5fee083f2555c5f23118",
    "MPL-1.1": "f849fc26a7a99981611a3a370e83078deb617d12a45776d6c4cada4d338be469",
    "MPL-2.0": "fab3dd6bdab226f1c08630b1dd917e11fcb4ec5e1e020e2c16f83a0a13863e85",
}

# (steps, (batch, length) of most steps, (batch, length) of every
# `every`-th step, every)
TARGET_SCHEDULE = (400, (32, 256), (8, 1024), 10)
DRAFT_SCHEDULE = (400, (32, 256), (8, 1024), 10)
DRAFT_CONFIG = Config(n_layers=1, n_heads=2, d_model=64, d_ff=172)
LR, WARMUP, WEIGHT_DECAY = 3e-3, 20, 0.01


def read_texts(names):
    """The files' bytes, in the order given; exits 2 if one is missing."""
    out = []
    for name in names:
        path = os.path.join(LICENSES, name)
        if not os.path.isfile(path):
            sys.exit("train.py: %s is missing: it comes with Debian's "
                     "base-files package, which every Debian system has; "
                     "this is not a Debian machine?" % path)
        with open(path, "rb") as f:
            data = f.read()
        digest = hashlib.sha256(data).hexdigest()
        if SHA256.get(name) != digest:
            print("train.py: warning: %s has SHA-256 %s, not the recorded "
                  "%s; the weights will differ from the committed ones"
                  % (path, digest, SHA256.get(name)), file=sys.stderr)
        out.append((name, data, digest))
    return out


def unigram_loss(train: bytes, held: bytes) -> float:
    """Cross-entropy (nats per byte) on held of the add-one smoothed byte
    frequencies of train."""
    counts = torch.bincount(torch.tensor(list(train)), minlength=256).double()
    logp = torch.log((counts + 1) / (counts.sum() + 256))
    return float(-logp[torch.tensor(list(held))].mean())


def windows(data: torch.Tensor, starts: torch.Tensor, length: int
            ) -> Tuple[torch.Tensor, torch.Tensor]:
    """Inputs [B, length]: BOS, then the length - 1 bytes from each start;
    targets [B, length]: the length bytes from each start (position t
    predicts byte start + t)."""
    x = data[starts.unsqueeze(1) + torch.arange(length)]
    bos = torch.full((len(starts), 1), BOS, dtype=torch.long)
    return torch.cat((bos, x[:, :-1]), dim=1), x


@torch.no_grad()
def eval_loss(model: ByteLM, data: torch.Tensor, length: int = 1024
              ) -> float:
    """Mean next-byte cross-entropy (nats per byte) over every byte of data,
    in consecutive chunks of `length` bytes, each run as BOS and the
    chunk's bytes (positions 0..length-1, causal mask; the first byte of a
    chunk is predicted from BOS alone)."""
    model.eval()
    total = 0.0
    for start in range(0, len(data), length):
        n = min(length, len(data) - start)
        x, y = windows(data, torch.tensor([start]), n)
        logits = model(x)
        total += float(F.cross_entropy(logits[0], y[0], reduction="sum"))
    model.train()
    return total / len(data)


def batches(schedule):
    """(batch, length) of each step: schedule is (steps, short, long,
    every): every `every`-th step is a long one, the others short."""
    steps, short, long_, every = schedule
    return [long_ if every and (i + 1) % every == 0 else short
            for i in range(steps)]


def train(model: ByteLM, data: torch.Tensor, schedule, seed: int,
          label: str, loads: List[float]) -> float:
    """Trains in place with AdamW, linear warm-up then cosine decay; windows
    (BOS and bytes) drawn uniformly from data with a seeded generator.
    Returns the mean loss of the last 10 steps; appends the 1-minute load
    average every 10 steps to loads."""
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=(0.9, 0.95),
                            weight_decay=WEIGHT_DECAY)
    plan = batches(schedule)
    total, recent = len(plan), []
    masks = {}
    t0 = time.monotonic()
    for step, (batch, length) in enumerate(plan):
        causal = masks.setdefault(
            length, torch.ones(length, length, dtype=torch.bool).tril())
        lr = LR * min(1.0, (step + 1) / WARMUP) * 0.5 * (
            1 + math.cos(math.pi * step / total))
        for g in opt.param_groups:
            g["lr"] = lr
        starts = torch.randint(0, len(data) - length - 1, (batch,),
                               generator=gen)
        x, y = windows(data, starts, length)
        logits = model(x, mask=causal)
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        recent = (recent + [float(loss)])[-10:]
        if (step + 1) % 10 == 0 or step + 1 == total:
            loads.append(os.getloadavg()[0])
            print("%s step %d/%d (T=%d) loss %.4f lr %.2e  %.0fs  load %.2f"
                  % (label, step + 1, total, length, float(loss), lr,
                     time.monotonic() - t0, loads[-1]), flush=True)
    return sum(recent) / len(recent)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=HERE,
                    help="directory for evictd-lm.pt and draft.pt")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True)
    train_texts = read_texts(TRAIN_FILES)
    held_texts = read_texts(HELD_OUT)
    train_bytes = b"\n\n".join(d for _, d, _ in train_texts)
    held_bytes = b"\n\n".join(d for _, d, _ in held_texts)
    data = torch.tensor(list(train_bytes), dtype=torch.long)
    held = torch.tensor(list(held_bytes), dtype=torch.long)
    uni = unigram_loss(train_bytes, held_bytes)
    print("training text: %d bytes from %s/{%s}" % (
        len(train_bytes), LICENSES, ",".join(TRAIN_FILES)))
    print("held-out text: %d bytes from %s/%s" % (
        len(held_bytes), LICENSES, ",".join(HELD_OUT)))
    print("unigram held-out loss: %.4f nats/byte (%.3f bits)"
          % (uni, uni / math.log(2)))

    files = {"train": {n: {"bytes": len(d), "sha256": h}
                       for n, d, h in train_texts},
             "held_out": {n: {"bytes": len(d), "sha256": h}
                          for n, d, h in held_texts},
             "dir": LICENSES}
    runs = (("target", Config(), TARGET_SCHEDULE, 1, "evictd-lm.pt"),
            ("draft", DRAFT_CONFIG, DRAFT_SCHEDULE, 2, "draft.pt"))
    t_all = time.monotonic()
    for label, cfg, schedule, seed, fname in runs:
        torch.manual_seed(seed)
        model = ByteLM(cfg)
        loads = [os.getloadavg()[0]]
        t0, cpu0 = time.monotonic(), time.process_time()
        last = train(model, data, schedule, seed, label, loads)
        secs = time.monotonic() - t0
        cpu = time.process_time() - cpu0
        loss = eval_loss(model, held)
        train_loss = eval_loss(model, data[:len(held)])
        load = {"start": loads[0], "mean": sum(loads) / len(loads),
                "max": max(loads), "cpus": os.cpu_count(),
                "what": "1-minute load average of the machine, at the "
                        "start and every 10 steps"}
        print("%s: %d parameters, trained in %.1f s (%.1f s of CPU; load "
              "average %.2f mean, %.2f max on %d CPUs); held-out loss %.4f "
              "nats/byte (%.3f bits), unigram %.4f (%.3f bits); training "
              "text (first %d bytes) %.4f"
              % (label, model.n_params(), secs, cpu, load["mean"],
                 load["max"], load["cpus"], loss, loss / math.log(2),
                 uni, uni / math.log(2), len(held), train_loss), flush=True)
        save(model, os.path.join(args.out, fname),
             held_out_loss=loss, unigram_loss=uni, train_loss=train_loss,
             last_steps_loss=last, train_seconds=secs, cpu_seconds=cpu,
             load=load, heap_kept=HEAP_KEPT,
             wall_seconds_so_far=time.monotonic() - T_START,
             schedule=schedule, train_context=max(
                 length for _, length in batches(schedule)),
             lr=LR, warmup=WARMUP,
             weight_decay=WEIGHT_DECAY, seed=seed, threads=args.threads,
             params=model.n_params(), files=files,
             architecture="llama", norm_eps=cfg.norm_eps,
             rope_base=cfg.rope_base,
             rope="adjacent pairs (2i, 2i+1), angle pos * rope_base^"
                  "(-2i/head_dim): llama.cpp's LLAMA_ROPE_TYPE_NORM",
             head_dim=cfg.head_dim, n_kv_heads=cfg.n_heads,
             bos=BOS, eos=EOS, vocab=cfg.vocab, tied_output=True,
             torch=torch.__version__, machine=platform.machine(),
             python=platform.python_version())
    print("total training time %.1f s; wall clock since start %.1f s"
          % (time.monotonic() - t_all, time.monotonic() - T_START))


if __name__ == "__main__":
    main()
