"""evictd-llama generate run against the real daemon and its --dump
checked against the float64 reference (support.reference): the harness of
test_llamacpp.py, test_positions.py, test_stories.py and
test_perplexity.py. set_up() and tear_down() are those suites'
setUpModule and tearDownModule: deploy/model's target and draft weights
loaded in float64, a scratch directory (TMP) and one daemon (MAIN);
RESULTS collects each case's figures, printed at the end.

TOL is test_llamacpp.py's (its docstring says why 1e-4)."""

import os
import subprocess
import sys
import time
from typing import Dict, List, Optional, Tuple
import unittest

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import torch  # noqa: E402

import model as lm  # noqa: E402
from evictd_client import EvictdClient, UnknownSession  # noqa: E402
from support import paths  # noqa: E402
from support import reference as ref  # noqa: E402
from support.daemon import Daemon, Scratch  # noqa: E402

TOL = 1e-4
BIN = paths.evictd_llama()
TARGET_GGUF = paths.llama_model("evictd-lm.gguf")
DRAFT_GGUF = paths.llama_model("draft.gguf")

TMP: Optional[Scratch] = None
MAIN: Optional[Daemon] = None
TARGET = DRAFT = None
RESULTS: Dict[str, str] = {}


def set_up() -> None:
    global TMP, MAIN, TARGET, DRAFT
    paths.require(BIN, TARGET_GGUF, DRAFT_GGUF)
    torch.set_num_threads(1)
    lm.rope_tables = ref.ggml_rope_tables  # llama.cpp's angles (see there)
    TARGET = lm.load(lm.WEIGHTS).double()
    DRAFT = lm.load(lm.DRAFT_WEIGHTS).double()
    TMP = Scratch("evictd-llamacpp-")
    MAIN = TMP.daemon


def tear_down() -> None:
    if TMP is not None:
        TMP.close()
    print("", file=sys.stderr)
    for name, line in sorted(RESULTS.items()):
        print("%-22s %s" % (name, line), file=sys.stderr)


def gguf_py_dir() -> str:
    """llama.cpp's gguf-py: $GGUF_PY, else the build's own (config.mk's
    GGUF_PY, beside the GGUF files)."""
    return paths.gguf_py()


def durable_daemon(name: str) -> Daemon:
    """A daemon of a case's own for a kill and a restart: on the unix
    socket TMP/NAME.sock, its state in TMP/NAME-state, --fsync always."""
    state = os.path.join(TMP.name, name + "-state")
    os.mkdir(state)
    return Daemon.started(TMP.name, "--state-dir", state, "--fsync",
                          "always", listen="unix:" + os.path.join(
                              TMP.name, name + ".sock"))


def prompt(i: int, n: int) -> bytes:
    """n bytes of the held-out text, a different place for each i."""
    with open(lm.HELD_OUT_TEXT, "rb") as f:
        text = f.read()
    start = (i * 997) % (len(text) - n)
    return text[start:start + n]


def kill_midway(d: Daemon, cmd: List[str], after: int
                ) -> Tuple[subprocess.Popen, bytes]:
    """Starts cmd (an evictd-llama run against d), kills d with SIGKILL once
    `after` bytes of text have come out, restarts it; returns the running
    engine and the text read so far."""
    p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    got = b""
    while len(got) < after:
        chunk = p.stdout.read1(4096)
        if not chunk:
            break
        got += chunk
    d.kill()
    time.sleep(0.2)
    d.restart()
    return p, got


def wait_newest(d: Daemon, p: subprocess.Popen, session: str, n: int
                ) -> None:
    """Until d's session has reached position n (the engine p must still
    be running: the disturbance has to come mid-generation)."""
    with EvictdClient(d.url) as ev:
        while True:
            if p.poll() is not None:
                raise AssertionError("the run ended before position %d" % n)
            try:
                if ev.get(session).newest >= n:
                    return
            except UnknownSession:
                pass
            time.sleep(0.002)


def kill_at(d: Daemon, p: subprocess.Popen, session: str, n: int) -> None:
    """Kills d with SIGKILL once session reached position n; restarts it
    with its flags (here: no state)."""
    wait_newest(d, p, session, n)
    d.kill()
    time.sleep(0.1)
    d.restart()


class Engine(unittest.TestCase):
    """Runs evictd-llama and checks its record: the helpers of the cases
    here and of test_positions.py's and test_stories.py's (which run
    another model: model_file and reference_models say which)."""

    def setUp(self) -> None:
        self.name = self._testMethodName[len("test_"):]
        self.runs = 0

    def model_file(self) -> str:
        """The GGUF evictd-llama runs."""
        return TARGET_GGUF

    def reference_models(self) -> Tuple[torch.nn.Module, torch.nn.Module]:
        """The reference's target and draft models (float64)."""
        return TARGET, DRAFT

    def run_engine(self, *args: str, url: Optional[str] = None,
                   dump: bool = True, check: bool = True
                   ) -> Tuple[bytes, str, Optional[str]]:
        """Runs evictd-llama generate; returns (stdout, stderr, dump
        prefix)."""
        self.runs += 1
        prefix = os.path.join(TMP.name, "%s-%d" % (self.name, self.runs))
        cmd = [BIN, "generate", "-m", self.model_file(), "--evictd",
               url or MAIN.url, "--session", "%s.%d" % (self.name,
                                                        self.runs),
               "--stats"] + list(args)
        if dump:
            cmd += ["--dump", prefix]
        p = subprocess.run(cmd, stdin=subprocess.DEVNULL,
                           capture_output=True, timeout=600)
        err = p.stderr.decode("utf-8", "replace")
        if check:
            self.assertEqual(p.returncode, 0, "evictd-llama failed:\n" + err)
        return p.stdout, err, prefix if dump else None

    def verify(self, prefix: str, target=None, **kw) -> ref.Result:
        events, rows = ref.load_dump(prefix)
        ours, draft = self.reference_models()
        return ref.replay(events, rows, target or ours, draft, **kw)

    def check(self, prefix: str, note: str = "", target=None) -> ref.Result:
        res = self.verify(prefix, target)
        self.assertFalse(res.row_mismatches, res.row_mismatches[:5])
        self.assertFalse(res.removal_mismatches,
                         res.removal_mismatches[:5])
        self.assertFalse(res.cache_mismatches, res.cache_mismatches[:5])
        self.assertFalse(res.position_mismatches,
                         res.position_mismatches[:5])
        self.assertGreater(res.compared, 0)
        self.assertGreater(res.cache_checks, 0)
        self.assertLessEqual(res.max_diff, TOL, res.summary())
        RESULTS[self.name] = res.summary() + ((" " + note) if note else "")
        return res

    def generate(self, budget: int, n: int, text: bytes, *args: str,
                 sinks: int = 0) -> Tuple[bytes, ref.Result]:
        out, _, prefix = self.run_engine(
            "--budget", str(budget), "--sinks", str(sinks), "-n", str(n),
            "-p", text.decode("ascii"), *args)
        return ref.text_of(out), self.check(prefix)
