"""Prometheus text as the suites read it, from evictd's and serve's
/metrics: every sample by its series (labels part of the name), one
metric summed over its labels, and promtool's lint."""

import subprocess
import time
from typing import Dict, List

from support.http import request


def parse(text: str) -> Dict[str, float]:
    """Each sample of a Prometheus text: {series with its labels: value}."""
    out = {}
    for line in text.splitlines():
        if line.strip() and not line.startswith("#"):
            key, value = line.rsplit(" ", 1)
            out[key] = float(value)
    return out


def scrape(addr: str) -> Dict[str, float]:
    """GET /metrics on addr (host:port or unix:PATH), parsed;
    AssertionError unless it answers 200."""
    status, _, text = request(addr, "GET", "/metrics")
    assert status == 200, "GET /metrics on %s: %d" % (addr, status)
    return parse(text.decode())


def total(addr: str, name: str, label: str = "") -> float:
    """The sum of metric `name` over its series whose labels contain
    `label` (all of them by default)."""
    out = 0.0
    for key, value in scrape(addr).items():
        if key.startswith(name) and label in key and \
                key[len(name):len(name) + 1] in ("", "{"):
            out += value
    return out


def promtool_findings(text: bytes) -> List[str]:
    """What `promtool check metrics` finds in a /metrics text: its lint's
    lines (none when clean); a text it cannot parse fails."""
    lint = subprocess.run(["promtool", "check", "metrics"], input=text,
                          capture_output=True)
    out = (lint.stdout + lint.stderr).decode().splitlines()
    assert lint.returncode in (0, 3), out  # 3: lint findings, parsed
    return [line for line in out if line.strip()]


def wait_sessions(daemon, want: int, secs: float = 10) -> float:
    """Polls the daemon's evictd_sessions until it is `want` or secs have
    passed; returns the last count (the caller asserts it)."""
    deadline = time.monotonic() + secs
    while True:
        n = total(daemon.addr, "evictd_sessions")
        if n == want or time.monotonic() > deadline:
            return n
        time.sleep(0.05)
