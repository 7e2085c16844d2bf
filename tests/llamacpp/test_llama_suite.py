"""llama.cpp's own server test suite against evictd-llama serve (issue 31):
serve as a drop-in for llama-server, measured by llama-server's tests.

The suite (tools/server/tests/unit of the llama.cpp tree evictd-llama was
built from, the one node-llama-cpp ships; pytest, Debian's) starts the
binary named by LLAMA_SERVER_BIN_PATH with llama-server's own flags; here
that is tests/llamacpp/llama_suite/server.py, which maps the model's
source alone to stories260K and starts `evictd-llama serve` with the
suite's command line, one evictd for the whole run found through
$EVICTD_URL (llama_suite/run.py; llama_suite_plugin.py guards the `openai`
import Debian cannot satisfy and skips the model downloads). The tree is
read, never written.

Every test llama-server passes with stories260K (llama_suite/baseline.json,
made with llama-server built from the same tree, since CI does not build
it, without its web UI; llama_suite/with_ui.json adds the tests that need
the UI, checked against llama-server built with it) must pass with serve, except those llama_suite/exceptions.json lists
with the reason, which are deselected: they assert a context limit serve
does not have, need a feature the issue leaves out (llama-server's
router, MCP, images), or check a behaviour serve leaves out by design
(a /metrics that can be off). Tests
that need the Python openai package are counted apart. The out-of-scope
features (embeddings, rerank, infill, LoRA, the router, MCP and /tools,
vision and audio, slot files) must be refused cleanly: a 4xx in the one
error shape.
"""

import collections
import json
import os
import subprocess
import tempfile
import time
import unittest
import urllib.error
import urllib.request

from llamacpp.llama_suite import run as suite
from support import paths
from support.daemon import Daemon
from support.serve import Serve

BIN = paths.evictd_llama()
MODELS = paths.llama_models()
STORIES = paths.stories_gguf()


class LlamaCppSuite(unittest.TestCase):
    def test_llama_server_tests_pass_with_serve(self):
        cfg = suite.read_config(os.path.join(MODELS, "config.mk"))
        self.assertTrue(cfg.get("LLAMA_TREE"), "evictd-llama was not built "
                        "from a llama.cpp source tree, whose "
                        "tools/server/tests this runs (leave LLAMA_CPP_SRC "
                        "unset: the pinned npm source)")
        base, exceptions = suite.load_expected()
        self.assertEqual(
            cfg["LLAMA_CPP_VERSION"], base["llama_cpp"]["version"],
            "baseline.json is llama-server's with another llama.cpp: make "
            "it again (llama_suite/run.py --target llama-server "
            "--write-baseline)")
        stale = sorted(set(exceptions) - set(base["passed"]))
        self.assertEqual(stale, [], "exceptions llama-server does not pass")

        # The tests llama-server passes, but the exceptions, and those that
        # need the openai package; the others fail for llama-server too
        # (baseline.json's not_passed says why: mostly models other than
        # stories260K). The exceptions are deselected, not run: three of
        # them wait for a generation that only --n-predict-max ends.
        want = [t for t in base["passed"] if t not in exceptions]
        start = time.monotonic()
        recs = suite.run("serve", BIN, cfg["LLAMA_TREE"], STORIES,
                         only=want + base["openai"])
        secs = time.monotonic() - start
        missing = sorted(t for t in want if t not in recs)
        failing = [t for t in want
                   if t in recs and recs[t]["outcome"] != "passed"]
        openai = [t for t in recs if suite.is_openai(recs[t])]

        suite.print_counts("\nllama.cpp's server tests against serve: "
                           "the %d llama-server passes and the %d that "
                           "need openai, in %.0f s:" % (
                               len(base["passed"]), len(base["openai"]),
                               secs), suite.counts(recs))
        kinds = collections.Counter(e["kind"] for e in exceptions.values())
        print("held to llama-server's baseline: %d; passed %d, failed %d; "
              "deselected %d (%s); the openai package's cases counted "
              "apart: %d" % (
                  len(want), len(want) - len(failing) - len(missing),
                  len(failing), len(exceptions), ", ".join(
                      "%s %d" % kv for kv in sorted(kinds.items())),
                  len(openai)))
        print("deselected (llama_suite/exceptions.json):")
        for t, e in sorted(exceptions.items()):
            print("  %s\n      %s: %s" % (t, e["kind"], e["reason"]))
        print("out of scope (not run): " + ", ".join(
            "%s (%s)" % kv for kv in sorted(suite.OUT_OF_SCOPE.items())))
        print("in neither list (not run): " + ", ".join(
            "%s (%s)" % kv for kv in sorted(suite.NOT_LISTED.items())))
        if failing:
            suite.print_causes("failing, by first cause:",
                               suite.causes(recs, failing))
            refused = suite.refused_options(
                {t: recs[t] for t in failing}, BIN)
            print("options of their command lines serve refuses (tests): " +
                  ", ".join("%s %d" % kv for kv in refused.most_common()))
        self.assertEqual(missing, [], "tests of baseline.json the suite no "
                         "longer has: make baseline.json again")
        self.assertEqual(len(failing), 0, "%d of llama-server's %d passing "
                         "tests fail with serve (causes above)" % (
                             len(failing), len(want)))


