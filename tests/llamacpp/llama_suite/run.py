#!/usr/bin/python3
"""Runs llama.cpp's own server tests (tools/server/tests/unit of the tree
evictd-llama was built from, unmodified) against evictd-llama serve or
llama-server, and says per test what happened and, for a failure, its
first cause. test_llama_suite.py runs it against serve; by hand it makes
the baseline (llama-server) and the diagnostic run:

  run.py --target llama-server \\
         --bin build/llama/server/build/bin/llama-server \\
         --write-baseline [--merge EARLIER.json...]   # baseline.json
  run.py --target serve --bin build/evictd-llama [--drop] [--json OUT]

The tree is config.mk's LLAMA_TREE (--config, default build/llama/config.mk).
For serve, one evictd (EVICTD_BIN, else build/evictd) runs for the whole
run on a loopback port and serve finds it by $EVICTD_URL; every test
starts its own serve (or llama-server) through server.py, the suite's
LLAMA_SERVER_BIN_PATH, with the suite's own command line (the model's
source mapped to stories260K). pytest is Debian's, run by /usr/bin/python3;
nothing is written into the tree (no cache, no bytecode, LLAMA_CACHE and
pytest's temporary folders outside it), which run() checks.
"""

import argparse
import collections
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", "..", ".."))

BASELINE = os.path.join(HERE, "baseline.json")
WITH_UI = os.path.join(HERE, "with_ui.json")
EXCEPTIONS = os.path.join(HERE, "exceptions.json")

# The files (tools/server/tests/unit).
IN_SCOPE = ["test_basic", "test_completion", "test_chat_completion",
            "test_stream", "test_ctx_shift", "test_security", "test_metrics",
            "test_tokenize", "test_ignore_eos", "test_compat_anthropic",
            "test_compat_oai_responses", "test_template", "test_tool_call"]
# The out-of-scope features, and the files that test them: not run
# (test_llama_suite.py checks that serve refuses them cleanly).
OUT_OF_SCOPE = {
    "test_embedding": "embeddings", "test_rerank": "rerank",
    "test_infill": "infill", "test_lora": "LoRA",
    "test_router": "router/multi-model", "test_mcp_servers": "MCP",
    "test_tools_builtin": "/tools", "test_proxy": "MCP (the UI's CORS "
    "proxy)", "test_vision_api": "vision and audio",
    "test_slot_save": "slot files",
}
# The folder's other files, in neither of the lists: not run.
NOT_LISTED = {
    "test_sleep": "sleeping and waking the model",
    "test_speculative": "speculative decoding with a draft model",
    "test_kv_keep_only_active": "llama-server's host-memory prompt cache "
    "by slot (its debug log)",
    "test_compat_gcp": "Vertex AI's prediction routes",
}
OPENAI_SKIP = "llama_suite: needs the Python openai package (not in Debian)"


def read_config(path: str) -> Dict[str, str]:
    out = {}
    with open(path) as f:
        for line in f:
            m = re.match(r"(\w+) := (.*)", line.rstrip("\n"))
            if m:
                out[m.group(1)] = m.group(2)
    return out


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def snapshot(folder: str) -> Dict[str, Tuple[int, int]]:
    out = {}
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            p = os.path.join(root, name)
            st = os.lstat(p)
            out[os.path.relpath(p, folder)] = (st.st_size, st.st_mtime_ns)
    return out


def file_of(test_id: str) -> str:
    return os.path.basename(test_id.split("::")[0])[:-3]


