#!/usr/bin/python3
"""`make bench-convs`: what a chat turn costs as a conversation grows (issue
30's table). One conversation through /v1/completions on stories260K, one
slot, one llama.cpp thread, f16 K/V, flash attention off, on three
servers side by side:

  llama-server   built from the same llama.cpp tree, -c 2048 -np 1 (a slot
                 of the model's training context), its prompt cache on (its
                 default);
  serve          evictd-llama serve + evictd on a Unix socket, its defaults
                 (conversations kept, the daemon's budget and sinks, chunks
                 of 512);
  serve, no cache  the same with --no-cache-prompt: every turn decoded
                 afresh, as serve did before issue 30.

  tests/bench/bench_convs.py EVICTD EVICTD_LLAMA LLAMA_SERVER MODEL.gguf

Each turn's prompt is the previous turn's prompt, its answer (32 tokens,
greedy, ignore_eos) and the next of 5 user lines of 10 or 11 tokens; each
server carries its own conversation (a client sends back the answer it
got). Per turn: prompt tokens, prompt tokens evaluated (llama-server:
timings.prompt_n; serve: its /metrics' evictd_llama_prompt_tokens_decoded
_total), the request's wall time. Time is the median of BENCH_RUNS
(default 3) repetitions: for llama-server and serve, whole conversations
on freshly started servers (a continued turn cannot be sent twice: the
second would find the first's answer parked), in an order that rotates
between runs; for serve without a cache, one conversation whose reported
turns are each sent BENCH_RUNS times (a stateless request costs the same
every time). The texts are compared where greedy decoding must give the
same answer, and where they may differ the first such turn is shown with
the reason.

BENCH_CONV_TURNS (default 300), BENCH_CONV_REPORT (the turns shown,
default 10,40,100,300), BENCH_CONV_NOCACHE_TURNS (default 119: serve
without a cache carries its own conversation this far, and past it is
sent serve's prompt of each reported turn), BENCH_CONV_SERVE (extra serve
flags, e.g. "--budget 256 --sinks 4"), BENCH_THREADS (default 1).

This is part "turns"; BENCH_PARTS (default
turns,slots,long,prefill,rewind,families) chooses the parts and their
order, the others in bench_convs_parts.py (16 conversations over 8 slots,
one conversation to a million tokens, prefill, regenerated answers) and
bench_families.py (chats with sliding-window and hybrid models), each
with its own table and its issue's targets as MET / NOT MET. A benchmark: it prints figures and asserts nothing.
"""

import http.client
import json
import os
import statistics
import sys
import tempfile
import time
from typing import Dict, List, Optional, Tuple

from support import metrics as prom
from support.daemon import Daemon
from support.llama_server import LlamaServer
from support.process import wait_healthy
from support.serve import Serve

RUNS = int(os.environ.get("BENCH_RUNS", "3"))
TURNS = int(os.environ.get("BENCH_CONV_TURNS", "300"))
REPORT = [int(t) for t in
          os.environ.get("BENCH_CONV_REPORT", "10,40,100,300").split(",")]
# Serve without a cache carries its own conversation this far; a reported
# turn past it is serve's prompt of that turn, sent afresh (a whole
# conversation of 300 fresh decodes would take a quarter of an hour).
NOCACHE_TURNS = int(os.environ.get("BENCH_CONV_NOCACHE_TURNS", "119"))
PARTS = os.environ.get("BENCH_PARTS",
                       "turns,slots,long,prefill,rewind,families").split(",")
SERVE_EXTRA = os.environ.get("BENCH_CONV_SERVE", "").split()
THREADS = int(os.environ.get("BENCH_THREADS", "1"))
ANSWER = 32          # tokens answered per turn
CTX = 2048           # stories260K's training context: llama-server's slot
COMMON = ["-ctk", "f16", "-ctv", "f16", "-fa", "off"]
# The user lines, 10 or 11 tokens each in stories260K's vocabulary.
LINES = ["\nTom ran to mom.\n", "\nThe cat was sad.\n",
         "\nThey played ball.\n", "\nThe sun was hot.\n",
         "\nTom had a toy.\n"]
