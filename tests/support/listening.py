"""The one reader of the line that says where a process listens, for every
process the suites start: evictd's "listening on ADDR (evictd VERSION[,
TLS])", evictd-llama serve's "evictd-llama serve: listening on ADDR
(evictd URL; budget N, sinks N, lookahead N, parallel N; sessions P-K)"
and llama-server's "srv ...: listening on http://ADDR". A line counts only
once it is whole (its closing parenthesis, or its newline, written), so
that an address is never read while the process is still writing it."""

import re
import subprocess
import time
from typing import Callable, NamedTuple, Optional

LINE = re.compile(r"listening on (?:https?://)?(\S+)"
                  r"(?: \(([^)\n]*)\)|\n)")


class Listening(NamedTuple):
    """Where a process listens (host:port, or unix:PATH) and what the line
    says of it between its parentheses ("" for llama-server's)."""
    addr: str
    about: str

    def settings(self) -> dict:
        """serve's window and lanes from its line: budget, sinks,
        lookahead and parallel as numbers ({} for other processes)."""
        return {k: int(v) for k, v in re.findall(
            r"(budget|sinks|lookahead|parallel) (\d+)", self.about)}

    def prefix(self) -> Optional[str]:
        """serve's session prefix ("sessions P-K"), else None."""
        m = re.search(r"sessions (\S+)-K$", self.about)
        return m.group(1) if m else None


def find(text: str) -> Optional[Listening]:
    """The first whole "listening on" line of a log, or None."""
    m = LINE.search(text)
    return Listening(m.group(1), m.group(2) or "") if m else None


def wait(log: Callable[[], str], proc: subprocess.Popen,
         timeout: float) -> Optional[Listening]:
    """Polls log() until it has the line (returned), proc exits first or
    the time runs out (None: the caller says which, and shows the log)."""
    deadline = time.monotonic() + timeout
    while True:
        found = find(log())
        if found is not None:
            return found
        if proc.poll() is not None or time.monotonic() > deadline:
            # A last look: the process may have written it and exited.
            return find(log())
        time.sleep(0.01)
