#!/usr/bin/env python3
"""A pool that changes size under load, the daemons' side (make check):
three instances (--no-autocreate, no state directory) behind a real nginx
running deploy/nginx-shard.conf, 16 sessions stepped at once through
nginx by 16 threads that re-home as deploy/clients/python/README.md says
(expect_newest on every step; on UnknownSession adopt what they hold, on
Diverged adopt it with replace; resend), while a fourth instance is added
and nginx reloaded, one instance is killed with SIGKILL and restarted
without state, and the pool shrinks back (tests/support/resize.py).

Every answer is checked against the window each thread keeps itself (the
newest BUDGET positions): no step is ever answered from a window other than
the thread's, none fails, and the instances' /metrics count exactly the
adoptions and divergences nginx's ring predicts. The same with evictd-llama
serve as the engine is tests/llamacpp/test_pool.py (make e2e-llamacpp).

Usage: resize_test.py [path/to/evictd]  (default: $EVICTD_BIN). Needs nginx.
"""
import sys
import threading
import time

from evictd_client import (Diverged, EvictdClient, EvictdError,
                           UnknownSession)
from support import resize
from support.fail import Fail, expect
from support.shard import BUDGET, Model, harness_main

SESSIONS = 16


class Engine(threading.Thread):
    """One session's engine: steps it through nginx, one position at a
    time, re-homing it when an instance lost it or holds an old window."""

    def __init__(self, url: str, sid: str, expect_newest: bool = True
                 ) -> None:
        super().__init__(daemon=True)
        self.url, self.sid, self.expect_newest = url, sid, expect_newest
        self.model, self.done, self.error = Model(), 0, None
        self.rehomed = {"unknown": 0, "diverged": 0}
        self.stop = threading.Event()  # set once the pool is back

    def run(self) -> None:
        try:
            with EvictdClient(self.url, timeout=10) as ev:
                ev.create(self.sid, BUDGET, 0)
                while not self.stop.is_set():
                    self.step(ev)
                    self.done += 1
                ev.delete(self.sid)
        except Exception as e:  # reported by the main thread
            self.error = e

    def step(self, ev: EvictdClient) -> None:
        pos = self.model.newest + 1
        deadline = time.monotonic() + 20
        while True:
            try:
                r = ev.step(self.sid, pos, expect_newest=self.model.newest
                            if self.expect_newest else None)
                break
            except (UnknownSession, Diverged) as e:
                stale = isinstance(e, Diverged)
                self.rehomed["diverged" if stale else "unknown"] += 1
                ev.adopt(self.sid, self.model.kept, self.model.newest,
                         budget=BUDGET, sinks=0, lookahead=1, replace=stale)
            except EvictdError as e:
                # nginx's 502 while the instance is down: send it again (a
                # step whose answer was lost is replayed, or re-homed).
                if e.status not in (None, 502) or \
                        time.monotonic() > deadline:
                    raise
                time.sleep(0.02)
        victims = self.model.step([pos])
        expect(r.victims == victims and r.size == len(self.model.kept),
               f"{self.sid} at {pos}: victims {r.victims}, want {victims}")


def wait_steps(engines, n: int) -> None:
    """Until every engine has stepped n more times."""
    want = [e.done + n for e in engines]
    deadline = time.monotonic() + 60
    while any(e.done < w and e.is_alive() for e, w in zip(engines, want)):
        expect(time.monotonic() < deadline,
               f"engines stalled at {[e.done for e in engines]}")
        time.sleep(0.005)


def resize_under(binary, nginx, tmp, expect_newest):
    """The pool's changes while 16 engines step; returns the plan, the
    engines (finished) and how many were still stepping at the end."""
    pool = resize.ResizingPool(binary, nginx, tmp)
    try:
        sids = [f"gen-{i:02d}" for i in range(SESSIONS)]
        plan = resize.plan(pool.names, sids)
        engines = [Engine(pool.url(), s, expect_newest) for s in sids]
        for e in engines:
            e.start()
        wait_steps(engines, 100)
        pool.grow(plan)
        wait_steps(engines, 100)
        pool.kill_restart(plan)
        wait_steps(engines, 100)
        pool.shrink(plan)
        busy = sum(e.is_alive() for e in engines)
        wait_steps(engines, 100)
        for e in engines:
            e.stop.set()
        for e in engines:
            e.join(120)
        counts = {name: pool.counts(name) for name in (
            "evictd_adoptions_created_total",
            "evictd_adoptions_replaced_total", "evictd_divergences_total",
            "evictd_adoptions_refused_total")}
        return plan, engines, busy, counts
    finally:
        pool.stop()


def run(binary, nginx, tmp):
    plan, engines, busy, counts = resize_under(binary, nginx, tmp, True)
    for e in engines:
        if e.error is not None:
            raise Fail(f"{e.sid}: {e.error!r}")
        expect(not e.is_alive(), f"{e.sid} is still stepping")
    expect(busy == SESSIONS, f"only {busy} sessions were still stepping "
           "when the pool shrank back")
    unknown = sum(e.rehomed["unknown"] for e in engines)
    diverged = sum(e.rehomed["diverged"] for e in engines)
    expect((unknown, diverged) == (plan.unknown(), plan.diverged()),
           f"re-homed {unknown} unknown, {diverged} diverged; the plan "
           f"({plan}) says {plan.unknown()}, {plan.diverged()}")
    for name, want in (("evictd_adoptions_created_total", unknown),
                       ("evictd_adoptions_replaced_total", diverged),
                       ("evictd_divergences_total", diverged),
                       ("evictd_adoptions_refused_total", 0)):
        expect(counts[name] == want, f"{name}: {counts[name]} over the "
               f"instances, want {want}")
    steps = sum(e.done for e in engines)
    print(f"resize: {SESSIONS} sessions, {steps} steps through nginx "
          f"while the pool grew, lost an instance's state and shrank: "
          f"{plan}; every answer from the engine's own window")
    # The negative control: the same, the engines re-homing on
    # UnknownSession but sending no expect_newest. A session back on an
    # instance that holds its old window is answered from that window:
    # wrong victims, which the engines' own windows catch.
    plan, engines, _, _ = resize_under(binary, nginx, tmp, False)
    wrong = [e for e in engines if e.error is not None]
    expect(all("victims" in str(e.error) for e in wrong) and
           {e.sid for e in wrong} == set(plan.stale),
           f"without expect_newest: {[(e.sid, e.error) for e in wrong]}, "
           f"stale {plan.stale}")
    print(f"resize: without expect_newest, each of the {len(wrong)} "
          "sessions back on an old window was answered from it (wrong "
          "victims)")


def main():
    return harness_main("resize", run)


if __name__ == "__main__":
    sys.exit(main())
