"""pytest plugin (-p llama_suite_plugin) that runs llama.cpp's own server
tests (tools/server/tests of the tree, unmodified) here, and writes what
each test did as JSON for run.py.

What it changes of the suite, all from outside the tree:
- `openai`, a Python package Debian does not ship, is guarded: when it
  cannot be imported, a stand-in module takes its place whose OpenAI()
  skips the test with OPENAI_SKIP, so that the rest of those files runs
  and their openai cases are counted apart;
- ServerPreset.load_all, which starts every preset once to download its
  model, does nothing: the models come from no network here (server.py
  maps stories260K to a local file and refuses the others);
- with $LLAMA_SUITE_ONLY (a file of test ids, one a line), only those
  tests run;
- each test's call is cut off after $LLAMA_SUITE_TEST_TIMEOUT seconds
  (default 120): the suite's own request timeout is 600 s and its streams
  have none, so a server that hangs would stall the whole run.

It records, per test id, its outcome, its time, the failure's text, the
captured output (the server's log goes there) and every request the test
made through ServerProcess (method, path, status, the start of the body),
to $LLAMA_SUITE_RESULTS.
"""

import json
import os
import re
import signal
import sys
import threading
import types

import pytest

OPENAI_SKIP = "llama_suite: needs the Python openai package (not in Debian)"


def _guard_openai() -> None:
    try:
        import openai  # noqa: F401
    except ImportError:
        mod = types.ModuleType("openai")

        class OpenAI:
            def __init__(self, *args, **kwargs):
                pytest.skip(OPENAI_SKIP)

        mod.OpenAI = OpenAI
        mod.__llama_suite_stub__ = True
        sys.modules["openai"] = mod


_guard_openai()

RESULTS = {}
_current = {"id": None}
_starting = threading.local()
_lock = threading.Lock()


def _note(entry: dict) -> None:
    if getattr(_starting, "on", False):
        entry["start"] = True  # the launcher's wait for /health
    with _lock:
        rec = RESULTS.get(_current["id"])
        if rec is not None and len(rec["requests"]) < 200:
            rec["requests"].append(entry)


def _short(body) -> str:
    text = body if isinstance(body, str) else json.dumps(body)
    return text[:400]


def _patch_utils() -> None:
    utils = sys.modules.get("utils")
    if utils is None or getattr(utils, "__llama_suite__", False):
        return
    utils.__llama_suite__ = True
    utils.ServerPreset.load_all = staticmethod(lambda: None)
    SP = utils.ServerProcess
    make_request, make_stream = SP.make_request, SP.make_stream_request
    start = SP.start

    def starting(self, *args, **kwargs):
        _starting.on = True
        try:
            return start(self, *args, **kwargs)
        finally:
            _starting.on = False

    def req(self, method, path, *args, **kwargs):
        try:
            res = make_request(self, method, path, *args, **kwargs)
        except Exception as e:
            _note(dict(method=method, path=path, status=None,
                       body=type(e).__name__ + ": " + str(e)[:300]))
            raise
        _note(dict(method=method, path=path, status=res.status_code,
                   body=_short(res.body)))
        return res

    def stream(self, method, path, *args, **kwargs):
        n = 0
        try:
            for chunk in make_stream(self, method, path, *args, **kwargs):
                if n == 0:
                    _note(dict(method=method, path=path, status=200,
                               stream=True, body=_short(chunk)))
                n += 1
                yield chunk
        except utils.ServerError as e:
            _note(dict(method=method, path=path, status=e.code, stream=True,
                       body=_short(e.body)))
            raise
        except Exception as e:
            if n == 0:
                _note(dict(method=method, path=path, status=None, stream=True,
                           body=type(e).__name__ + ": " + str(e)[:300]))
            raise

    SP.make_request, SP.make_stream_request = req, stream
    SP.start = starting


def pytest_collection_modifyitems(session, config, items):
    # The suite's conftest has imported utils by now; no test has run.
    _patch_utils()
    only = os.environ.get("LLAMA_SUITE_ONLY")
    if only:
        with open(only) as f:
            wanted = set(line.rstrip("\n") for line in f if line.strip())
        keep = [i for i in items if i.nodeid in wanted]
        gone = [i for i in items if i.nodeid not in wanted]
        if gone:
            config.hook.pytest_deselected(items=gone)
        items[:] = keep


class _Timeout(Exception):
    pass


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    secs = int(os.environ.get("LLAMA_SUITE_TEST_TIMEOUT", "120"))

    def fire(signum, frame):
        raise _Timeout("llama_suite: the test ran past %d s" % secs)

    old = signal.signal(signal.SIGALRM, fire)
    signal.alarm(secs)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def pytest_runtest_logstart(nodeid, location):
    with _lock:
        RESULTS[nodeid] = dict(outcome="passed", phase=None, longrepr=None,
                               reason=None, output="", requests=[],
                               secs=0.0)
        _current["id"] = nodeid


def pytest_runtest_logreport(report):
    rec = RESULTS.get(report.nodeid)
    if rec is None:
        return
    rec["secs"] = round(rec["secs"] + report.duration, 3)
    out = "".join(content for name, content in report.sections
                  if name.startswith("Captured") and report.when in name)
    if out:
        rec["output"] = (rec["output"] + out)[-20000:]
    if report.skipped and rec["outcome"] == "passed":
        rec["outcome"] = "skipped"
        rec["phase"] = report.when
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) \
            else str(report.longrepr)
        rec["reason"] = re.sub(r"^Skipped: ", "", reason)
    elif report.failed and rec["outcome"] in ("passed", "skipped"):
        rec["outcome"] = "failed" if report.when == "call" else "error"
        rec["phase"] = report.when
        rec["longrepr"] = str(report.longrepr)[-12000:]


def pytest_sessionfinish(session, exitstatus):
    path = os.environ.get("LLAMA_SUITE_RESULTS")
    if path:
        with open(path, "w") as f:
            json.dump(RESULTS, f, indent=1, sort_keys=True)
