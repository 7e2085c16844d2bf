"""What the suites and benches do to any child process: stop it, and wait
until a server's /health says it is ready."""

import subprocess
import time
from typing import Optional

from support.http import request


def wait_healthy(addr: str, proc: subprocess.Popen, what: str,
                 wait: float = 120.0) -> None:
    """Until GET /health answers 200 (llama-server's and serve's: the
    model loaded); SystemExit if proc exits or wait seconds pass."""
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit("%s exited (%d) before it was ready" %
                             (what, proc.returncode))
        try:
            if request(addr, "GET", "/health", timeout=2)[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise SystemExit("%s not ready after %.0f s" % (what, wait))


def stop(proc: Optional[subprocess.Popen], timeout: float = 10.0) -> None:
    """SIGTERM, SIGKILL after timeout; nothing if it has ended (or is
    None)."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
