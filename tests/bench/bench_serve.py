#!/usr/bin/python3
"""`make bench-serve`: evictd-llama serve (with evictd on a Unix socket)
beside llama-server built from the same llama.cpp tree, on the same GGUF,
threads, K/V type and flash-attention setting, under 1, 8 and 32
concurrent streaming clients of /v1/completions: aggregate tokens/s, time
to first token and inter-token latency (p50, p99), then one generation of
4x the per-sequence context.

  tests/bench/bench_serve.py EVICTD EVICTD_LLAMA LLAMA_SERVER MODEL.gguf...

Environment: BENCH_TOKENS (tokens per completion, default 128),
BENCH_CTX (per-sequence context, default 256), BENCH_THREADS (default 2),
BENCH_CONCURRENCY (default "1,8,32"), BENCH_KV (f16), BENCH_FA (off),
BENCH_RUNS (runs per configuration, the median reported; default 1),
BENCH_PARTS ("table,breakdown": the side-by-side table, where an
iteration goes).
Both servers run with as many slots / sequences as clients, so every
client decodes from its first iteration on. evictd-llama runs twice: as
it is (each iteration's steps sent to evictd before the pass that
precedes them, answered while it runs) and with EVICTD_LLAMA_PIPELINE=off
(each iteration waits for its steps' answer before its pass: before the
pipelining). Last, where an iteration's time goes (serve's /metrics),
with and without the pipelining, serve pinned to CPU 0 and evictd (with
the clients) to CPU 1 when taskset may: the sidecar with a core of its
own."""

import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import List, Optional, Tuple

TOKENS = int(os.environ.get("BENCH_TOKENS", "128"))
CTX = int(os.environ.get("BENCH_CTX", "256"))
THREADS = int(os.environ.get("BENCH_THREADS", "2"))
CONC = [int(x) for x in os.environ.get("BENCH_CONCURRENCY",
                                       "1,8,32").split(",")]