def run(target: str, binary: str, tree: str, model: str,
        drop: bool = False, files: Optional[List[str]] = None,
        only: Optional[List[str]] = None,
        pytest_args: Optional[List[str]] = None,
        log: Optional[str] = None) -> Dict[str, dict]:
    """Runs the files (only the tests named by only, if given) against
    target; returns the plugin's record per test id. Raises RuntimeError
    when the tree was written to."""
    suite = os.path.join(tree, "tools", "server", "tests")
    if not os.path.isfile(os.path.join(suite, "utils.py")):
        raise RuntimeError("no llama.cpp server tests in %s" % suite)
    before = snapshot(suite)
    tmp = tempfile.TemporaryDirectory(prefix="llama-suite-")
    evd = None
    try:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("LLAMA_ARG_", "DEBUG", "EVICTD_URL"))
               and k not in ("N_GPU_LAYERS", "SLOW_TESTS", "PORT")}
        results = os.path.join(tmp.name, "results.json")
        env.update(
            LLAMA_SERVER_BIN_PATH=os.path.join(HERE, "server.py"),
            LLAMA_SUITE_TARGET=target, LLAMA_SUITE_BIN=binary,
            LLAMA_SUITE_MODEL=model, LLAMA_SUITE_RESULTS=results,
            LLAMA_CACHE=os.path.join(tmp.name, "cache"),
            PORT=str(free_port()), PYTHONDONTWRITEBYTECODE="1",
            PYTHONPATH=HERE)
        if drop:
            env["LLAMA_SUITE_DROP"] = "1"
        if only is not None:
            env["LLAMA_SUITE_ONLY"] = os.path.join(tmp.name, "only")
            with open(env["LLAMA_SUITE_ONLY"], "w") as f:
                f.write("".join(t + "\n" for t in only))
        if target == "serve":
            from support.daemon import Daemon
            evd = Daemon.started(tmp.name)
            env["EVICTD_URL"] = evd.url
        cmd = [sys.executable, "-m", "pytest", "-p", "llama_suite_plugin",
               "-p", "no:cacheprovider", "--basetemp",
               os.path.join(tmp.name, "pytest"), "-q", "-rN"] + \
            list(pytest_args or []) + \
            ["unit/%s.py" % f for f in (files or IN_SCOPE)]
        with open(log or os.path.join(tmp.name, "pytest.log"), "wb") as out:
            subprocess.run(cmd, cwd=suite, env=env, stdout=out,
                           stderr=subprocess.STDOUT,
                           stdin=subprocess.DEVNULL)
        if not os.path.exists(results):
            with open(log or os.path.join(tmp.name, "pytest.log")) as f:
                raise RuntimeError("pytest wrote no results:\n" +
                                   f.read()[-4000:])
        with open(results) as f:
            recs = json.load(f)
    finally:
        if evd is not None:
            evd.stop()
        tmp.cleanup()
    after = snapshot(suite)
    if after != before:
        changed = sorted(set(after.items()) ^ set(before.items()))
        raise RuntimeError("the run wrote into the tree: %s" % changed[:10])
    return recs


def is_openai(rec: dict) -> bool:
    return rec["outcome"] == "skipped" and rec.get("reason") == OPENAI_SKIP


# ---------------------------------------------------------------------------
# A failure's first cause, as a short sentence that groups like failures.

UNKNOWN = re.compile(r"unknown option '([^']+)'")
NOT_MAPPED = re.compile(r"llama_suite: model (\S+)")


def _first_error_line(longrepr: str) -> str:
    lines = [l[1:].strip() for l in longrepr.splitlines()
             if l.startswith("E ")]
    for l in lines:
        if l:
            return l[:200]
    tail = [l for l in longrepr.splitlines() if l.strip()]
    return tail[-1][:200] if tail else ""


def _route(path: str) -> str:
    return path.split("?")[0]


def _error_message(body: str) -> str:
    try:
        b = json.loads(body)
    except (ValueError, TypeError):
        return body[:160]
    if isinstance(b, dict) and isinstance(b.get("error"), dict):
        return str(b["error"].get("message", ""))[:160]
    return body[:160]


def classify(rec: dict) -> str:
    """The first cause of a test's failure, worded to group."""
    out, lr = rec.get("output") or "", rec.get("longrepr") or ""
    m = UNKNOWN.search(out)
    if m:
        return "start: unknown option '%s'" % m.group(1)
    m = NOT_MAPPED.search(out)
    if m:
        return "start: needs model %s (only stories260K is here)" % m.group(1)
    if "Server process died" in lr or "did not start within" in lr:
        said = [l for l in out.splitlines()
                if l.startswith("evictd-llama serve:")]
        return "start: the server exited (%s)" % (
            said[0][:120] if said else _first_error_line(lr))
    if "llama_suite: the test ran past" in lr:
        return "hung: the test ran past its time limit"
    reqs = [r for r in rec.get("requests") or [] if not r.get("start")]
    # The first request the server answered 404/405: a route it lacks.
    for r in reqs:
        if r["status"] in (404, 405):
            return "missing route: %s %s" % (r["method"], _route(r["path"]))
    # The first refusal of a field serve does not honour.
    for r in reqs:
        if r["status"] == 400:
            msg = _error_message(r["body"])
            return "400: %s" % re.sub(r"\d+", "N", msg)[:140]
    for r in reqs:
        if r["status"] is not None and r["status"] >= 500:
            return "%d: %s" % (r["status"], _error_message(r["body"])[:120])
    first = _first_error_line(lr)
    m = re.match(r"KeyError: '([^']+)'", first)
    if m:
        return "missing field '%s'" % m.group(1)
    first = re.sub(r"0x[0-9a-f]+", "0x..", first)
    last = reqs[-1] if reqs else None
    return "assertion%s: %s" % (
        " (last request %s %s, %s)" % (last["method"], _route(last["path"]),
                                       last["status"]) if last else "",
        first)


