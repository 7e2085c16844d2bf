"""The real evictd for the end-to-end tests: $EVICTD_BIN, else build/evictd
of this repository, on an ephemeral loopback port read from its log line
'listening on ADDR'; restartable on the same port and flags (for the kill
test), killed with SIGKILL on request."""

import os
import re
import signal
import subprocess
import tempfile
import time
from typing import Optional

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
LISTENING = re.compile(r"listening on (\S+)")


def daemon_bin() -> str:
    return os.environ.get("EVICTD_BIN") or os.path.join(REPO, "build",
                                                        "evictd")


class Daemon:
    """One evictd process at a time, with fixed flags."""

    def __init__(self, tmpdir: str, *args: str) -> None:
        self.binary = daemon_bin()
        if not os.access(self.binary, os.X_OK):
            raise RuntimeError("no daemon at %s (set EVICTD_BIN or run "
                               "make build/evictd)" % self.binary)
        self.tmpdir, self.args = tmpdir, list(args)
        self.proc: Optional[subprocess.Popen] = None
        self.starts = 0
        self.addr = self._start("127.0.0.1:0")
        self.url = "http://" + self.addr

    def _start(self, listen: str) -> str:
        self.starts += 1
        self.log_path = tempfile.mktemp(prefix="evictd-e2e-", suffix=".log",
                                        dir=self.tmpdir)
        # The daemon sees only our flags, not the caller's EVICTD_*.
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("EVICTD_")}
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [self.binary, "--listen", listen] + self.args, env=env,
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=log)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            m = LISTENING.search(self.log())
            if m:
                return m.group(1)
            if self.proc.poll() is not None:
                break
            time.sleep(0.01)
        log = self.log()
        self.stop()
        raise RuntimeError("evictd did not start (exit %s); log:\n%s"
                           % (self.proc.poll(), log))

    def log(self) -> str:
        with open(self.log_path, encoding="utf-8", errors="replace") as f:
            return f.read()

    def kill(self) -> None:
        """SIGKILL, and wait for the process to be gone."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def restart(self) -> None:
        """Starts again on the same address and flags (after kill)."""
        if self.proc.poll() is None:
            raise RuntimeError("restart of a running daemon")
        for _ in range(50):
            try:
                addr = self._start(self.addr)
                break
            except RuntimeError:
                if "in use" not in self.log():
                    raise
                time.sleep(0.1)  # the port is not free yet
        else:
            raise RuntimeError("could not restart on %s" % self.addr)
        if addr != self.addr:
            raise RuntimeError("restarted on %s, not %s" % (addr, self.addr))

    def stop(self) -> Optional[int]:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return None if self.proc is None else self.proc.returncode