OPENING = "Once upon a time, there was a little girl named Lily."
NAMES = ("llama-server", "serve", "serve, no cache")


# ---- processes ----------------------------------------------------------

class Pair:
    """evictd on a Unix socket and evictd-llama serve beside it."""

    def __init__(self, evictd: str, engine: str, model: str, tmp: str,
                 extra: List[str], np: int = 1) -> None:
        self.evictd = Daemon.started(
            tmp, listen="unix:" + os.path.join(tmp, "evictd.sock"),
            binary=evictd)
        try:
            self.serve = Serve(
                tmp, self.evictd.url, "-np", str(np), "-t", str(THREADS),
                *(([] if "--exact" in extra else COMMON) + SERVE_EXTRA +
                  extra), model=model, binary=engine)
            wait_healthy(self.serve.addr, self.serve.proc,
                         "evictd-llama serve")
        except BaseException:
            self.evictd.stop()
            raise
        self.proc, self.port = self.serve.proc, self.serve.port

    def settings(self) -> Tuple[int, int, int]:
        """The budget, sinks and lookahead serve said it runs with."""
        s = self.serve.settings
        return s["budget"], s["sinks"], s["lookahead"]

    def metrics(self) -> Dict[str, float]:
        """serve's /metrics: each series and its value."""
        return prom.scrape(self.serve.addr)

    def decoded(self) -> float:
        """Prompt tokens serve decoded so far (its /metrics)."""
        m = self.metrics().get("evictd_llama_prompt_tokens_decoded_total")
        if m is None:
            raise SystemExit("serve's /metrics has no prompt_tokens_decoded")
        return m

    def close(self) -> None:
        self.serve.stop()
        self.evictd.stop()
        sock = self.evictd.addr[len("unix:"):]
        if os.path.exists(sock):
            os.unlink(sock)


def llama_server(binary: str, model: str, tmp: str,
                 np: int = 1) -> LlamaServer:
    """llama-server, np slots of CTX cells each, its prompt cache on."""
    return LlamaServer(binary, model, "-np", str(np), "-c", str(CTX * np),
                       "-t", str(THREADS), "--no-webui", *COMMON,
                       log_path=os.path.join(tmp, "llama-server.log"))