STARTING = re.compile(r"^tests: starting server with: \S+ (.*)$", re.M)


def refused_options(recs: Dict[str, dict], binary: str) -> collections.Counter:
    """How many tests start serve with each option serve refuses (its
    --help's list), the tests whose model is not stories260K apart."""
    from llamacpp.llama_suite import server
    known = server.serve_options(binary)
    per = collections.Counter()
    for rec in recs.values():
        out = rec.get("output") or ""
        if NOT_MAPPED.search(out):
            continue
        names = set()
        for line in STARTING.findall(out):
            names.update(a for a in line.split()
                         if a.startswith("-") and a not in known and
                         a not in server.SOURCES and
                         not re.match(r"-\d", a))
        per.update(names)
    return per


# ---------------------------------------------------------------------------
# Counting and printing.

def counts(recs: Dict[str, dict]) -> Dict[str, collections.Counter]:
    per: Dict[str, collections.Counter] = collections.defaultdict(
        collections.Counter)
    for tid, rec in recs.items():
        kind = "openai" if is_openai(rec) else rec["outcome"]
        per[file_of(tid)][kind] += 1
    return per


def print_counts(title: str, per: Dict[str, collections.Counter],
                 out=sys.stdout) -> None:
    kinds = ["passed", "failed", "error", "skipped", "openai"]
    print("%s\n  %-28s %s %6s" % (title, "file",
          " ".join("%7s" % k for k in kinds), "total"), file=out)
    total = collections.Counter()
    for f in IN_SCOPE:
        c = per.get(f, collections.Counter())
        total.update(c)
        print("  %-28s %s %6d" % (f, " ".join("%7d" % c[k] for k in kinds),
                                   sum(c.values())), file=out)
    print("  %-28s %s %6d" % ("all", " ".join("%7d" % total[k]
          for k in kinds), sum(total.values())), file=out)


def causes(recs: Dict[str, dict], ids) -> List[Tuple[str, List[str]]]:
    groups: Dict[str, List[str]] = collections.defaultdict(list)
    for tid in ids:
        groups[classify(recs[tid])].append(tid)
    return sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))


def print_causes(title: str, groups, examples: int = 3,
                 out=sys.stdout) -> None:
    print(title, file=out)
    for cause, ids in groups:
        print("  %4d  %s" % (len(ids), cause), file=out)
        for tid in ids[:examples]:
            print("          e.g. %s" % tid, file=out)


