"""evictd-llama serve against the official OpenAI client: the real daemon
and the real servers on ephemeral loopback ports, spoken to by npm's
`openai` package (pinned by tests/llamacpp/openai/package-lock.json,
installed beside it by `npm ci`: make e2e-llamacpp does) run with node's
test runner (tests/llamacpp/openai/openai.test.mjs names the cases), on
stories260K ($STORIES_GGUF). The servers: the main one (exact settings,
4 sequences, a window of 64), one on llama.cpp's fast defaults, one with a
queue of one, one with an API key. The same servers' answers are then
checked against serve's contract, deploy/llama/openapi.yaml
(tests/contract/serve_contract.mjs)."""

import os
import subprocess
import sys
import tempfile
import unittest
from typing import List

from support import paths
from support.daemon import Daemon
from support.serve import Serve

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = paths.REPO
STORIES = paths.stories_gguf()
# The test, its package.json and the node_modules npm ci filled.
NODE_DIR = os.path.join(HERE, "openai")
# serve's contract: the document, and the checker with its validators
# (tests/contract's node_modules, npm ci by make e2e-llamacpp).
DOC = os.path.join(REPO, "deploy", "llama", "openapi.yaml")
CONTRACT_DIR = os.path.join(REPO, "tests", "contract")
WINDOW = ["--budget", "64", "--sinks", "4", "--lookahead", "16"]
# Each request its own session, deleted as it ends (the counts the tests
# check), but on CONV, which keeps conversations between requests (the
# default): the Responses API's previous_response_id.
ONCE = ["--no-cache-prompt"]


class OpenAIClient(unittest.TestCase):
    """The servers, started once for both cases."""

    @classmethod
    def setUpClass(cls) -> None:
        paths.require(paths.evictd_llama(), STORIES,
                      os.path.join(NODE_DIR, "node_modules", "openai"),
                      os.path.join(NODE_DIR, "openai.test.mjs"),
                      os.path.join(CONTRACT_DIR, "node_modules", "ajv"),
                      error=AssertionError)
        cls.tmp = tempfile.TemporaryDirectory(prefix="evictd-openai-")
        tmp = cls.tmp.name
        key = os.path.join(tmp, "key")
        with open(key, "w") as f:
            f.write("  sk-evictd-test-key \n")
        cls.d = Daemon.started(tmp)
        cls.servers = []

        def serve(*args: str) -> str:
            s = Serve(tmp, cls.d.url, *WINDOW, *args, model=STORIES)
            cls.servers.append(s)
            return "http://" + s.addr

        try:
            cls.env = dict(os.environ,
                           SERVE=serve("--exact", "-np", "4", *ONCE),
                           FAST=serve(*ONCE),
                           BUSY=serve("--parallel", "1", "--queue", "1",
                                      *ONCE),
                           KEYED=serve("--api-key-file", key, *ONCE),
                           CONV=serve("--exact", "-np", "2"),
                           KEY="sk-evictd-test-key", EVICTD=cls.d.url)
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def tearDownClass(cls) -> None:
        bad = [s.log() for s in cls.servers if s.stop() != 0]
        cls.d.stop()
        cls.tmp.cleanup()
        if bad:
            raise AssertionError("a server did not stop cleanly:\n" +
                                 "\n".join(bad))

    def node(self, args: List[str], cwd: str) -> str:
        p = subprocess.run(["node"] + args, cwd=cwd, env=self.env,
                           capture_output=True, timeout=900)
        out = p.stdout.decode("utf-8", "replace")
        sys.stderr.write(out)
        self.assertEqual(p.returncode, 0, out[-4000:] +
                         p.stderr.decode("utf-8", "replace") +
                         "".join(s.log()[-2000:] for s in self.servers))
        return out

    def test_official_client(self) -> None:
        out = self.node(["--test", "openai.test.mjs"], NODE_DIR)
        self.assertIn("# fail 0", out)

    def test_contract(self) -> None:
        """Every answer valid against deploy/llama/openapi.yaml
        (tests/contract/serve_contract.mjs)."""
        out = self.node(["serve_contract.mjs", DOC], CONTRACT_DIR)
        self.assertIn("serve contract: ", out)


if __name__ == "__main__":
    unittest.main()
