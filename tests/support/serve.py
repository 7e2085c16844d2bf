"""evictd-llama serve as a child process of a test or a bench: the model
and the evictd (or pool) given, on an ephemeral loopback port by default,
its address and settings read from its "listening on" line, its stderr in
a log file of its own."""

import json
import os
import subprocess
import tempfile
from typing import Dict, Iterable, List, Optional

from support import listening, paths
from support.http import request


class Serve:
    """One `evictd-llama serve -m MODEL --evictd EVICTD ARGS...`. listen
    None leaves the address to ARGS (llama-server's --host and --port);
    env adds to the caller's environment; prefix (a command such as
    taskset's) goes in front."""

    def __init__(self, log_dir: str, evictd: str, *args: str,
                 model: Optional[str] = None,
                 listen: Optional[str] = "127.0.0.1:0",
                 env: Optional[Dict[str, str]] = None,
                 binary: Optional[str] = None,
                 prefix: Optional[List[str]] = None,
                 wait: float = 30.0) -> None:
        fd, self.log_path = tempfile.mkstemp(prefix="serve-", suffix=".log",
                                             dir=log_dir)
        os.close(fd)
        where = ["--listen", listen] if listen else []
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                list(prefix or []) +
                [binary or paths.evictd_llama(), "serve", "-m",
                 model or paths.llama_model("evictd-lm.gguf")] + where +
                ["--evictd", evictd] + [str(a) for a in args],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=log, env=dict(os.environ, **(env or {})))
        found = listening.wait(self.log, self.proc, wait)
        if found is None:
            self.stop()
            raise RuntimeError("serve did not start:\n" + self.log())
        self.line = found
        self.addr = found.addr

    @property
    def port(self) -> int:
        return int(self.addr.rsplit(":", 1)[1])

    @property
    def settings(self) -> Dict[str, int]:
        """budget, sinks, lookahead and parallel, as its line says."""
        return self.line.settings()

    def log(self) -> str:
        with open(self.log_path, encoding="utf-8", errors="replace") as f:
            return f.read()

    def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM (SIGKILL after timeout); the exit status."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def complete(addr: str, text: str, n: int, **kw) -> dict:
    """One llama.cpp /completion of n tokens, its answer (AssertionError
    unless 200). Greedy unless told: llama-server's default temperature
    is 0.8."""
    kw.setdefault("temperature", 0)
    status, _, body = request(addr, "POST", "/completion",
                              dict(prompt=text, n_predict=n, **kw))
    assert status == 200, body
    return json.loads(body)


def stop_cleanly(servers: Iterable[Serve]) -> None:
    """Stops every server; then AssertionError, with their logs, if any
    did not exit 0 (SIGTERM ends serve cleanly)."""
    bad = [s.log() for s in list(servers) if s.stop() != 0]
    if bad:
        raise AssertionError("a server did not stop cleanly:\n" +
                             "\n".join(bad))
