"""llama.cpp's own llama-server as a child process of a bench: on an
ephemeral loopback port (--port 0), its address read from its "listening
on" line (which it writes once the model is loaded), its stderr in a log
file, ready once /health answers 200."""

import subprocess

from support import listening
from support.process import stop, wait_healthy


class LlamaServer:
    """`LLAMA_SERVER -m MODEL --host 127.0.0.1 --port 0 ARGS...`, its log
    appended to log_path."""

    def __init__(self, binary: str, model: str, *args: str,
                 log_path: str, wait: float = 120.0) -> None:
        self.log_path = log_path
        with open(log_path, "ab") as log:
            self.offset = log.tell()
            self.proc = subprocess.Popen(
                [binary, "-m", model, "--host", "127.0.0.1", "--port", "0"]
                + [str(a) for a in args], stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=log)
        found = listening.wait(self.log, self.proc, wait)
        if found is None:
            self.stop()
            raise SystemExit("llama-server did not start (exit %s):\n%s" % (
                self.proc.returncode, self.log()[-3000:]))
        self.addr = found.addr
        wait_healthy(self.addr, self.proc, "llama-server", wait)

    @property
    def port(self) -> int:
        return int(self.addr.rsplit(":", 1)[1])

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log(self) -> str:
        """What this llama-server has logged so far."""
        with open(self.log_path, "rb") as f:
            f.seek(self.offset)
            return f.read().decode("utf-8", "replace")

    def stop(self) -> None:
        stop(self.proc)

    close = stop