# Requests for what serve leaves out: each must be a 4xx with the error
# shape, never a 5xx, a hang or a dropped connection; an image or audio
# part may also be llama-server's own 500 "image input is not supported"
# (test_compat_anthropic's held tests ask that of a text-only model).
OUT_OF_SCOPE_REQUESTS = [
    ("embeddings", "POST", "/embedding", {"content": "a"}),
    ("embeddings", "POST", "/embeddings", {"input": "a"}),
    ("embeddings", "POST", "/v1/embeddings", {"input": "a",
                                              "model": "x"}),
    ("rerank", "POST", "/rerank", {"query": "a", "documents": ["b"]}),
    ("rerank", "POST", "/v1/rerank", {"query": "a", "documents": ["b"]}),
    ("infill", "POST", "/infill", {"input_prefix": "a",
                                   "input_suffix": "b"}),
    ("LoRA", "GET", "/lora-adapters", None),
    ("LoRA", "POST", "/lora-adapters", [{"id": 0, "scale": 1}]),
    ("router", "POST", "/models/load", {"model": "x"}),
    ("router", "POST", "/models/unload", {"model": "x"}),
    ("MCP and /tools", "GET", "/tools", None),
    ("MCP and /tools", "POST", "/tools", {"tool": "x", "params": {}}),
    ("slot files", "POST", "/slots/0?action=save", {"filename": "a.bin"}),
    ("slot files", "POST", "/slots/0?action=restore", {"filename": "a.bin"}),
    ("vision", "POST", "/v1/chat/completions", {"messages": [
        {"role": "user", "content": [{"type": "image_url", "image_url": {
            "url": "data:image/png;base64,iVBORw0KGgo="}}]}]}),
    ("vision", "POST", "/v1/messages", {"max_tokens": 8, "messages": [
        {"role": "user", "content": [{"type": "image", "source": {
            "type": "base64", "media_type": "image/png",
            "data": "iVBORw0KGgo="}}]}]}),
    ("audio", "POST", "/v1/chat/completions", {"messages": [
        {"role": "user", "content": [{"type": "input_audio", "input_audio":
                                      {"data": "AAAA", "format": "wav"}}]}]}),
]


# llama-server's flags for them (as the suite's launcher spells them).
# Not --models-max: serve takes it as llama-server does beside -m (it
# changes nothing there).
OUT_OF_SCOPE_FLAGS = [
    ["--embedding"], ["--reranking"], ["--pooling", "mean"],
    ["--lora", "x.gguf"], ["--models-dir", "."],
    ["--mmproj-url", "http://x/y.gguf"], ["--media-path", "."],
    ["--slot-save-path", "."], ["--tools", "all"],
    ["--mcp-servers-config", "x.json"], ["--ui-mcp-proxy"],
]


class OutOfScope(unittest.TestCase):
    def test_refused_cleanly(self):
        with tempfile.TemporaryDirectory(prefix="llama-suite-") as tmp:
            evd = Daemon.started(tmp)
            sv = Serve(tmp, evd.url, "-np", "2", model=STORIES, binary=BIN)
            try:
                addr = sv.addr
                seen = collections.OrderedDict()
                for what, method, path, body in OUT_OF_SCOPE_REQUESTS:
                    req = urllib.request.Request(
                        "http://%s%s" % (addr, path), method=method,
                        data=None if body is None else
                        json.dumps(body).encode(),
                        headers={"Content-Type": "application/json"})
                    try:
                        with urllib.request.urlopen(req, timeout=30) as r:
                            status, text = r.status, r.read()
                    except urllib.error.HTTPError as e:
                        status, text = e.code, e.read()
                    seen["%s (%s %s)" % (what, method, path)] = status
                    ok = 400 <= status < 500 or (
                        what in ("vision", "audio") and status == 500)
                    with self.subTest(what=what, path=path):
                        self.assertTrue(ok,
                                        "%s %s: %d %s" % (method, path,
                                                          status, text[:200]))
                        err = json.loads(text)["error"]
                        self.assertIsInstance(err["message"], str)
                print("\nout of scope, refused: " + ", ".join(
                    "%s %d" % kv for kv in seen.items()))
            finally:
                sv.stop()
                evd.stop()

    def test_flags_refused_at_start(self):
        """A flag of an out-of-scope feature stops serve before it starts,
        with a message that names it: never ignored."""
        for flags in OUT_OF_SCOPE_FLAGS:
            with self.subTest(flags=flags):
                try:
                    p = subprocess.run(
                        [BIN, "serve", "-m", STORIES, "--listen",
                         "127.0.0.1:0"] + flags, stdin=subprocess.DEVNULL,
                        capture_output=True, timeout=30)
                except subprocess.TimeoutExpired:
                    self.fail("serve started with %s instead of refusing "
                              "it" % " ".join(flags))
                self.assertNotEqual(p.returncode, 0)
                self.assertIn(flags[0], p.stderr.decode(errors="replace"))


if __name__ == "__main__":
    unittest.main()
