#!/usr/bin/python3
"""evictd-llama serve under load: tokens/s and evictd's share of the decode
iterations with 1 and with 8 concurrent completions (different prompts,
greedy), the real daemon over a unix socket and the real server, read from
the server's /metrics (evictd_llama_evictd_seconds_total over
evictd_llama_iteration_seconds_total) and wall time.

  tests/bench/serve.py [EVICTD EVICTD_LLAMA MODEL.gguf]
  (defaults: build/evictd, build/evictd-llama, build/llama/evictd-lm.gguf;
  BENCH_N tokens per completion, default 400)"""

import os
import sys
import tempfile
import threading
import time

from support import paths
from support.daemon import Daemon
from support.metrics import scrape
from support.serve import Serve, complete

if len(sys.argv) == 4:
    os.environ["EVICTD_BIN"], os.environ["EVICTD_LLAMA"] = sys.argv[1:3]
GGUF = sys.argv[3] if len(sys.argv) == 4 else \
    paths.llama_model("evictd-lm.gguf")
PROMPTS = ["The quick brown fox jumps", "Once upon a time there",
           "In the beginning was", "A long way from home, the"]
N = int(os.environ.get("BENCH_N", "400"))
ARGS = ["--budget", "256", "--sinks", "4", "--lookahead", "16",
        "--parallel", "8"]


def run(addr: str, k: int) -> None:
    before = scrape(addr)
    t0 = time.monotonic()
    th = [threading.Thread(target=complete,
                           args=(addr, "%d: %s" % (i, PROMPTS[i % 4]), N))
          for i in range(k)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    wall = time.monotonic() - t0
    m = scrape(addr)
    d = {key: m[key] - before.get(key, 0) for key in m}
    it = d["evictd_llama_iterations_total"]
    tot = d["evictd_llama_iteration_seconds_total"]
    evd = d["evictd_llama_evictd_seconds_total"]
    print("%2d concurrent: %6.0f tokens/s (%d tokens in %.2f s), %4d "
          "iterations of %.0f us (evictd %.0f us, %.1f%%), %.1f steps per "
          "batch" % (k, d["evictd_llama_tokens_predicted_total"] / wall,
                     d["evictd_llama_tokens_predicted_total"], wall, it,
                     1e6 * tot / it, 1e6 * evd / it, 100 * evd / tot,
                     d["evictd_llama_steps_total"] / it))


def main() -> None:
    tmp = tempfile.TemporaryDirectory(prefix="bench-serve-")
    d = Daemon.started(tmp.name,
                       listen="unix:" + os.path.join(tmp.name, "evictd.sock"))
    sv = Serve(tmp.name, d.url, *ARGS, model=GGUF)
    try:
        print("evictd-llama serve, %s, budget 256, sinks 4, lookahead 16, "
              "%d tokens per completion" % (os.path.basename(GGUF), N))
        run(sv.addr, 1)  # warm-up
        for k in (1, 8):
            run(sv.addr, k)
    finally:
        sv.stop()
        d.stop()
        tmp.cleanup()


if __name__ == "__main__":
    main()
