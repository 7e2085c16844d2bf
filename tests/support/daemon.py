"""evictd as a child process of a test: on an ephemeral loopback port (or
the address given), its address read from its "listening on" line, its
output kept in a log file that outlives it, restartable on the same
address, stopped with SIGTERM or SIGKILL. Every start is remembered until
the process is reaped, so that a harness can stop what a failed test left
(stop_all)."""

import os
import signal
import subprocess
import tempfile
import time
from typing import Dict, List, Optional, Sequence

from support import listening, paths
from support.fail import Fail


class Daemon:
    """One evictd process at a time, started as often as a test likes; its
    stdout and stderr go to log_path, appended to at each start."""

    live: List["Daemon"] = []

    def __init__(self, log_path: str, binary: Optional[str] = None) -> None:
        self.binary = binary or paths.evictd_bin()
        self.log_path = log_path
        self.proc: Optional[subprocess.Popen] = None
        self.addr: Optional[str] = None
        self.listening: Optional[listening.Listening] = None
        self.args: List[str] = []
        self.env: Dict[str, str] = {}
        self.prefix: List[str] = []
        self.offset = 0
        self.starts = 0  # how many times it was started, failed starts too

    @classmethod
    def started(cls, tmpdir: str, *args: str, listen: str = "127.0.0.1:0",
                env: Optional[Dict[str, str]] = None,
                binary: Optional[str] = None,
                prefix: Sequence[str] = ()) -> "Daemon":
        """A daemon with these flags, logging to a new file in tmpdir, up
        and listening; RuntimeError (with its log) if it exits instead."""
        binary = binary or paths.evictd_bin()
        if not os.access(binary, os.X_OK):
            raise RuntimeError("no daemon at %s (set EVICTD_BIN or run "
                               "make build/evictd)" % binary)
        fd, log = tempfile.mkstemp(prefix="evictd-", suffix=".log",
                                   dir=tmpdir)
        os.close(fd)
        d = cls(log, binary)
        rc = d.start(*args, listen=listen, env=env, prefix=prefix)
        if rc is not None:
            raise RuntimeError("evictd did not start (exit %s); log:\n%s"
                               % (rc, d.log()))
        return d

    @property
    def url(self) -> str:
        """The address as --evictd and the clients take it."""
        return self.addr if self.addr.startswith("unix:") \
            else "http://" + self.addr

    @property
    def pid(self) -> int:
        return self.proc.pid

    def start(self, *args: str, listen: str = "127.0.0.1:0",
              env: Optional[Dict[str, str]] = None,
              prefix: Sequence[str] = (),
              wait: float = 20.0) -> Optional[int]:
        """Starts the daemon with these flags (remembered for restart),
        which see none of the caller's EVICTD_* variables but env's, under
        prefix (a command such as taskset's, which must exec the daemon).
        Returns None once it says where it listens (.addr), or its exit
        status if it exits first; Fail if it says nothing within wait
        seconds (it is killed)."""
        self.args, self.env = [str(a) for a in args], dict(env or {})
        self.prefix = list(prefix)
        self.starts += 1
        self.offset = (os.path.getsize(self.log_path)
                       if os.path.exists(self.log_path) else 0)
        full = {k: v for k, v in os.environ.items()
                if not k.startswith("EVICTD_")}
        full.update(self.env)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                self.prefix + [self.binary, "--listen", listen] + self.args,
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=full)
        Daemon.live.append(self)
        found = listening.wait(self.log, self.proc, wait)
        if found is not None:
            self.listening, self.addr = found, found.addr
            return None
        rc = self.proc.poll()
        if rc is not None:
            self._forget()
            return rc
        self.kill()
        raise Fail("evictd did not start within %.0f s; log:\n%s"
                   % (wait, self.log()[-3000:]))

    def restart(self, tries: int = 50) -> None:
        """Starts again (after kill or stop) with the same flags, on .addr
        (which a test may change first, e.g. to a unix socket), waiting
        while the port is not free yet; RuntimeError when it cannot."""
        if self.proc is not None and self.proc.poll() is None:
            raise RuntimeError("restart of a running daemon")
        want = self.addr
        for _ in range(tries):
            if self.start(*self.args, listen=want, env=self.env,
                          prefix=self.prefix) is None:
                break
            if "in use" not in self.log():
                raise RuntimeError("evictd did not restart; log:\n"
                                   + self.log())
            time.sleep(0.1)  # the port is not free yet
        else:
            raise RuntimeError("could not restart on %s" % want)
        if self.addr != want:
            raise RuntimeError("restarted on %s, not %s" % (self.addr, want))

    def log(self) -> str:
        """What this start of the daemon has logged so far."""
        with open(self.log_path, "rb") as f:
            f.seek(self.offset)
            return f.read().decode("utf-8", "replace")

    def _forget(self) -> None:
        if self in Daemon.live:
            Daemon.live.remove(self)

    def kill(self) -> int:
        """SIGKILL, then reap. Returns the exit status (negative: signal)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        rc = self.proc.wait()
        self._forget()
        return rc

    def term(self, timeout: float = 30.0) -> int:
        """SIGTERM, then wait for the exit. Returns the exit status; Fail
        (after SIGKILL) if it ignores SIGTERM for timeout seconds."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise Fail("evictd ignored SIGTERM for %.0f s" % timeout)
        self._forget()
        return rc

    def stop(self, timeout: float = 10.0) -> Optional[int]:
        """term() for a clean-up: never raises; SIGKILL after timeout.
        Returns the exit status (None if it never started)."""
        if self.proc is None:
            return None
        try:
            return self.term(timeout)
        except Fail:
            return self.proc.returncode

    @staticmethod
    def stop_all() -> None:
        """Kills every daemon started and not reaped yet."""
        for d in list(Daemon.live):
            d.kill()


class Scratch:
    """A suite's scratch directory and its daemon (with the flags given),
    logging into it: what most setUpModule()s start, stopped and removed
    together by close(). .name is the directory, as TemporaryDirectory's,
    .daemon the daemon."""

    def __init__(self, prefix: str, *args: str) -> None:
        self.dir = tempfile.TemporaryDirectory(prefix=prefix)
        self.name = self.dir.name
        try:
            self.daemon = Daemon.started(self.name, *args)
        except BaseException:
            self.dir.cleanup()
            raise

    def close(self) -> None:
        self.daemon.stop()
        self.dir.cleanup()
