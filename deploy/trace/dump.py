#!/usr/bin/python3
"""Dumps the attention of deploy/model's byte-level transformer over text it
did not train on, as traces for evictd-eval, and how much of it lands on the
first positions (attention sinks).

    /usr/bin/python3 deploy/trace/dump.py [--T 4096] [--out build/trace]

One causal forward pass over T tokens, BOS at position 0 (as every use of
the model starts) and the first T - 1 bytes of model.HELD_OUT_TEXT (the
Apache licence, held out from training), writes, in OUT:

* attn-mean.npy   [T, T] float32: the mean over all layer-heads (4 x 4),
  rows scaled to sum to 1 in float64 before the cast;
* attn-heads.npy  [L*H, T, T] float16, layer-major (entry l*H + h is head h
  of layer l); each row is checked to sum to 1 within 1e-3 (evictd-eval's
  tolerance) after the float16 rounding, and scaled again if it does not;
* sinks.json      per layer and head, the mean attention mass on the first 4
  positions over the rows t >= 64, beside what uniform attention over 0..t
  would give there; also the mass on position 0 (BOS), on the next 4 positions
  (4..7: old positions that are not the first) and on the 4 most recent
  (t-3..t), and the means over all layer-heads. Beside them, the model's
  next-byte loss (nats/byte) and, when T is longer than the longest
  context it trained on (1024 tokens, from the weights' metadata), its loss
  before and after that length, its loss after it when each token sees
  only the last 1024 positions (a second forward with that mask) and when
  it sees BOS and the last 1023 (a third), and the head-averaged attention
  mass the rows past it put at distances it never saw ("beyond_training").

Probabilities are taken one layer at a time (ByteLM.forward's on_attn), the
per-head file is written through a memory map, so the peak memory is about
one layer's probabilities plus the float64 sum (measured: 1.9 GB at
T = 4096).

Exit status: 0 success, 2 bad arguments or a missing or short input,
1 anything else.
"""

import argparse
import json
import os
import sys
import time

# OpenBLAS threads on top of torch's oversubscribe a 2-core machine (see
# deploy/model/train.py); this must be set before numpy or torch loads it.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "deploy", "model"))
# No __pycache__ left in deploy/model by a measurement.
sys.dont_write_bytecode = True

# The evaluator's tolerance on a row's sum (server/eval: rows not summing to
# 1 within it are refused).
ROW_TOL = 1e-3


def fail(msg: str, status: int = 2) -> None:
    print("dump.py: " + msg, file=sys.stderr)
    sys.exit(status)


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="dump.py",
        description="Dump the attention of deploy/model's transformer over "
                    "held-out text as .npy traces for evictd-eval, and the "
                    "attention mass on the first positions (sinks.json).")
    p.add_argument("--T", type=int, default=4096, metavar="T",
                   help="tokens to run: BOS and T - 1 bytes of the text "
                        "(default 4096; the model trained on contexts of at "
                        "most 1024)")
    p.add_argument("--out", default=os.path.join(ROOT, "build", "trace"),
                   metavar="DIR",
                   help="output directory, created if missing "
                        "(default build/trace)")
    p.add_argument("--text", default=None, metavar="FILE",
                   help="text file (default model.HELD_OUT_TEXT, "
                        "/usr/share/common-licenses/Apache-2.0)")
    p.add_argument("--weights", default=None, metavar="FILE",
                   help="model weights (default deploy/model/evictd-lm.pt)")
    p.add_argument("--sinks", type=int, default=4, metavar="N",
                   help="first positions counted as sinks (default 4)")
    p.add_argument("--rows-from", type=int, default=64, metavar="R",
                   help="sinks.json averages rows t >= R (default 64)")
    p.add_argument("--threads", type=int, default=2, metavar="N",
                   help="torch threads (default 2)")
    a = p.parse_args(argv)
    if a.T < 2:
        fail("--T must be at least 2, not %d" % a.T)
    if a.sinks < 1:
        fail("--sinks must be at least 1, not %d" % a.sinks)
    if not 0 <= a.rows_from < a.T:
        fail("--rows-from must be in 0..T-1 (T = %d), not %d"
             % (a.T, a.rows_from))
    if a.threads < 1:
        fail("--threads must be at least 1, not %d" % a.threads)
    return a