def load_expected() -> Tuple[dict, Dict[str, str]]:
    """baseline.json, its 'passed' joined by with_ui.json's tests (those
    llama-server passes when built with its web UI), and
    exceptions.json's tests."""
    with open(BASELINE) as f:
        base = json.load(f)
    with open(WITH_UI) as f:
        base["passed"] = sorted(set(base["passed"]) |
                                set(json.load(f)["tests"]))
    with open(EXCEPTIONS) as f:
        exc = json.load(f)
    return base, exc["tests"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", choices=["serve", "llama-server"],
                    required=True)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--config", default=os.path.join(REPO, "build", "llama",
                                                     "config.mk"))
    ap.add_argument("--model", default=os.environ.get("STORIES_GGUF") or
                    os.path.join(REPO, "..", "shared", "models",
                                 "stories260K.gguf"))
    ap.add_argument("--drop", action="store_true",
                    help="diagnostic: leave out the options serve refuses")
    ap.add_argument("--files", nargs="*", help="some of the in-scope files")
    ap.add_argument("-k", help="pytest's -k")
    ap.add_argument("--held", action="store_true",
                    help="only the tests test_llama_suite.py runs: those "
                    "baseline.json says llama-server passes but "
                    "exceptions.json's, and the openai ones")
    ap.add_argument("--json", help="write every test's record here")
    ap.add_argument("--log", help="pytest's output here")
    ap.add_argument("--write-baseline", action="store_true")
    ap.add_argument("--merge", nargs="*", default=[],
                    help="with --write-baseline: earlier runs' --json; a "
                    "test passes only if it passed in every run")
    a = ap.parse_args()
    cfg = read_config(a.config)
    binary, model = os.path.abspath(a.bin), os.path.abspath(a.model)
    start = time.monotonic()
    only = None
    if a.held:
        base, exc = load_expected()
        only = [t for t in base["passed"] if t not in exc] + base["openai"]
    recs = run(a.target, binary, cfg["LLAMA_TREE"], model, drop=a.drop,
               files=a.files, only=only,
               pytest_args=["-k", a.k] if a.k else None, log=a.log)
    secs = time.monotonic() - start
    if a.json:
        with open(a.json, "w") as f:
            json.dump(recs, f, indent=1, sort_keys=True)
    print_counts("%s%s: %d tests in %.0f s" % (
        a.target, " (options serve refuses dropped)" if a.drop else "",
        len(recs), secs), counts(recs))
    bad = [t for t, r in sorted(recs.items())
           if r["outcome"] in ("failed", "error")]
    if a.target == "serve" and os.path.exists(BASELINE):
        base, exc = load_expected()
        want = [t for t in base["passed"] if t not in exc]
        print("of the %d tests llama-server passes (%d exceptions apart): "
              "%d pass with serve" % (len(want), len(exc), sum(
                  recs.get(t, {}).get("outcome") == "passed" for t in want)))
        bad = [t for t in want if recs.get(t, {}).get("outcome") != "passed"
               and t in recs]
    print_causes("failures by first cause:", causes(recs, bad))
    if a.target == "serve":
        print("options of the suite's command lines serve refuses, and "
              "the tests whose command line has each:")
        for name, n in refused_options(recs, binary).most_common():
            print("  %4d  %s" % (n, name))
    if a.write_baseline:
        runs = [recs]
        for path in a.merge:
            with open(path) as f:
                runs.append(json.load(f))
        write_baseline(runs, cfg)
    return 0


def write_baseline(runs: List[Dict[str, dict]],
                   cfg: Dict[str, str]) -> None:
    """baseline.json from one or more runs against llama-server: a test
    that passed in some runs only is flaky, listed apart and not held."""
    pin = {}
    with open(os.path.join(REPO, "deploy", "llama", "llama.cpp.pin")) as f:
        for line in f:
            m = re.match(r"(\w+)=(.*)", line.strip())
            if m:
                pin[m.group(1)] = m.group(2)
    recs = runs[0]
    passed_all = set(t for t, r in recs.items() if r["outcome"] == "passed"
                     and all(o.get(t, {}).get("outcome") == "passed"
                             for o in runs[1:]))
    flaky = sorted(t for t in recs if t not in passed_all and any(
        o.get(t, {}).get("outcome") == "passed" for o in runs))
    per = counts(recs)
    base = {
        "about": "The tests of llama.cpp's own server suite "
                 "(tools/server/tests/unit, the issue's files) that "
                 "llama-server passes with stories260K, built by "
                 "tests/bench/llama-server.sh from the same tree and run "
                 "by tests/llamacpp/llama_suite/run.py --target "
                 "llama-server --write-baseline, with llama-server "
                 "built without its web UI (-DLLAMA_BUILD_UI=OFF). "
                 "'passed' holds the tests that passed in every one of "
                 "'runs' runs, 'flaky' those that passed in some (with "
                 "each run's outcome); 'files' counts the first run; "
                 "'not_passed' gives each failure's first cause. CI "
                 "does not build llama-server: 'passed' is what serve is "
                 "held to.",
        "llama_cpp": {"version": cfg.get("LLAMA_CPP_VERSION"),
                      "commit": pin.get("commit"),
                      "package": "%s@%s" % (pin.get("package"),
                                            pin.get("version"))},
        "files": {f: dict(sorted(per.get(f, {}).items()))
                  for f in IN_SCOPE},
        "runs": len(runs),
        "passed": sorted(passed_all),
        "flaky": {t: [o.get(t, {}).get("outcome") for o in runs]
                  for t in flaky},
        "openai": sorted(t for t, r in recs.items() if is_openai(r)),
        "skipped": {t: r["reason"] for t, r in sorted(recs.items())
                    if r["outcome"] == "skipped" and not is_openai(r)},
        "not_passed": {t: classify(r) for t, r in sorted(recs.items())
                       if r["outcome"] in ("failed", "error")
                       and t not in flaky},
    }
    with open(BASELINE, "w") as f:
        json.dump(base, f, indent=1)
        f.write("\n")
    print("wrote %s: %d passed" % (BASELINE, len(base["passed"])))


if __name__ == "__main__":
    sys.exit(main())