KV = os.environ.get("BENCH_KV", "f16")
FA = os.environ.get("BENCH_FA", "off")
RUNS = int(os.environ.get("BENCH_RUNS", "1"))
PARTS = os.environ.get("BENCH_PARTS", "table,breakdown").split(",")
# serve decodes a prompt in chunks of the session's lookahead, one pass
# each; llama-server in one pass. The prompts here are all shorter than 32
# tokens, so both take one.
LOOKAHEAD = 32
PROMPTS = ["Once upon a time", "The little dog", "One day, a girl named",
           "Tom and his mom went", "The sun was", "A big red ball",
           "In the park there was", "The cat sat"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(port: int, proc: subprocess.Popen, what: str,
               path: str = "/health") -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit("%s exited (%d) before it was ready" %
                             (what, proc.returncode))
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", path)
            if c.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise SystemExit("%s not ready after 120 s" % what)


def stop(proc: Optional[subprocess.Popen]) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def stream(port: int, prompt: str,
           n: int) -> Tuple[List[float], int, str, str]:
    """One streaming completion: the arrival time of every chunk that
    carries text (seconds since the request was sent; the first is the
    time to first token), the tokens generated (the usage the server
    reports: a chunk may hold more than one token, or a token no text, when
    a character spans tokens), the text and the finish reason."""
    # cache_prompt (llama-server's; serve ignores it): no reuse of a slot's
    # cells from an earlier request with the same prompt, which serve
    # does not do either, so that both decode every prompt.
    body = json.dumps({"prompt": prompt, "max_tokens": n, "stream": True,
                       "stream_options": {"include_usage": True},
                       "temperature": 0, "model": "bench",
                       "cache_prompt": False})
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    t0 = time.monotonic()
    c.request("POST", "/v1/completions", body,
              {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise SystemExit("completion: %d %s" % (r.status, r.read()[:300]))
    times: List[float] = []
    text, finish, tokens = [], "", 0
    for raw in r:
        line = raw.strip()
        if not line.startswith(b"data: "):
            continue
        data = line[6:]
        if data == b"[DONE]":
            break
        ev = json.loads(data)
        if ev.get("usage"):
            tokens = ev["usage"]["completion_tokens"]
        if not ev.get("choices"):
            continue  # the usage chunk
        ch = ev["choices"][0]
        if ch.get("finish_reason"):
            finish = ch["finish_reason"]
        if ch.get("text"):
            times.append(time.monotonic() - t0)
            text.append(ch["text"])
    c.close()
    if not tokens:
        raise SystemExit("the server reported no usage")
    return times, tokens, "".join(text), finish


def load(port: int, k: int, n: int) -> dict:
    """k clients at once, each one completion of n tokens."""
    res: List[Optional[Tuple[List[float], int, str, str]]] = [None] * k
    errs: List[BaseException] = []

    def one(i: int) -> None:
        try:
            res[i] = stream(port, "%s %d" % (PROMPTS[i % len(PROMPTS)], i), n)
        except BaseException as e:  # noqa: B902 (reported below)
            errs.append(e)
    th = [threading.Thread(target=one, args=(i,)) for i in range(k)]
    t0 = time.monotonic()
    for t in th:
        t.start()
    for t in th:
        t.join()
    wall = time.monotonic() - t0
    if errs:
        raise SystemExit("a client failed: %r" % errs[0])
    ttft = [r[0][0] for r in res if r and r[0]]
    itl = [b - a for r in res if r for a, b in zip(r[0], r[0][1:])]
    tokens = sum(r[1] for r in res if r)
    q = statistics.quantiles
    return {"tok_s": tokens / wall, "tokens": tokens,
            "ttft50": statistics.median(ttft) * 1e3,
            "ttft99": (q(ttft, n=100)[98] if len(ttft) > 1 else ttft[0]) * 1e3,
            "itl50": statistics.median(itl) * 1e3,
            "itl99": q(itl, n=100)[98] * 1e3}


class Pair:
    """evictd on a Unix socket and evictd-llama serve beside it."""

    def __init__(self, evictd: str, engine: str, model: str, k: int,
                 tmp: str, pipeline: bool = True,
                 pin: Tuple[List[str], List[str]] = ([], []),
                 threads: int = THREADS) -> None:
        self.sock = os.path.join(tmp, "evictd-%d.sock" % k)
        self.evictd = subprocess.Popen(
            pin[1] + [evictd, "--listen", "unix:" + self.sock,
                      "--max-sessions", "100000"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=open(os.path.join(tmp, "evictd.log"), "ab"))
        for _ in range(200):
            if os.path.exists(self.sock):
                break
            time.sleep(0.05)
        self.port = free_port()
        self.proc = subprocess.Popen(
            pin[0] + [engine, "serve", "-m", model, "--evictd",
                      "unix:" + self.sock,
             "--host", "127.0.0.1", "--port", str(self.port),
             "--parallel", str(k), "--threads", str(threads),
             "--budget", str(CTX - LOOKAHEAD), "--sinks", "4",
             "--lookahead", str(LOOKAHEAD), "--cache-type-k", KV,
             "--cache-type-v", KV, "--flash-attn", FA,
             "--n-predict-max", str(64 * CTX), "--queue", str(4 * k)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=open(os.path.join(tmp, "serve.log"), "ab"),
            env=dict(os.environ, EVICTD_LLAMA_PIPELINE="on" if pipeline
                     else "off"))
        wait_ready(self.port, self.proc, "evictd-llama serve")

    def close(self) -> None:
        stop(self.proc)
        stop(self.evictd)


class LlamaServer:
    """llama-server with k slots of CTX cells each."""

    def __init__(self, binary: str, model: str, k: int, tmp: str) -> None:
        self.port = free_port()
        self.proc = subprocess.Popen(
            [binary, "-m", model, "--host", "127.0.0.1", "--port",
             str(self.port), "-np", str(k), "-c", str(CTX * k),
             "-t", str(THREADS), "-ctk", KV, "-ctv", KV, "-fa", FA,
             "--no-webui"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=open(os.path.join(tmp, "llama-server.log"), "ab"))
        wait_ready(self.port, self.proc, "llama-server")

    def close(self) -> None:
        stop(self.proc)


def metrics(port: int) -> dict:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    c.close()
    return {f[0]: float(f[1]) for f in (line.split() for line in
                                        text.splitlines())
            if len(f) == 2 and not f[0].startswith("#")}


def pinning() -> Tuple[List[str], List[str], str]:
    """taskset prefixes: serve on CPU 0, evictd on CPU 1 (this process
    too: the clients share evictd's core), when the machine has two CPUs
    and taskset may use them."""
    try:
        ok = (os.cpu_count() or 1) >= 2 and all(
            subprocess.run(["taskset", "-c", c, "true"],
                           capture_output=True).returncode == 0
            for c in ("0", "1"))
    except OSError:
        ok = False
    if not ok:
        return [], [], "not pinned (taskset not allowed, or one CPU)"
    os.sched_setaffinity(0, {1})
    return (["taskset", "-c", "0"], ["taskset", "-c", "1"],
            "serve on CPU 0, evictd and the clients on CPU 1")


def breakdown(evictd: str, engine: str, models: List[str],
              tmp: str) -> None:
    """Where serve's iterations go, with and without the steps sent
    ahead of the pass, from its /metrics over N completions of 400
    tokens."""
    srv_pin, evd_pin, how = pinning()
    # Pinned, serve has one CPU: one llama.cpp thread.
    threads = 1 if srv_pin else THREADS
    print("\n== where an iteration of evictd-llama serve goes (its /metrics;"
          " %s; %d thread(s))" % (how, threads))
    print("%-22s %4s %-13s %11s %11s %11s %9s" %
          ("model", "conc", "steps", "iteration", "evictd wait",
           "llama_decode", "ahead"))
    for model in models:
        for k in (1, 8):
            for pipeline in (False, True):
                srv = Pair(evictd, engine, model, k, tmp, pipeline,
                           (srv_pin, evd_pin), threads)
                try:
                    load(srv.port, k, 16)
                    runs = []
                    for _ in range(RUNS):
                        m0 = metrics(srv.port)
                        load(srv.port, k, 400)
                        m1 = metrics(srv.port)
                        d = {x: m1[x] - m0.get(x, 0) for x in m1}
                        it = d["evictd_llama_iterations_total"]
                        runs.append({
                            "it": d["evictd_llama_iteration_seconds_total"]
                            / it * 1e6,
                            "evd": d["evictd_llama_evictd_seconds_total"]
                            / it * 1e6,
                            "dec": d["evictd_llama_decode_seconds_total"]
                            / it * 1e6,
                            "ahead": d["evictd_llama_steps_ahead_total"]
                            / d["evictd_llama_steps_total"]})
                    r = median_of(runs)
                finally:
                    srv.close()
                print("%-22s %4d %-13s %9.0fus %9.0fus %10.0fus %8.0f%%" %
                      (os.path.basename(model), k,
                       "sent ahead" if pipeline else "waited for",
                       r["it"], r["evd"], r["dec"], 100 * r["ahead"]))


def median_of(runs: List[dict]) -> dict:
    return {key: statistics.median(r[key] for r in runs) for key in runs[0]}


def main() -> None:
    if len(sys.argv) < 5:
        raise SystemExit(__doc__)
    evictd, engine, lserver = sys.argv[1:4]
    models = sys.argv[4:]
    tmp = tempfile.mkdtemp(prefix="bench-serve-")
    if "table" in PARTS:
        table(evictd, engine, lserver, models, tmp)
    if "breakdown" in PARTS:
        breakdown(evictd, engine, models, tmp)


def table(evictd: str, engine: str, lserver: str, models: List[str],
          tmp: str) -> None:
    print("== evictd-llama serve + evictd (unix socket) beside llama-server,"
          " the same llama.cpp tree")
    print("   %d threads, K/V %s, flash attention %s, context %d per "
          "sequence, %d tokens per completion, streaming /v1/completions, "
          "median of %d run(s)" % (THREADS, KV, FA, CTX, TOKENS, RUNS))
    hdr = ("%-22s %4s %-12s %9s %9s %9s %9s %9s" %
           ("model", "conc", "server", "tokens/s", "TTFT p50", "TTFT p99",
            "ITL p50", "ITL p99"))
    print(hdr)
    for model in models:
        name = os.path.basename(model)
        for k in CONC:
            rows = {}
            for label, make in (("llama-server",
                                 lambda: LlamaServer(lserver, model, k, tmp)),
                                ("evictd-llama",
                                 lambda: Pair(evictd, engine, model, k, tmp)),
                                ("no pipelining",
                                 lambda: Pair(evictd, engine, model, k, tmp,
                                              False))):
                srv = make()
                try:
                    load(srv.port, min(k, 2), 8)  # warm-up
                    rows[label] = median_of([load(srv.port, k, TOKENS)
                                             for _ in range(RUNS)])
                finally:
                    srv.close()
            for label, r in rows.items():
                print("%-22s %4d %-12s %9.0f %7.1fms %7.1fms %7.2fms "
                      "%7.2fms" % (name, k, label, r["tok_s"], r["ttft50"],
                                   r["ttft99"], r["itl50"], r["itl99"]))
            a, b = rows["evictd-llama"], rows["llama-server"]
            print("%-22s %4d %-12s %8.2fx %8.2fx %8s %8.2fx %8.2fx" %
                  (name, k, "ratio", a["tok_s"] / b["tok_s"],
                   a["ttft50"] / b["ttft50"], "", a["itl50"] / b["itl50"],
                   a["itl99"] / b["itl99"]))
        # One generation of 4x the per-sequence context.
        n = 4 * CTX
        for label, make in (("llama-server",
                             lambda: LlamaServer(lserver, model, 1, tmp)),
                            ("evictd-llama",
                             lambda: Pair(evictd, engine, model, 1, tmp))):
            srv = make()
            try:
                _, got, _, finish = stream(srv.port, PROMPTS[0], n)
            finally:
                srv.close()
            print("%-22s %4d %-12s asked %d tokens (4x the context %d): got "
                  "%d, finish_reason %s" % (name, 1, label, n, CTX,
                                            got, finish or "-"))


if __name__ == "__main__":
    main()