def main(argv=None) -> int:
    a = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        import numpy as np
        import torch
        import model as lm
    except ImportError as e:
        fail("%s: run with Debian's /usr/bin/python3 (python3-torch and "
             "python3-numpy: deploy/deps.sh e2e)" % e)

    text_path = a.text or lm.HELD_OUT_TEXT
    weights = a.weights or lm.WEIGHTS
    try:
        with open(text_path, "rb") as f:
            text = f.read()
    except OSError as e:
        fail("cannot read the text: %s" % e)
    if len(text) < a.T - 1:
        fail("%s has %d bytes, fewer than --T %d - 1"
             % (text_path, len(text), a.T))
    try:
        m = lm.load(weights)
    except (OSError, RuntimeError, KeyError) as e:
        fail("cannot load the weights %s: %s" % (weights, e))
    try:
        os.makedirs(a.out, exist_ok=True)
    except OSError as e:
        fail("cannot create %s: %s" % (a.out, e))

    torch.set_num_threads(a.threads)
    T, L, H, S = a.T, m.cfg.n_layers, m.cfg.n_heads, a.sinks
    tokens = lm.encode(text[:T - 1])          # BOS, then T - 1 bytes
    heads_path = os.path.join(a.out, "attn-heads.npy")
    mean_path = os.path.join(a.out, "attn-mean.npy")
    heads = np.lib.format.open_memmap(heads_path, mode="w+",
                                      dtype="<f2", shape=(L * H, T, T))
    total = np.zeros((T, T), dtype=np.float64)
    rows = slice(a.rows_from, T)
    t_idx = np.arange(T, dtype=np.float64)
    stats = {}
    fixed = [0]
    worst = [0.0]

    def on_attn(layer: int, probs: "torch.Tensor") -> None:
        p = probs[0].numpy()                    # [H, T, T] float32
        for h in range(H):
            ph = p[h]
            total[:] += ph
            half = ph.astype(np.float16)
            err = np.abs(half.sum(axis=1, dtype=np.float64) - 1.0)
            bad = np.nonzero(err > ROW_TOL)[0]
            if bad.size:
                # Scale the float16 row back by its own sum and round again;
                # one pass brings it well inside the tolerance.
                r = half[bad].astype(np.float64)
                r /= r.sum(axis=1, keepdims=True)
                half[bad] = r.astype(np.float16)
                fixed[0] += bad.size
                err = np.abs(half.sum(axis=1, dtype=np.float64) - 1.0)
                if (err > ROW_TOL).any():
                    raise RuntimeError("layer %d head %d: a row still sums "
                                       "to 1 +- %.2e after float16 rounding"
                                       % (layer, h, err.max()))
            worst[0] = max(worst[0], float(err.max()))
            heads[layer * H + h] = half
            first = ph[rows, :S].sum(axis=1, dtype=np.float64)
            recent = np.array([ph[t, max(0, t - S + 1):t + 1].sum(
                dtype=np.float64) for t in range(a.rows_from, T)])
            stats[(layer, h)] = {
                "layer": layer, "head": h,
                "first": float(first.mean()),
                "pos0": float(ph[rows, 0].mean(dtype=np.float64)),
                "next": float(ph[rows, S:2 * S].sum(
                    axis=1, dtype=np.float64).mean()),
                "recent": float(recent.mean()),
            }

    t0 = time.monotonic()
    with torch.no_grad():
        logits = m(tokens, on_attn=on_attn)
    t_fwd = time.monotonic() - t0
    heads.flush()

    total /= total.sum(axis=1, keepdims=True)
    np.save(mean_path, total.astype(np.float32))

    # The longest context the model trained on (train.py's schedule), and
    # how the model fares past it: next-byte loss before and after, and the
    # head-averaged mass at distances it never saw in training.
    sched = lm.meta(weights).get("schedule")
    try:
        C = max(sched[1][1], sched[2][1])
    except (TypeError, IndexError):
        C = 1024
    nll = torch.nn.functional.cross_entropy(
        logits[:-1], tokens[1:], reduction="none").double().numpy()
    beyond = None
    if T > C:
        far = np.array([total[t, :t - C + 1].sum() for t in range(C, T)])
        # The same bytes again, each token seeing only the C positions up
        # to itself (distances the model trained on): if that predicts
        # better, the full-context attention past C is out of distribution.
        # And once more seeing BOS and the last C - 1 (what a window with
        # one sink keeps): if that is better again, BOS matters.
        pos = torch.arange(T)
        dist = pos[:, None] - pos[None, :]
        causal = dist >= 0
        masks = (("window", causal & (dist < C)),
                 ("bos", causal & ((dist < C - 1) | (pos[None, :] == 0))))
        wnll = {}
        for key, mask in masks:
            with torch.no_grad():
                wlogits = m(tokens, mask=mask)
            wnll[key] = torch.nn.functional.cross_entropy(
                wlogits[:-1], tokens[1:], reduction="none").double().numpy()
            del wlogits
        beyond = {
            "train_context": C,
            "loss_before": float(nll[:C - 1].mean()),
            "loss_after": float(nll[C - 1:].mean()),
            "loss_after_window": float(wnll["window"][C - 1:].mean()),
            "loss_after_window_bos": float(wnll["bos"][C - 1:].mean()),
            "far_mass_rows": [C, T - 1],
            "far_mass": float(far.mean()),
        }

    # What attention spread evenly over 0..t would put on the first S
    # positions and on position 0, averaged over the same rows.
    n = t_idx[rows] + 1.0
    uniform_first = float(np.mean(np.minimum(S, n) / n))
    uniform_pos0 = float(np.mean(1.0 / n))
    per = [stats[(l, h)] for l in range(L) for h in range(H)]
    summary = {
        "model": os.path.relpath(weights, ROOT),
        "text": text_path,
        "T": T,
        "sinks": S,
        "rows": [a.rows_from, T - 1],
        "what": "mean over rows t in rows of the attention mass of token t "
                "on positions 0..sinks-1 (first), on 0 (pos0), on "
                "sinks..2*sinks-1 (next), on t-sinks+1..t (recent); "
                "uniform_*: the same for attention spread evenly over 0..t",
        "uniform_first": uniform_first,
        "uniform_pos0": uniform_pos0,
        "mean_first": float(np.mean([s["first"] for s in per])),
        "mean_pos0": float(np.mean([s["pos0"] for s in per])),
        "mean_next": float(np.mean([s["next"] for s in per])),
        "mean_recent": float(np.mean([s["recent"] for s in per])),
        "max_first": max(s["first"] for s in per),
        "heads": per,
        "loss": float(nll.mean()),
        "beyond_training": beyond,
    }
    with open(os.path.join(a.out, "sinks.json"), "w") as f:
        json.dump(summary, f, indent=1)
        f.write("\n")

    print("dump.py: T = %d tokens (BOS and %d bytes of %s), forward and dump "
          "%.1f s; wrote %s, %s, sinks.json"
          % (T, T - 1, text_path, t_fwd, mean_path, heads_path))
    print("dump.py: float16 rows: max |sum - 1| %.2e, %d rows rescaled"
          % (worst[0], fixed[0]))
    print("dump.py: mass on the first %d positions (rows t >= %d): mean "
          "%.4f over %d layer-heads, max %.4f; uniform would give %.4f; "
          "positions %d..%d get %.4f; position 0 (BOS) %.4f (max %.4f, "
          "uniform %.4f)"
          % (S, a.rows_from, summary["mean_first"], L * H,
             summary["max_first"], uniform_first, S, 2 * S - 1,
             summary["mean_next"], summary["mean_pos0"],
             max(s["pos0"] for s in per), uniform_pos0))
    if beyond:
        print("dump.py: past the training context (%d tokens): loss %.3f "
              "nats/byte (%.3f before it; %.3f on the same bytes when each "
              "sees only the last %d, %.3f when it sees BOS and the last "
              "%d); rows t >= %d put %.4f of their attention "
              "(head-averaged) at distances >= %d"
              % (C, beyond["loss_after"], beyond["loss_before"],
                 beyond["loss_after_window"], C,
                 beyond["loss_after_window_bos"], C - 1, C,
                 beyond["far_mass"], C))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
    except (OSError, RuntimeError, MemoryError) as e:
        fail(str(e), 1)
