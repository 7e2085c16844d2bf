#!/usr/bin/env python3
"""The Python pool's side of tests/bench/pool.sh: creates SESSIONS sessions
through an EvictdPool of the URLs given, then steps them all, one pool
batch per iteration, for SECONDS; prints "steps_per_s N iters N".
Usage: bench_pool.py SESSIONS SECONDS URL..."""
import sys
import time

from evictd_client import StepResult
from evictd_pool import EvictdPool


def main():
    sessions, seconds, urls = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3:]
    ids = [f"py{sessions}-{i}" for i in range(sessions)]
    with EvictdPool(urls) as pool:
        for sid in ids:
            pool.create(sid, budget=64)
        pos, iters, t0 = 1, 0, time.monotonic()
        while True:
            out = pool.batch([{"session": s, "pos": pos} for s in ids])
            bad = [r for r in out if not isinstance(r, StepResult)]
            if bad:
                sys.exit(f"bench_pool: {bad[0]}")
            pos, iters = pos + 1, iters + 1
            t = time.monotonic() - t0
            if t >= seconds:
                break
    print(f"steps_per_s {iters * sessions / t:.0f} iters {iters}")


if __name__ == "__main__":
    main()
