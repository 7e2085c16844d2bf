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

* the target (model.Config(): 4 layers, 4 heads, d_model 128), 150 steps
  of 32 x 256 bytes, every tenth one 8 x 1024 bytes instead (so that it
  sees long contexts at a useful learning rate: the attention traces use
  T >= 2048);
* the draft model for speculative decoding (1 layer, 2 heads, d_model 64),
  100 steps of 32 x 256 bytes.

It reports, for each, the held-out loss (nats per byte, and bits) against a
unigram model's (byte frequencies of the training text, add-one smoothed),
and the training time, and stores them in the weights files' metadata
(model.meta()). On the 2-core development machine the whole run took 4 to
5 minutes of wall clock, and two runs gave bit-identical weights (see
README.md).
"""

import argparse
import hashlib
import math
import os
import platform
import sys
import time

# torch runs its own 2 threads (set_num_threads); OpenBLAS threads of its own
# on top of them oversubscribe the 2 cores (measured: 1.3 s per step of
# 32 x 256 bytes with one BLAS thread, 1.6 to 3.8 s with two).
os.environ["OPENBLAS_NUM_THREADS"] = "1"

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from model import ByteLM, Config, save  # noqa: E402

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
TARGET_SCHEDULE = (150, (32, 256), (8, 1024), 10)
DRAFT_SCHEDULE = (100, (32, 256), None, 0)
DRAFT_CONFIG = Config(n_layers=1, n_heads=2, d_model=64, d_ff=256)
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


@torch.no_grad()
def eval_loss(model: ByteLM, data: torch.Tensor, length: int = 1024
              ) -> float:
    """Mean next-byte cross-entropy (nats) over data, in consecutive chunks
    of `length` bytes (each chunk from position 0, causal mask)."""
    model.eval()
    total, count = 0.0, 0
    for start in range(0, len(data) - 1, length):
        chunk = data[start:start + length + 1]
        if len(chunk) < 2:
            break
        logits = model(chunk[:-1].unsqueeze(0))
        total += float(F.cross_entropy(logits[0], chunk[1:],
                                       reduction="sum"))
        count += len(chunk) - 1
    model.train()
    return total / count


def batches(schedule):
    """(batch, length) of each step: schedule is (steps, short, long,
    every): every `every`-th step is a long one, the others short."""
    steps, short, long_, every = schedule
    return [long_ if every and (i + 1) % every == 0 else short
            for i in range(steps)]


def train(model: ByteLM, data: torch.Tensor, schedule, seed: int,
          label: str) -> float:
    """Trains in place with AdamW, linear warm-up then cosine decay; windows
    drawn uniformly from data with a seeded generator. Returns the mean
    loss of the last 10 steps."""
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
        x = data[starts.unsqueeze(1) + torch.arange(length + 1)]
        logits = model(x[:, :-1], mask=causal)
        loss = F.cross_entropy(logits.reshape(-1, 256), x[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        recent = (recent + [float(loss)])[-10:]
        if (step + 1) % 10 == 0 or step + 1 == total:
            print("%s step %d/%d (T=%d) loss %.4f lr %.2e  %.0fs"
                  % (label, step + 1, total, length, float(loss), lr,
                     time.monotonic() - t0), flush=True)
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
        t0 = time.monotonic()
        last = train(model, data, schedule, seed, label)
        secs = time.monotonic() - t0
        loss = eval_loss(model, held)
        train_loss = eval_loss(model, data[:len(held)])
        print("%s: %d parameters, trained in %.1f s; held-out loss %.4f "
              "nats/byte (%.3f bits), unigram %.4f (%.3f bits); training "
              "text (first %d bytes) %.4f"
              % (label, model.n_params(), secs, loss, loss / math.log(2),
                 uni, uni / math.log(2), len(held), train_loss), flush=True)
        save(model, os.path.join(args.out, fname),
             held_out_loss=loss, unigram_loss=uni, train_loss=train_loss,
             last_steps_loss=last, train_seconds=secs,
             schedule=schedule, lr=LR, warmup=WARMUP,
             weight_decay=WEIGHT_DECAY, seed=seed, threads=args.threads,
             params=model.n_params(), files=files,
             torch=torch.__version__, machine=platform.machine(),
             python=platform.python_version())
    print("total training time %.1f s" % (time.monotonic() - t_all))


if __name__ == "__main__":
    main()
