"""evictd-llama serve against the official OpenAI client: the real daemon
and the real servers on ephemeral loopback ports, spoken to by npm's
`openai` package (pinned by tests/llamacpp/openai/package-lock.json,
installed beside it by `npm ci`: make e2e-llamacpp does) run with node's
test runner (tests/llamacpp/openai/openai.test.mjs names the cases), on
stories260K ($STORIES_GGUF). The servers: the main one (exact settings,
4 sequences, a window of 64), one on llama.cpp's fast defaults, one with a
queue of one, one with an API key."""

import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(REPO, "tests", "e2e"))
sys.path.insert(0, HERE)

from daemon import Daemon  # noqa: E402
import test_serve as ts  # noqa: E402

STORIES = os.environ.get("STORIES_GGUF") or os.path.join(
    REPO, "..", "shared", "models", "stories260K.gguf")
# The test, its package.json and the node_modules npm ci filled.
NODE_DIR = os.path.join(HERE, "openai")
WINDOW = ["--budget", "64", "--sinks", "4", "--lookahead", "16"]


class OpenAIClient(unittest.TestCase):

    def test_official_client(self) -> None:
        for path in (ts.BIN, STORIES,
                     os.path.join(NODE_DIR, "node_modules", "openai"),
                     os.path.join(NODE_DIR, "openai.test.mjs")):
            self.assertTrue(os.path.exists(path), "%s is missing: run make "
                            "e2e-llamacpp" % path)
        with tempfile.TemporaryDirectory(prefix="evictd-openai-") as tmp:
            ts.TMP = tempfile.TemporaryDirectory(dir=tmp)  # Server's logs
            key = os.path.join(tmp, "key")
            with open(key, "w") as f:
                f.write("  sk-evictd-test-key \n")
            d = Daemon(tmp)
            servers = []
            try:
                def serve(*args: str) -> str:
                    s = ts.Server(d.url, *WINDOW, *args, model=STORIES)
                    servers.append(s)
                    return "http://" + s.addr

                env = dict(os.environ,
                           SERVE=serve("--exact", "-np", "4"),
                           FAST=serve(),
                           BUSY=serve("--parallel", "1", "--queue", "1"),
                           KEYED=serve("--api-key-file", key),
                           KEY="sk-evictd-test-key", EVICTD=d.url)
                p = subprocess.run(["node", "--test", "openai.test.mjs"],
                                   cwd=NODE_DIR, env=env,
                                   capture_output=True, timeout=900)
                out = p.stdout.decode("utf-8", "replace")
                sys.stderr.write(out)
                self.assertEqual(p.returncode, 0, out[-4000:] +
                                 p.stderr.decode("utf-8", "replace") +
                                 "".join(s.log()[-2000:] for s in servers))
                self.assertIn("# fail 0", out)
            finally:
                for s in servers:
                    self.assertEqual(s.stop(), 0, s.log())
                d.stop()


if __name__ == "__main__":
    unittest.main()