def post(port: int, body: dict, path: str = "/v1/completions"
         ) -> Tuple[int, dict, float]:
    """One request (by default /v1/completions): status, answer (an
    error's too), wall seconds."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    t0 = time.monotonic()
    c.request("POST", path, json.dumps(body),
              {"Content-Type": "application/json"})
    r = c.getresponse()
    raw = r.read()
    dt = time.monotonic() - t0
    c.close()
    try:
        ans = json.loads(raw)
    except ValueError:
        ans = {"error": {"message": raw[:200].decode(errors="replace")}}
    return r.status, ans, dt


def error_text(ans: dict) -> str:
    e = ans.get("error")
    return (e.get("message", "") if isinstance(e, dict) else str(e))[:160]


# ---- one conversation ---------------------------------------------------

def conversation(srv, repeat: Tuple[int, ...] = (),
                 turns: int = TURNS) -> List[dict]:
    """turns turns of a growing prompt on srv; a record per turn answered,
    then one for the turn refused (its "error"), if any. The turns in
    repeat are sent RUNS times (srv must keep nothing between requests)."""
    recs: List[dict] = []
    prompt = OPENING + LINES[0]
    for turn in range(1, turns + 1):
        times, texts = [], []
        for _ in range(RUNS if turn in repeat else 1):
            d0 = srv.decoded() if isinstance(srv, Pair) else 0.0
            status, ans, dt = post(srv.port, {
                "prompt": prompt, "max_tokens": ANSWER, "temperature": 0,
                "ignore_eos": True})
            if status != 200:
                recs.append({"turn": turn, "error": "HTTP %d %s" % (
                    status, error_text(ans)), "chars": len(prompt)})
                return recs
            if isinstance(srv, Pair):
                evaluated = srv.decoded() - d0
            else:
                evaluated = ans.get("timings", {}).get("prompt_n")
            times.append(dt)
            texts.append(ans["choices"][0]["text"])
        recs.append({"turn": turn, "s": times, "texts": texts,
                     "body": prompt,
                     "prompt": ans["usage"]["prompt_tokens"],
                     "answered": ans["usage"]["completion_tokens"],
                     "evaluated": evaluated})
        prompt += texts[0] + LINES[turn % len(LINES)]
    return recs


def loadavg() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def fmt(v, spec: str, unit: str = "") -> str:
    return "-" if v is None else format(v, spec) + unit


def first_diff(a: List[dict], b: List[dict]) -> Optional[int]:
    """The first turn both answered whose texts differ (each run's first
    text), or None."""
    for x, y in zip(a, b):
        if "error" in x or "error" in y:
            return None
        if x["texts"][0] != y["texts"][0]:
            return x["turn"]
    return None


def part_turns(evictd: str, engine: str, lserver: str, model: str,
               tmp: str) -> None:
    """Part "turns": one conversation of TURNS turns on the three servers,
    and issue 30's first and third targets."""
    load0, t_start = loadavg(), time.monotonic()
    print("== conversations (issue 30): one conversation of %d turns "
          "through /v1/completions, %s, one slot, %d thread, f16 K/V, "
          "flash attention off, %d tokens answered per turn; time: median "
          "of %d" % (TURNS, os.path.basename(model), THREADS, ANSWER, RUNS))

    # runs[name]: one list of turn records per repetition.
    runs: Dict[str, List[List[dict]]] = {n: [] for n in NAMES}
    settings = (0, 0, 0)
    for run in range(RUNS):
        order = list(NAMES)
        order = order[run % 3:] + order[:run % 3]
        for name in order:
            if name == "serve, no cache" and run > 0:
                continue  # stateless: its repetitions are within one run
            t0 = time.monotonic()
            if name == "llama-server":
                srv = llama_server(lserver, model, tmp)
            else:
                srv = Pair(evictd, engine, model, tmp,
                           ["--no-cache-prompt"] if "no cache" in name
                           else [])
                settings = srv.settings()
            try:
                if "no cache" in name:
                    recs = conversation(srv, tuple(REPORT),
                                        min(TURNS, NOCACHE_TURNS))
                    recs += replay(srv, runs["serve"][0], recs)
                else:
                    recs = conversation(srv)
            finally:
                srv.close()
            runs[name].append(recs)
            print("  run %d %-16s %3d turns, %.0f s%s" % (
                run + 1, name, sum("error" not in r for r in recs),
                time.monotonic() - t0, "; " + recs[-1]["error"]
                if "error" in recs[-1] else ""), file=sys.stderr)
    load1 = loadavg()
    budget, sinks, lookahead = settings

    def at(name: str, turn: int) -> Optional[dict]:
        """turn's figures over name's repetitions: the median time, prompt
        and evaluated tokens (the first run's), or the refusal."""
        rs = [r for recs in runs[name] for r in recs if r["turn"] == turn]
        if not rs:
            return None
        if "error" in rs[0]:
            return {"error": rs[0]["error"]}
        return {"s": statistics.median(s for r in rs for s in r["s"]),
                "n": sum(len(r["s"]) for r in rs),
                "prompt": rs[0]["prompt"], "evaluated": rs[0]["evaluated"]}

    lmax = max((r["turn"] for r in runs["llama-server"][0]
                if "error" not in r), default=0)
    shown = sorted(set(t for t in REPORT if t <= TURNS) | {lmax} - {0})
    print("serve: budget %d, sinks %d, lookahead %d%s; llama-server: -c %d "
          "-np 1; load average %s at the start, %s at the end, %.0f s" % (
              budget, sinks, lookahead,
              " (" + " ".join(SERVE_EXTRA) + ")" if SERVE_EXTRA else "",
              CTX, load0, load1, time.monotonic() - t_start))
    print("%5s %7s | %-21s | %-21s | %-21s | %8s %8s %8s" % (
        "turn", "prompt", "llama-server", "serve", "serve, no cache",
        "s/llama", "s/nocache", "s/s@10"))
    print("%5s %7s | %9s %11s | %9s %11s | %9s %11s |" % (
        "", "tokens", "time", "evaluated", "time", "evaluated", "time",
        "evaluated"))
    s10 = at("serve", 10)
    for t in shown:
        cells, figs = [], {}
        for name in NAMES:
            f = at(name, t)
            figs[name] = f
            if f is None:
                cells.append("%-21s" % "-")
            elif "error" in f:
                cells.append("%-21s" % "refused")
            else:
                cells.append("%7.1fms %11s" % (f["s"] * 1e3,
                                               fmt(f["evaluated"], ".0f")))
        s, ll, nc = figs["serve"], figs["llama-server"], \
            figs["serve, no cache"]

        def ratio(a, b):
            return (fmt(a["s"] / b["s"], ".2f", "x") if a and b and
                    "s" in a and "s" in b else "-")
        print("%5d %7s | %s | %s | %s | %8s %8s %8s" % (
            t, fmt(s and s.get("prompt"), ".0f"), cells[0], cells[1],
            cells[2], ratio(s, ll), ratio(s, nc), ratio(s, s10)))
    print("(prompt tokens: serve's conversation; the others' differ by a "
          "few where their texts differ. evaluated: prompt tokens decoded "
          "by the turn; the %d answered are decoded besides. time: median "
          "of %s)" % (ANSWER, ", ".join(
              "%s %d" % (n, (at(n, shown[0]) or {}).get("n", 0))
              for n in NAMES)))
    for st in (r for recs in runs["llama-server"][:1] for r in recs
               if "error" in r):
        print("llama-server refused turn %d (a prompt of %d characters): "
              "%s" % (st["turn"], st["chars"], st["error"]))

    # Sums over the turns every server answered, and serve's evaluated
    # tokens per turn over the whole conversation.
    def total(name: str, last: int) -> float:
        """The sum of name's median times over turns 1..last (nan when
        name did not carry the conversation that far)."""
        f = [at(name, t) for t in range(1, last + 1)]
        return sum(x["s"] if x and "s" in x else float("nan") for x in f)
    if lmax:
        print("turns 1..%d (llama-server's): sum of median times "
              "llama-server %.2f s, serve %.2f s (%.2fx), serve without a "
              "cache %.2f s" % (lmax, total("llama-server", lmax),
                                total("serve", lmax),
                                total("serve", lmax) /
                                total("llama-server", lmax),
                                total("serve, no cache", lmax)))
    last = min(TURNS, max(r["turn"] for r in runs["serve"][0]
                          if "error" not in r))
    ev = [r["evaluated"] for r in runs["serve"][0][1:last]]
    nc = min(last, NOCACHE_TURNS)
    if ev:
        print("serve, turns 2..%d: prompt tokens evaluated per turn median "
              "%.0f (min %.0f, max %.0f); turns 1..%d take %.2f s against "
              "%.2f s without a cache (%.2fx); turns 1..%d take %.2f s" % (
                  last, statistics.median(ev), min(ev), max(ev), nc,
                  total("serve", nc), total("serve, no cache", nc),
                  total("serve", nc) / total("serve, no cache", nc), last,
                  total("serve", last)))

    # One turn's median of 3 is at the mercy of a busy machine: the
    # medians over five turns at each end say the same less noisily.
    def span(name: str, a: int, b: int) -> Optional[float]:
        v = [x for recs in runs[name] for r in recs
             if a <= r["turn"] <= b and "error" not in r for x in r["s"]]
        return statistics.median(v) if v else None
    lo = min(REPORT)
    spans = [("serve", last), ("llama-server", lmax)]
    print("median time per turn, turns %d..%d against the last five: %s" % (
        lo - 4, lo, "; ".join(
            "%s %s against %s (turns %d..%d, %s)" % (
                name, fmt(span(name, lo - 4, lo) and
                          span(name, lo - 4, lo) * 1e3, ".1f", " ms"),
                fmt(span(name, hi - 4, hi) and span(name, hi - 4, hi) * 1e3,
                    ".1f", " ms"), hi - 4, hi,
                fmt(span(name, hi - 4, hi) / span(name, lo - 4, lo)
                    if span(name, hi - 4, hi) and span(name, lo - 4, lo)
                    else None, ".2f", "x"))
            for name, hi in spans if hi > lo)))

    # Issue 30's targets: turn 300 (the last) within 1.3x of turn 10, and
    # serve at most llama-server at every turn llama-server answers.
    s_last = at("serve", last)
    if s10 and s_last and "s" in s10 and "s" in s_last:
        r = s_last["s"] / s10["s"]
        print("TARGET serve's turn %d within 1.3x of its turn 10: %.2fx "
              "(%.1f against %.1f ms): %s" % (
                  last, r, s_last["s"] * 1e3, s10["s"] * 1e3,
                  "MET" if r <= 1.3 else "NOT MET"))
    worse = [(t, at("serve", t)["s"] / at("llama-server", t)["s"])
             for t in range(1, lmax + 1)
             if at("serve", t)["s"] > at("llama-server", t)["s"]]
    if lmax:
        # The closest turn says by how much a MET is met.
        near = max((at("serve", t)["s"] / at("llama-server", t)["s"], t)
                   for t in range(1, lmax + 1))
        print("TARGET serve's time at most llama-server's at each of turns "
              "1..%d: %s" % (lmax, "MET (the closest: turn %d, %.2fx)" % (
                  near[1], near[0]) if not worse else
                             "NOT MET at %d of %d turns (%s)" % (
                                 len(worse), lmax, ", ".join(
                                     "%d: %.2fx" % w for w in worse[:12]) +
                                 (", ..." if len(worse) > 12 else ""))))

    # Where the texts must agree: every repetition of one server (greedy,
    # same inputs); serve with and without its cache while the window has
    # never evicted (the cells are then the same: full attention over the
    # whole history).
    print("texts:")
    for name in NAMES:
        bad = []
        for recs in runs[name]:
            for r, r0 in zip(recs, runs[name][0]):
                if "error" not in r and (len(set(r["texts"])) > 1 or
                                         r["texts"][0] != r0["texts"][0]):
                    bad.append(r["turn"])
        print("  %s, its %s: %s" % (
            name, "repetitions of a turn" if "no cache" in name else
            "%d runs" % len(runs[name]),
            "the same at every turn" if not bad else
            "DIFFER at turns %s" % sorted(set(bad))))
    s0, n0, l0 = runs["serve"][0], runs["serve, no cache"][0], \
        runs["llama-server"][0]
    # The window first evicts at the turn whose prompt and answer pass the
    # budget.
    evicts = next((r["turn"] for r in s0 if "error" not in r and
                   r["prompt"] + ANSWER > budget), None)
    d = first_diff(s0, n0)
    print("  serve with and without its cache: %s; the window first "
          "evicts in turn %s (prompt + answer past budget %d)" % (
              "the same at every turn" if d is None else
              "first differ at turn %d" % d, fmt(evicts, "d"), budget))
    if d is not None and evicts is not None and d > evicts:
        print("    past an eviction they may: a continued conversation's "
              "cache holds each answer token as it was decoded, one at a "
              "time; a fresh decode steps the same tokens as prompt chunks "
              "of %d, whose later tokens see up to %d more of the oldest "
              "positions (deploy/llama/README.md, Conversations)" % (
                  lookahead, lookahead - 1))
    elif d is not None:
        # Before any eviction both hold the same cells; what differs is
        # how llama.cpp's fast kernels (f16 K/V) round a prompt decoded in
        # one batch against the same tokens decoded a turn at a time. Ask
        # llama-server to decode that turn's prompt afresh, and serve
        # --exact (F32, one thread) to play both ways.
        body = s0[d - 1]["body"]
        same = n0[d - 1]["body"] == body
        ls = llama_server(lserver, model, tmp)
        try:
            status, ans, _ = post(ls.port, {
                "prompt": body, "max_tokens": ANSWER, "temperature": 0,
                "ignore_eos": True, "cache_prompt": False})
        finally:
            ls.close()
        fresh = ans["choices"][0]["text"] if status == 200 else None
        print("    before any eviction (the prompts %s up to it): "
              "llama-server given turn %d's prompt with cache_prompt false "
              "answers %s" % (
                  "the same" if same else "NOT the same", d,
                  "as serve without a cache does" if fresh ==
                  n0[d - 1]["texts"][0] else "as serve with its cache does"
                  if fresh == s0[d - 1]["texts"][0] else
                  "neither" if status == 200 else
                  "HTTP %d %s" % (status, error_text(ans))))
        upto = min(TURNS, (evicts or TURNS) + 2)
        ex = []
        for extra in (["--exact"], ["--exact", "--no-cache-prompt"]):
            srv = Pair(evictd, engine, model, tmp, extra)
            try:
                ex.append(conversation(srv, turns=upto))
            finally:
                srv.close()
        de = first_diff(ex[0], ex[1])
        ev_ex = next((r["turn"] for r in ex[0] if "error" not in r and
                      r["prompt"] + ANSWER > budget), None)
        print("    serve --exact (F32 K/V, flash attention off) with and "
              "without its cache, turns 1..%d (its window first evicts in "
              "turn %s): %s" % (
                  upto, fmt(ev_ex, "d"),
                  "the same at every turn" if de is None else
                  "first differ at turn %d%s" % (
                      de, "" if ev_ex is not None and de > ev_ex else
                      " -- BEFORE any eviction, where they must agree")))
    d = first_diff(s0, l0)
    print("  serve and llama-server: %s%s" % (
        "the same at every turn both answered" if d is None else
        "first differ at turn %d" % d,
        "" if d is None else
        " (%s the window first evicts)" % (
            "after" if evicts is not None and d > evicts else "before")))


