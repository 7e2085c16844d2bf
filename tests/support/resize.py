"""A pool of evictd instances behind a real nginx running
deploy/nginx-shard.conf that changes size while it serves, as
deploy/SCALING.md tells an operator to: grown by a fourth instance (nginx
reloaded with the new upstream block), one instance killed with SIGKILL
and restarted without state, shrunk back to the first three (reloaded
again). The instances run with --no-autocreate and without --state-dir.

What moves where is known before it happens: nginx's ring (HashRing, the
pool clients' copy of `hash ... consistent`) says which sessions a fourth
instance takes and where they go back to, and plan() picks the fourth
instance's port and the instance to kill so that each kind of re-homing
happens at least once for the sessions given (an instance that does not
hold a session, one that holds an old window of it).

Used by tests/shard/resize_test.py (make check: 16 engines written with
the Python client) and tests/llamacpp/test_pool.py (make e2e-llamacpp:
evictd-llama serve with 16 generations in flight)."""
import os
import subprocess
import time
from typing import Dict, List, Sequence

from evictd_pool import HashRing
from support.fail import Fail, expect
from support.shard import (Conn, Instance, free_port, render_nginx,
                           start_nginx, stop_all)


def call(addr: str, method: str, path: str):
    """One request on a connection of its own: (status, body, backend)."""
    c = Conn(addr)
    try:
        return c.call(method, path)
    finally:
        c.c.close()


def metrics(addr: str) -> Dict[str, float]:
    """An instance's /metrics, one value per series (labels in the key)."""
    status, text, _ = call(addr, "GET", "/metrics")
    expect(status == 200, f"GET /metrics on {addr}: {status}")
    out = {}
    for line in text.decode().splitlines():
        if line and not line.startswith("#"):
            key, value = line.rsplit(" ", 1)
            out[key] = float(value)
    return out


class Plan:
    """Where sessions live through the resize: ring3 and ring4 (the
    fourth instance added), the instance to kill (index in the first
    three), and what each step must re-home."""

    def __init__(self, names3: Sequence[str], fourth: str, kill: int,
                 sessions: Sequence[str]) -> None:
        self.names3, self.fourth, self.kill = list(names3), fourth, kill
        ring3, ring4 = HashRing(self.names3), HashRing(self.names3 + [fourth])
        self.home3 = {s: ring3.index(s) for s in sessions}
        self.home4 = {s: ring4.index(s) for s in sessions}
        # Growing: the sessions the fourth takes are not there (404).
        self.moved = [s for s in sessions if self.home4[s] == 3]
        # The kill: the sessions on that instance are lost (404).
        self.killed = [s for s in sessions if self.home4[s] == kill]
        # Shrinking: the moved ones go home, to an old window of theirs
        # (409 diverged), or to the killed instance, which has none (404).
        self.stale = [s for s in self.moved if self.home3[s] != kill]
        self.gone = [s for s in self.moved if self.home3[s] == kill]

    def unknown(self) -> int:
        """Re-homings after unknown_session."""
        return len(self.moved) + len(self.killed) + len(self.gone)

    def diverged(self) -> int:
        return len(self.stale)

    def __str__(self) -> str:
        return (f"{len(self.moved)} sessions move to the fourth instance, "
                f"{len(self.killed)} live on the killed one, "
                f"{len(self.stale)} go back to an old window, "
                f"{len(self.gone)} to the restarted instance")


def plan(names3: Sequence[str], sessions: Sequence[str]) -> Plan:
    """A fourth instance's name (a free loopback port) and an instance to
    kill such that every kind of re-homing happens: sessions move to the
    fourth, some live on the killed one, and when the pool shrinks some go
    back to an old window and some to the restarted instance."""
    for _ in range(200):
        fourth = f"127.0.0.1:{free_port()}"
        for kill in range(3):
            p = Plan(names3, fourth, kill, sessions)
            if p.killed and len(p.stale) >= 2 and p.gone:
                return p
    raise Fail(f"no fourth port in 200 moves 3 of {len(sessions)} sessions "
               "from the killed instance and from another")


class ResizingPool:
    """Three instances behind nginx; grow(), kill_restart() and shrink()
    follow a Plan. Each change waits until nginx routes by it."""

    def __init__(self, binary: str, nginx: str, tmp: str) -> None:
        self.binary, self.nginx, self.tmp = binary, nginx, tmp
        self.daemons: List[Instance] = []
        self.nginx_proc = None
        for i in range(3):
            d = Instance(binary, tmp, f"evictd{i}")
            self.daemons.append(d)
            if not d.up():
                raise Fail(f"{d.name} exited: {d.log()}")
        self.names = [d.addr for d in self.daemons]
        self.nginx_proc, self.front = start_nginx(nginx, tmp, self.names)
        self.port = int(self.front.rsplit(":", 1)[1])
        self.removed: List[Dict[str, float]] = []  # the killed one's /metrics

    def url(self) -> str:
        return "http://" + self.front

    def reload(self, names: Sequence[str], probe: str, want: str) -> None:
        """Writes the upstream block of names and runs `nginx -s reload`;
        returns once nginx sends session `probe` to `want`."""
        conf = render_nginx(self.tmp, names, self.port)
        r = subprocess.run([self.nginx, "-p", self.tmp, "-e",
                            os.path.join(self.tmp, "nginx-error.log"), "-c",
                            conf, "-s", "reload"], capture_output=True,
                           text=True)
        expect(r.returncode == 0, f"nginx -s reload: {r.stderr}")
        deadline = time.monotonic() + 10
        while True:
            _, _, backend = call(self.front, "GET", f"/session/{probe}")
            if backend == want:
                return
            expect(time.monotonic() < deadline,
                   f"nginx still sends {probe} to {backend}, not {want}")
            time.sleep(0.05)

    def grow(self, p: Plan) -> None:
        """The fourth instance, then nginx reloaded with it (in this order:
        nginx never sends a session to an instance that is not up)."""
        d = Instance(self.binary, self.tmp, "evictd3")
        if not d.up(listen=p.fourth):
            raise Fail(f"evictd3 did not start on {p.fourth}: {d.log()}")
        self.daemons.append(d)
        self.reload(self.names + [p.fourth], p.moved[0], p.fourth)

    def kill_restart(self, p: Plan, down: float = 0.3) -> None:
        """SIGKILL, `down` seconds without the instance (nginx answers 502
        for its sessions), then the same address again, no state."""
        d = self.daemons[p.kill]
        self.removed.append(metrics(d.addr))
        d.proc.kill()
        d.proc.wait()
        time.sleep(down)
        deadline = time.monotonic() + 10
        while not d.up(d.addr):
            expect(time.monotonic() < deadline, f"cannot restart {d.addr}")
            time.sleep(0.1)

    def shrink(self, p: Plan) -> None:
        """nginx reloaded without the fourth instance; the instance stays
        up (its /metrics are read at the end)."""
        self.reload(self.names, p.moved[0], self.names[p.home3[p.moved[0]]])

    def counts(self, name: str) -> float:
        """The sum of a daemon counter over every instance and over the
        killed instance's life before the kill."""
        total = sum(m.get(name, 0) for m in self.removed)
        for d in self.daemons:
            total += metrics(d.addr).get(name, 0)
        return total

    def stop(self) -> None:
        stop_all(self.nginx_proc, self.daemons)

