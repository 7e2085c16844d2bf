#!/usr/bin/env python3
"""The Python client's side of tests/bench/client.sh: the same decode
iterations as bench_client.c (one step, or one batch of N steps, per
iteration, once every window of 512 is full and after 100 iterations of
warm-up)
through deploy/clients/python's EvictdClient, timed over repetitions of
--seconds each. Prints "rep us_per_iter=X" per repetition."""
import argparse
import sys
import time

sys.dont_write_bytecode = True
from evictd_client import EvictdClient  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--sessions", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--prefix", default="py")
    a = ap.parse_args()
    ids = ["%s%d" % (a.prefix, i) for i in range(a.sessions)]
    pos = 1
    with EvictdClient(a.url) as ev:
        def iterate():
            nonlocal pos
            if a.sessions == 1:
                r = ev.step(ids[0], pos)
            else:
                # What an engine builds each iteration: one item per
                # sequence.
                out = ev.batch([{"session": s, "pos": pos} for s in ids])
                r = out[-1]
                if any(isinstance(x, Exception) for x in out):
                    raise SystemExit("bench_client.py: %r" % out)
            pos += 1
            return r

        # Positions 1..599 in every window of 512, so that every step
        # evicts; then a short warm-up.
        for s in ids:
            ev.step(s, positions=list(range(1, 600)))
        pos = 600
        while pos < 700:
            iterate()
        for _ in range(a.reps):
            n, t0 = 0, time.perf_counter()
            while True:
                r = iterate()
                n += 1
                t = time.perf_counter() - t0
                if t >= a.seconds:
                    break
            print("rep us_per_iter=%.2f" % (t / n * 1e6), flush=True)
        if len(r.victims) != 1:
            raise SystemExit("bench_client.py: the window did not evict")


if __name__ == "__main__":
    main()