def replay(srv: Pair, model_recs: List[dict],
           have: List[dict]) -> List[dict]:
    """The reported turns past those in have, each model_recs' prompt of
    that turn sent RUNS times to srv (which keeps nothing)."""
    recs = []
    done = {r["turn"] for r in have}
    for m in model_recs:
        if m["turn"] not in REPORT or m["turn"] in done or "error" in m:
            continue
        times, texts = [], []
        for _ in range(RUNS):
            d0 = srv.decoded()
            status, ans, dt = post(srv.port, {
                "prompt": m["body"], "max_tokens": ANSWER, "temperature": 0,
                "ignore_eos": True})
            if status != 200:
                return recs + [{"turn": m["turn"], "chars": len(m["body"]),
                                "error": "HTTP %d %s" % (
                                    status, error_text(ans))}]
            times.append(dt)
            texts.append(ans["choices"][0]["text"])
        recs.append({"turn": m["turn"], "s": times, "texts": texts,
                     "body": m["body"],
                     "prompt": ans["usage"]["prompt_tokens"],
                     "answered": ans["usage"]["completion_tokens"],
                     "evaluated": srv.decoded() - d0, "replayed": True})
    return recs


def main() -> None:
    if len(sys.argv) != 5:
        raise SystemExit(__doc__)
    evictd, engine, lserver, model = sys.argv[1:5]
    tmp = tempfile.mkdtemp(prefix="bench-convs-")
    sys.stdout.reconfigure(line_buffering=True)  # beside stderr's progress
    import bench_convs_parts as more  # the other parts, beside this file
    import bench_families
    parts = {"turns": part_turns, "slots": more.part_slots,
             "long": more.part_long, "prefill": more.part_prefill,
             "rewind": more.part_rewind,
             "families": bench_families.part_families}
    for p in PARTS:
        if p not in parts:
            raise SystemExit("BENCH_PARTS: no part %r (the parts: %s)" % (
                p, ",".join(parts)))
    for p in PARTS:
        with more.LoadSampler() as load:
            parts[p](evictd, engine, lserver, model, tmp)
        print("(part %s: load average over 1 minute %s, sampled every 15 s)"
              % (p, load.summary()))
        print()


if __name__ == "__main__":
    main()
