#!/usr/bin/env python3
"""Journal and snapshot failures under --state-dir, for real: a full disk
(a small tmpfs filled up by a filler file, as root) and libfiu's injection
points of the FIU=1 build (server/fault.h), under concurrent load from
several clients each on its own keep-alive connection and its own sessions
(support.durability's workload: single steps, batches, PUTs, drafts and
commits, truncates, forks, evicts, deletes, retries), every answer checked
against support.window_model's naive model.

What every journal-failure case asserts, once the disk is full or the point
is enabled (an "episode"):
  - /healthz turns 200 {"status":"degraded","journal":<strerror>,
    "changes":...} by itself, and the log says "journal write failed (...)";
  - every change request sent after that gets 503 journal_failed within
    BOUND, under load, on kept-alive and on new connections alike (besides
    the clients, whose requests end up parked or refused, "hammer" threads
    send the workload's requests from copies of the clients' models: every
    change refused at once, every read answered exactly); the requests
    whose records were in the failed write stay unanswered (parked), and
    GET /session/{id} shows them applied in memory;
  - reads (GET and HEAD of sessions, of every session of every client),
    /healthz and /metrics answer within BOUND (0.5 s), the views exactly
    as the model says; evictd_journal_failing is 1 and
    evictd_journal_write_errors_total grows while the 500 ms retries fail;
  - once the filler is deleted (the point disabled), the daemon recovers by
    itself within RECOVER: /healthz ok, evictd_journal_failing 0, the log
    says "journal writes succeed again", every parked request gets the
    answer the model expects, and new changes are accepted again;
  - kill -9 (under load, or while the journal fails with requests parked)
    and a restart on the same state directory: every acknowledged change is
    there exactly (views and replay records, support.durability.verify),
    and a request without an answer at the kill is all or nothing.

Cases:
  disk-full-always, disk-full-everysec   the tmpfs fills up (--fsync always,
      everysec); the first recovers and is killed under load, the second
      recovers, fills up again and is killed while failing. The *-everysec
      cases also compact once before the fault (--compact-after 1 MiB,
      reached by a few big "ballast" steps of a session of no client's),
      so that the failed write and its retry happen in a segment that is
      not the first, and no compaction removes it before the kill.
  disk-full-sigterm   SIGTERM while the disk is full with requests parked (a
      second SIGTERM ends the 10 s grace wait): the final write attempt
      fails, the daemon exits non-zero without a snapshot, the journal
      stays, and once there is room a restart loads every acknowledged
      change.
  fiu-write-always, fiu-write-everysec, fiu-sync-always, fiu-sync-everysec
      the same with evictd/journal/write (ENOSPC) or evictd/journal/sync
      (EIO) enabled; the *-always ones are killed under load after
      recovering, the *-everysec ones (compacted once before the fault)
      while failing after a second episode.
  fiu-open, fiu-fork, fiu-rename   compaction (--compact-after 4096) with
      evictd/journal/open, evictd/snapshot/fork or evictd/snapshot/rename
      enabled: the failure is logged, the daemon keeps serving and taking
      every change (no 503, /healthz ok, evictd_journal_failing 0), kill -9
      and a restart lose nothing; then, with the point disabled, the
      retried compaction (30 s later) writes a snapshot and removes the old
      segments by itself; kill -9 and restart again; SIGTERM leaves no
      segment.
  fiu-sigterm   SIGTERM (one, as Kubernetes sends it) while
      evictd/journal/write is enabled and requests are parked: the daemon
      exits within the 10 s grace period plus a little, its final write
      attempt fails (the point is enabled) so it exits non-zero and the
      journal stays, and a restart loads every acknowledged change.
The fiu-open/fork/rename/sigterm cases mostly wait (30 s of compaction
back-off, 10 s of grace), so each runs in a process of its own alongside
the others; the whole run takes about 35 s on 2 cores.

Without root the disk-full cases are skipped, and say so (NOT tested);
CI runs as root. Usage: fault_test.py [--seed N] [--only CASE,...]
[--keep] [--fiu-bin build/fiu/evictd] [path/to/evictd] (default
$EVICTD_BIN)."""
import argparse
import copy
import errno
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
from support.daemon import Daemon  # noqa: E402
from support.durability import (DEFAULT_BUDGET, Client, Ctx,  # noqa: E402
                                Fleet, Transport, segments, session_ids,
                                verify, wait_dir_free)
from support.fail import Fail, expect  # noqa: E402
from support.window_model import same_answer  # noqa: E402

CLIENTS = 4
SESSIONS = 25        # per client
BOUND = 0.5          # s: reads, health, metrics and refusals while failing
JOURNAL_WAIT = 5.0   # s: evictd's default --journal-wait
RECOVER = 3.0        # s: from the heal to healthz ok / parked answers
PARK_AFTER = 0.6     # s in flight after the failure was seen: parked
TMPFS_SIZE = "4m"
COMPACT_RETRY = 30.0  # the daemon's back-off after a failed compaction
ENOSPC_TEXT = os.strerror(errno.ENOSPC)
EIO_TEXT = os.strerror(errno.EIO)


class Skip(Exception):
    """The case cannot run on this machine: said, and not claimed ok."""


def now():
    return time.monotonic()


def is_journal_failed(status, body):
    return (status == 503 and isinstance(body, dict)
            and isinstance(body.get("error"), dict)
            and body["error"].get("code") == "journal_failed")


def is_wait_expired(status, body):
    """503 journal_failed for a change held past --journal-wait: applied in
    memory, not durable (its outcome after a crash is unknown, as a request
    cut off)."""
    return (is_journal_failed(status, body)
            and "applied in memory" in body["error"].get("message", ""))


def timed(what, fn, bound=BOUND):
    """Runs fn(); fails when it takes longer than bound. Returns its
    result and the seconds it took."""
    t0 = now()
    r = fn()
    dt = now() - t0
    expect(dt <= bound, f"{what} took {dt * 1000:.0f} ms (bound "
           f"{bound * 1000:.0f} ms)")
    return r, dt


def fresh(addr, method, path, body=None):
    """One request on a new connection: (status, parsed body)."""
    c = Client(addr, timeout=10)
    try:
        if method == "HEAD" or path == "/metrics":
            return c.raw(method, path)[0], None
        return c.call(method, path, body)
    finally:
        c.close()


def wait_log(d, pattern, limit, what, bad=None):
    """Waits until the daemon's log matches pattern; fails after limit
    seconds, or at once when it matches bad (a (regex, message) pair)."""
    deadline = now() + limit
    while True:
        log = d.log()
        m = re.search(pattern, log)
        if m:
            return m
        if bad is not None and re.search(bad[0], log):
            raise Fail(bad[1])
        if now() > deadline:
            raise Fail(f"{what}: not logged within {limit:.0f} s "
                       f"(/{pattern}/)")
        time.sleep(0.02)


# ---- load -------------------------------------------------------------------


class Episode:
    """What the loaders need to know of the fault under way: whether a 503
    journal_failed may come, since when the main thread knows the journal
    fails (a change sent after that must be refused at once) and when it
    healed the fault; dead: the daemon is being killed or stopped, so a
    broken connection is expected."""

    def __init__(self):
        self.allow_503 = False
        self.failing_since = None
        self.healed_at = None
        self.dead = threading.Event()


class Canned:
    """A client that hands support.durability's Fleet.send an answer already
    read, so that Fleet.send checks it against the model and keeps the
    books."""

    def __init__(self, status, body):
        self.answer = (status, body)

    def call(self, method, path, body=None):
        return self.answer


class Loader(threading.Thread):
    """One client on its own keep-alive connection and its own fleet of
    sessions. hold: pause before the next request (paused says it does);
    inflight: the request sent and not answered yet (sent_at: when)."""

    def __init__(self, fleet, addr, ep, delay=0.0):
        super().__init__(daemon=True)
        self.fleet, self.addr, self.ep, self.delay = fleet, addr, ep, delay
        self.hold, self.stop = threading.Event(), threading.Event()
        self.paused = False
        self.inflight, self.sent_at = None, 0.0
        self.pending = None  # no answer when the connection broke
        self.acked = self.changes = self.refused = 0
        self.refuse_max = self.read_max = 0.0
        self.parked_done = []  # seconds from the heal to a parked answer
        self.errors = []

    def run(self):
        c = Client(self.addr, timeout=60)
        try:
            while not self.stop.is_set():
                if self.hold.is_set():
                    self.paused = True
                    while self.hold.is_set() and not self.stop.is_set():
                        time.sleep(0.002)
                    self.paused = False
                    continue
                op = self.fleet.next_op()
                t0 = now()
                self.sent_at, self.inflight = t0, op
                try:
                    status, body = c.call(op.method, op.path, op.body)
                except Transport as e:
                    self.pending = op
                    if not self.ep.dead.is_set():
                        self.errors.append(f"no answer to {op.describe()}: "
                                           f"{e}")
                    return
                t1 = now()
                ep = self.ep
                fs, healed = ep.failing_since, ep.healed_at
                self.inflight = None
                failing = (fs is not None and t0 > fs
                           and (healed is None or t0 < healed))
                change = op.method != "GET"
                if is_wait_expired(status, body):
                    # Held past --journal-wait (the default, 5 s): neither
                    # refused nor acknowledged.
                    expect(t1 - t0 >= JOURNAL_WAIT - 0.3, f"{op.describe()}"
                           f": 'applied in memory' after {t1 - t0:.2f} s, "
                           f"before --journal-wait ({JOURNAL_WAIT} s)")
                    self.pending = op
                    return
                if is_journal_failed(status, body):
                    if not ep.allow_503:
                        raise Fail(f"{op.describe()}: 503 journal_failed "
                                   "while the journal was not failing")
                    self.refused += 1
                    self.refuse_max = max(self.refuse_max, t1 - t0)
                    expect(t1 - t0 <= BOUND, f"{op.describe()}: refused "
                           f"after {(t1 - t0) * 1000:.0f} ms, not at once")
                    time.sleep(0.002)
                    continue
                if failing:
                    expect(not change, f"{op.describe()}: sent while the "
                           f"journal failed, answered {status} "
                           f"{str(body)[:300]} instead of 503 journal_failed")
                    self.read_max = max(self.read_max, t1 - t0)
                    expect(t1 - t0 <= BOUND, f"{op.describe()}: a read "
                           f"while the journal failed took "
                           f"{(t1 - t0) * 1000:.0f} ms")
                elif fs is not None and t0 < fs and healed is not None \
                        and t1 > healed:
                    self.parked_done.append(t1 - healed)
                self.fleet.send(Canned(status, body), op)
                self.acked += 1
                self.changes += change
                if self.delay:
                    time.sleep(self.delay)
        except Fail as e:
            self.errors.append(str(e))
        finally:
            c.close()


class Hammer(threading.Thread):
    """While the journal fails: the workload's requests from a copy of a
    client's model (its parked request applied), on a kept-alive connection
    renewed now and then. Every change must get 503 journal_failed and
    every read its exact answer, each within BOUND; the model stays as it
    is, since nothing is applied."""

    def __init__(self, fleet, addr, seconds):
        super().__init__(daemon=True)
        self.fleet, self.addr, self.seconds = fleet, addr, seconds
        self.refused = self.reads = 0
        self.worst = 0.0
        self.errors = []

    def run(self):
        f, c = self.fleet, None
        deadline = now() + self.seconds
        try:
            while now() < deadline:
                if c is None or (self.refused + self.reads) % 16 == 0:
                    if c is not None:
                        c.close()
                    c = Client(self.addr, timeout=10)
                op = f.next_op()
                t0 = now()
                status, body = c.call(op.method, op.path, op.body)
                dt = now() - t0
                self.worst = max(self.worst, dt)
                if op.method == "GET":
                    expect(status == op.status
                           and same_answer(body, op.answer),
                           f"{op.describe()} while the journal failed: "
                           f"{status} {body}, expected {op.status} "
                           f"{op.answer}")
                    self.reads += 1
                else:
                    expect(is_journal_failed(status, body),
                           f"{op.describe()} while the journal failed: "
                           f"{status} {str(body)[:300]}, expected 503 "
                           "journal_failed")
                    self.refused += 1
                expect(dt <= BOUND, f"{op.describe()} while the journal "
                       f"failed took {dt * 1000:.0f} ms")
                time.sleep(0.001)
        except (Fail, Transport) as e:
            self.errors.append(str(e))
        finally:
            if c is not None:
                c.close()


def hammer(d, loaders, parked, seconds):
    """Hammers (one per client, at most 3) beside probes on new
    connections. Returns (refused, reads, worst seconds)."""
    hs = []
    for t in loaders[:3]:
        f = copy.deepcopy(t.fleet)
        if t in parked:
            f.s.update(copy.deepcopy(parked[t].after))
        hs.append(Hammer(f, d.addr, seconds))
    for h in hs:
        h.start()
    _, worst = probe_while_failing(d, loaders, seconds)
    for h in hs:
        h.join(seconds + 30)
        expect(not h.is_alive(), "a request hangs while the journal fails")
    errors = [e for h in hs for e in h.errors]
    expect(not errors, "; ".join(errors))
    return (sum(h.refused for h in hs), sum(h.reads for h in hs),
            max([worst] + [h.worst for h in hs]))


def start_loaders(d, fls, ep, delay=0.0):
    loaders = [Loader(f, d.addr, ep, delay) for f in fls]
    for t in loaders:
        t.start()
    return loaders


def check_loaders(loaders, what=""):
    errors = [e for t in loaders for e in t.errors]
    expect(not errors, (what + ": " if what else "") + "; ".join(errors))
    dead = [t for t in loaders if not t.is_alive() and not t.stop.is_set()]
    expect(not dead, "a client stopped: " + "; ".join(
        e for t in dead for e in t.errors))


def load_for(loaders, seconds, what):
    """Lets the loaders run; every one must get changes accepted."""
    before = [t.changes for t in loaders]
    deadline = now() + seconds
    while now() < deadline:
        check_loaders(loaders, what)
        time.sleep(0.02)
    check_loaders(loaders, what)
    stuck = [i for i, t in enumerate(loaders) if t.changes == before[i]]
    expect(not stuck, f"{what}: clients {stuck} got no change answered in "
           f"{seconds:.1f} s")
    return sum(t.changes - b for t, b in zip(loaders, before))


def stop_loaders(loaders, ep):
    """Stops the loaders once the daemon is gone or going (requests then
    cut off are in t.pending)."""
    ep.dead.set()
    for t in loaders:
        t.stop.set()
        t.hold.clear()


def join_loaders(loaders):
    for t in loaders:
        t.join(60)
        expect(not t.is_alive(), "a client hangs after the daemon stopped")
    check_loaders(loaders)
    return {t.fleet: t.pending for t in loaders if t.pending is not None}


def kill_under_load(d, loaders, ep, state):
    stop_loaders(loaders, ep)
    d.kill()
    pending = join_loaders(loaders)
    wait_dir_free(state)
    return pending


# ---- one journal-failure episode --------------------------------------------


def wait_degraded(d, err_text, limit=5.0):
    """Polls /healthz on new connections until it says degraded; each poll
    must answer within BOUND. Returns the time it was seen."""
    deadline = now() + limit
    while True:
        (status, body), _ = timed("GET /healthz (new connection)",
                                  lambda: fresh(d.addr, "GET", "/healthz"))
        expect(status == 200, f"GET /healthz: {status} {body}")
        if body.get("status") == "degraded":
            expect(body.get("journal") == err_text and "changes" in body,
                   f"GET /healthz while failing: {body}, expected journal "
                   f"{err_text!r} and a changes detail")
            return now()
        expect(body == {"status": "ok"}, f"GET /healthz: {body}")
        expect(now() < deadline, f"/healthz still ok {limit:.0f} s after the "
               "fault was injected")
        time.sleep(0.02)


def probe_while_failing(d, loaders, seconds):
    """While clients send (and get their changes refused), new
    connections ask for health, metrics and views: each within BOUND."""
    deadline = now() + seconds
    n, worst = 0, 0.0
    rng = random.Random(0)
    while now() < deadline:
        check_loaders(loaders, "while the journal failed")
        sid = rng.choice(rng.choice(loaders).fleet.ids)
        for method, path in (("GET", "/healthz"), ("GET", "/metrics"),
                             ("GET", f"/session/{sid}")):
            (status, _), dt = timed(f"{method} {path} (new connection, "
                                    "under load, journal failing)",
                                    lambda: fresh(d.addr, method, path))
            expect(status in (200, 404), f"{method} {path}: {status}")
            n += 1
            worst = max(worst, dt)
        time.sleep(0.01)
    return n, worst


def settle(loaders, ep, limit=5.0):
    """Holds every loader: each ends paused, or parked (in flight for
    PARK_AFTER). Returns {loader: its parked request}."""
    for t in loaders:
        t.hold.set()
    deadline = now() + limit
    while True:
        check_loaders(loaders, "while the journal failed")
        parked, undecided = {}, []
        for t in loaders:
            op, sent = t.inflight, t.sent_at
            if t.paused:
                continue
            if op is not None and now() - sent >= PARK_AFTER:
                parked[t] = op
            else:
                undecided.append(t)
        if not undecided:
            break
        expect(now() < deadline, f"{len(undecided)} client(s) neither "
               f"paused nor parked {limit:.0f} s after being held")
        time.sleep(0.01)
    for t, op in parked.items():
        expect(t.sent_at < ep.failing_since,
               f"{op.describe()}: sent {now() - t.sent_at:.2f} s ago, after "
               "/healthz said degraded, and still unanswered: a change "
               "must get 503 at once, a read its answer")
    return parked


def check_degraded(d, fls, parked, err_text, errors_seen):
    """With every client paused or parked: views, health, metrics and
    refusals, each within BOUND, on new and kept-alive connections."""
    want = {}
    for f in fls:
        for sid in f.ids:
            want[sid] = f.s[sid].view(sid)
    for op in parked.values():  # applied in memory, answer parked
        for sid, st in op.after.items():
            want[sid] = st.view(sid)
    c = Client(d.addr, timeout=10)
    worst = 0.0
    try:
        for sid, view in want.items():
            (status, body), dt = timed(
                f"GET /session/{sid} (journal failing)",
                lambda: c.call("GET", f"/session/{sid}"))
            worst = max(worst, dt)
            if view is None:
                expect(status == 404, f"GET {sid}: {status} {body}, "
                       "expected 404")
            else:
                expect(status == 200 and body == view,
                       f"GET {sid} while the journal failed: {status} "
                       f"{body}, expected {view} (parked requests applied "
                       "in memory)")
        sid = next((s for s, v in want.items() if v is not None), None)
        if sid is not None:
            (status, _), _ = timed("HEAD /session (new connection)",
                                   lambda: fresh(d.addr, "HEAD",
                                                 f"/session/{sid}"))
            expect(status == 200, f"HEAD /session/{sid}: {status}")
        refusals = (("PUT", "/session/probe-new", {"budget": 4}),
                    ("POST", "/session/probe-new/step", {"pos": 1}),
                    ("POST", "/step", {"steps": [{"session": "probe-new",
                                                  "pos": 1}]}),
                    ("DELETE", f"/session/{sid or 'x'}", None))
        for method, path, body in refusals:
            for how, call in (("new connection",
                               lambda: fresh(d.addr, method, path, body)),
                              ("kept alive",
                               lambda: c.call(method, path, body))):
                (status, got), _ = timed(f"{method} {path} ({how}, journal "
                                         "failing)", call)
                expect(is_journal_failed(status, got),
                       f"{method} {path} while the journal failed ({how}): "
                       f"{status} {got}, expected 503 journal_failed")
        (status, body), _ = timed("GET /healthz (kept alive)",
                                  lambda: c.call("GET", "/healthz"))
        expect(status == 200 and body.get("status") == "degraded"
               and body.get("journal") == err_text,
               f"GET /healthz: {status} {body}")
        failing, _ = timed("GET /metrics", lambda: c.metric(
            "evictd_journal_failing"))
        expect(failing == 1, f"evictd_journal_failing {failing}, expected 1")
        errors = c.metric("evictd_journal_write_errors_total")
        expect(errors > errors_seen, "evictd_journal_write_errors_total "
               f"stayed at {errors:.0f} for a second of failing retries")
    finally:
        c.close()
    expect(f"journal write failed ({err_text})" in d.log(),
           f"no 'journal write failed ({err_text})' log line")
    return worst, errors


class Result:
    def __init__(self):
        self.parked = self.refused = self.reads = 0
        self.read_max = self.refuse_max = self.recover = 0.0
        self.parked_max = 0.0
        self.answered = 0  # parked requests answered after a heal


def fail_episode(d, fls, loaders, ep, inject, err_text, res):
    """Injects the fault under load and checks the degraded state; returns
    the parked requests (their clients held, the others paused)."""
    for t in loaders:
        t.refused = 0
    ep.allow_503 = True
    inject()
    ep.failing_since = wait_degraded(d, err_text)
    c = Client(d.addr, timeout=10)
    errors0 = c.metric("evictd_journal_write_errors_total")
    c.close()
    expect(errors0 >= 1, "evictd_journal_write_errors_total is "
           f"{errors0:.0f} while degraded")
    _, worst = probe_while_failing(d, loaders, 0.2)
    parked = settle(loaders, ep)
    refused, reads, worst3 = hammer(d, loaders, parked, 0.5)
    worst2, _ = check_degraded(d, fls, parked, err_text, errors0)
    res.parked += len(parked)
    res.refused += sum(t.refused for t in loaders) + refused
    res.reads += reads
    worst = max(worst, worst3)
    res.refuse_max = max([res.refuse_max] + [t.refuse_max for t in loaders])
    res.read_max = max([res.read_max, worst, worst2]
                       + [t.read_max for t in loaders])
    return parked


def recover(d, loaders, ep, parked, heal, res):
    """Heals the fault: the daemon must take changes again by itself and
    answer every parked request as the model says."""
    for t, op in parked.items():
        expect(t.inflight is op, f"{op.describe()}: answered before the "
               "journal recovered")
    ep.healed_at = t0 = now()
    heal()
    c = Client(d.addr, timeout=10)
    try:
        while True:
            status, body = c.call("GET", "/healthz")
            if status == 200 and body == {"status": "ok"}:
                break
            expect(now() - t0 < RECOVER, f"/healthz still {status} {body} "
                   f"{RECOVER:.0f} s after the fault was healed")
            time.sleep(0.01)
        res.recover = max(res.recover, now() - t0)
        expect(c.metric("evictd_journal_failing") == 0,
               "evictd_journal_failing not 0 after recovering")
    finally:
        c.close()
    while any(t.inflight is op for t, op in parked.items()):
        check_loaders(loaders, "answering parked requests")
        expect(now() - t0 < RECOVER, "parked requests still unanswered "
               f"{RECOVER:.0f} s after the fault was healed: " + "; ".join(
                   op.describe() for t, op in parked.items()
                   if t.inflight is op))
        time.sleep(0.005)
    check_loaders(loaders, "answering parked requests")
    res.parked_max = max([res.parked_max] + [x for t in loaders
                                             for x in t.parked_done])
    res.answered += len(parked)
    expect("journal writes succeed again: taking changes" in d.log(),
           "no 'journal writes succeed again' log line")
    ep.allow_503 = False
    ep.failing_since = ep.healed_at = None
    for t in loaders:
        t.hold.clear()
    load_for(loaders, 0.4, "after recovering")


# ---- injectors --------------------------------------------------------------


class Filler(threading.Thread):
    """Fills the file system of `path` and keeps it full (grabbing whatever
    is freed within a few ms) until heal() deletes the file."""

    def __init__(self, path):
        super().__init__(daemon=True)
        self.path = path
        self.stop_ev, self.full = threading.Event(), threading.Event()
        self.bytes, self.error = 0, None

    def run(self):
        chunk = bytes(65536)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND,
                     0o600)
        try:
            while not self.stop_ev.is_set():
                try:
                    self.bytes += os.write(fd, chunk)
                    continue
                except OSError as e:
                    if e.errno != errno.ENOSPC:
                        self.error = e
                        return
                self.full.set()
                self.stop_ev.wait(0.002)
        finally:
            os.close(fd)

    def fill(self):
        self.start()
        expect(self.full.wait(10), f"the filler did not fill the disk: "
               f"{self.error}")

    def heal(self):
        self.stop_ev.set()
        self.join(10)
        os.unlink(self.path)


def mount_tmpfs(ctx, name="mnt"):
    if os.geteuid() != 0:
        raise Skip("needs root to mount a tmpfs")
    mnt = ctx.path(name)
    os.mkdir(mnt)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o",
                        f"size={TMPFS_SIZE},mode=0700", "tmpfs", mnt],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise Skip(f"cannot mount a tmpfs: {r.stderr.strip()}")
    ctx.cleanups.append(lambda: umount(mnt))
    return mnt


def umount(mnt):
    r = subprocess.run(["umount", mnt], capture_output=True, text=True)
    if r.returncode != 0:
        subprocess.run(["umount", "-l", mnt], capture_output=True)
        print(f"warning: umount {mnt}: {r.stderr.strip()} (lazily "
              "unmounted)", flush=True)


def fiu_daemon(ctx, name="evictd"):
    """A daemon of the FIU=1 build run under fiu-run (its control FIFOs in
    the scratch directory): a wrapper script execs fiu-run, which execs
    evictd, so the pid is the daemon's."""
    prefix = ctx.path("fiu")
    wrapper = ctx.path("fiu-evictd")
    if not os.path.exists(wrapper):
        with open(wrapper, "w") as f:
            f.write(f"#!/bin/sh\nexec fiu-run -f '{prefix}' "
                    f"'{ctx.fiu_bin}' \"$@\"\n")
        os.chmod(wrapper, 0o755)
    d = Daemon(ctx.path(name + ".log"), wrapper)
    d.fiu_prefix = prefix
    ctx.daemons.append(d)
    return d


def fiu_ctl(d, command, point, must=True):
    r = subprocess.run(["fiu-ctrl", "-f", d.fiu_prefix, "-c",
                        f"{command} name={point}", str(d.pid)],
                       capture_output=True, text=True, timeout=10)
    out = (r.stdout + r.stderr).strip()
    if must:
        expect(r.returncode == 0 and "rror" not in out,
               f"fiu-ctrl {command} {point}: {out or r.returncode}")


class FiuPoint:
    def __init__(self, d, point, err_text):
        self.d, self.point, self.err_text = d, point, err_text

    def inject(self):
        fiu_ctl(self.d, "enable", self.point)

    def heal(self):
        if self.d.proc.poll() is None:  # (a new process starts clean)
            fiu_ctl(self.d, "disable", self.point)


class FullDisk:
    def __init__(self, mnt):
        self.mnt, self.filler = mnt, None
        self.err_text = ENOSPC_TEXT

    def inject(self):
        self.filler = Filler(os.path.join(self.mnt, "filler"))
        self.filler.fill()

    def heal(self):
        if self.filler is not None:
            self.filler.heal()
            self.filler = None


# ---- cases ------------------------------------------------------------------


def fleets(ctx, n=CLIENTS, per=SESSIONS):
    return [Fleet(random.Random(ctx.seed * 100 + k),
                  session_ids(f"c{k}", per)) for k in range(n)]


def damage(log, args):
    """What is at the place a refused start-up calls damaged: a run of
    zero bytes (a hole) says the segment was extended by a truncate to
    a length beyond its end."""
    m = re.search(r"(journal\.\d+) is damaged at byte (\d+)", log)
    if m is None or "--state-dir" not in args:
        return ""
    path = os.path.join(str(args[args.index("--state-dir") + 1]),
                        m.group(1))
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return ""
    at = int(m.group(2))
    i = data.find(bytes(64), at)
    if i < 0:
        return (f"\n{m.group(1)} is {len(data)} bytes, with no run of "
                f"zero bytes after byte {at}")
    j = len(data) - len(data[i:].lstrip(b"\0"))
    return (f"\n{m.group(1)} is {len(data)} bytes; damaged at byte {at}: "
            f"{i - at} other bytes, then {j - i} zero bytes (a hole: the "
            f"file was extended past its end), then {len(data) - j} bytes "
            "(records written after it)")


def start(d, *args):
    rc = d.start(*args)
    expect(rc is None, f"evictd exited with {rc} at start:\n{d.log()}"
           + (damage(d.log(), args) if rc is not None else ""))


def restart_verify(d, args, fls, pending, state):
    """Starts the daemon again and checks that it holds exactly what the
    acknowledged requests made (a request cut off: all or nothing)."""
    start(d, *args)
    c = Client(d.addr)
    applied = verify(c, fls, pending)
    c.close()
    return applied


COMPACT_AFTER = 1 << 20
BALLAST = 60000  # positions per ballast step: a journal record of ~240 KB


def ballast(d):
    """Big steps of a session of no client's (deleted at the end, so that
    snapshots stay small) until the journal outgrows COMPACT_AFTER and a
    snapshot is written: from then on the journal appends to a new
    segment, with room for the rest of the case before the next one."""
    c = Client(d.addr, timeout=30)
    p, n = 0, 0
    try:
        while not re.search(SNAP_WRITTEN, d.log()):
            expect(n < 12, "no snapshot written after "
                   f"{n * BALLAST} ballast positions")
            body = {"positions": list(range(p + 1, p + 1 + BALLAST))}
            status, _ = c.call("POST", "/session/ballast/step", body)
            expect(status == 200, f"ballast step: {status}")
            p += BALLAST
            n += 1
            if n * BALLAST * 4 < COMPACT_AFTER:
                continue
            deadline = now() + 1.0
            while now() < deadline and not re.search(SNAP_WRITTEN,
                                                     d.log()):
                time.sleep(0.01)
        status, _ = c.call("DELETE", "/session/ballast")
        expect(status == 204, f"DELETE /session/ballast: {status}")
    finally:
        c.close()


def journal_case(mode, how, end, compact=False):
    """how: "disk" (the tmpfs fills up) or a fault point ("write",
    "sync"); end: "kill-under-load" (after recovering) or
    "kill-while-failing" (a second episode, not healed); compact: a
    snapshot written (the journal moved on to a new segment) before the
    fault, and none after it."""
    def case(ctx):
        res = Result()
        if how == "disk":
            state = os.path.join(mount_tmpfs(ctx), "state")
            d = ctx.daemon()
        else:
            state = ctx.path("state")
            d = fiu_daemon(ctx)
        args = ["--state-dir", state, "--fsync", mode, "--budget",
                DEFAULT_BUDGET]
        if compact:
            args += ["--compact-after", str(COMPACT_AFTER)]
        start(d, *args)
        if how == "disk":
            fault = FullDisk(os.path.dirname(state))
        else:
            fault = FiuPoint(d, f"evictd/journal/{how}",
                             ENOSPC_TEXT if how == "write" else EIO_TEXT)
        if how == "disk":
            ctx.cleanups.insert(0, fault.heal)  # before the umount
        fls = fleets(ctx)
        ep = Episode()
        loaders = start_loaders(d, fls, ep)
        load_for(loaders, 0.3, "before the fault")
        if compact:
            ballast(d)
        parked = fail_episode(d, fls, loaders, ep, fault.inject,
                              fault.err_text, res)
        expect(parked or (how == "sync" and mode == "everysec"),
               "no request was parked by the failed write")
        recover(d, loaders, ep, parked, fault.heal, res)
        if end == "kill-under-load":
            pending = kill_under_load(d, loaders, ep, state)
            left = 0
        else:
            parked = fail_episode(d, fls, loaders, ep, fault.inject,
                                  fault.err_text, res)
            left = len(parked)
            stop_loaders(loaders, ep)
            d.kill()
            pending = join_loaders(loaders)
            wait_dir_free(state)
            fault.heal()  # room to start again (fiu: a new process)
        applied = restart_verify(d, args, fls, pending, state)
        expect(d.term() == 0, "SIGTERM: exit status not 0")
        expect(segments(state) == [], "journal segments left after the "
               f"final snapshot: {segments(state)}")
        answers = sum(f.sent for f in fls)
        return (f"{res.answered} parked and answered "
                f"{res.parked_max * 1000:.0f} ms after the heal at most; "
                f"{res.refused} changes refused and {res.reads} reads "
                f"answered while failing (max "
                f"{max(res.refuse_max, res.read_max) * 1000:.0f} ms); "
                f"healthz ok "
                f"{res.recover * 1000:.0f} ms after the heal; kill -9 "
                + ("under load" if end == "kill-under-load" else
                   f"while failing ({left} parked)")
                + f": {applied} of {len(pending)} cut off found applied; "
                f"{answers} answers checked")
    return case


def sigterm_while_failing(how):
    """SIGTERM while the journal fails and requests are parked: the daemon
    waits for them (10 s at most), tries the pending writes once more,
    fails, exits non-zero without a snapshot; the journal stays and
    replays on start with every acknowledged change."""
    def case(ctx):
        res = Result()
        if how == "disk":
            state = os.path.join(mount_tmpfs(ctx), "state")
            d = ctx.daemon()
            fault = FullDisk(os.path.dirname(state))
        else:
            state = ctx.path("state")
            d = fiu_daemon(ctx)
            fault = FiuPoint(d, "evictd/journal/write", ENOSPC_TEXT)
        if how == "disk":
            ctx.cleanups.insert(0, fault.heal)  # before the umount
        args = ["--state-dir", state, "--fsync", "always", "--budget",
                DEFAULT_BUDGET]
        start(d, *args)
        fls = fleets(ctx)
        ep = Episode()
        loaders = start_loaders(d, fls, ep)
        load_for(loaders, 0.3, "before the fault")
        parked = fail_episode(d, fls, loaders, ep, fault.inject,
                              fault.err_text, res)
        expect(parked, "no request was parked by the failed write")
        stop_loaders(loaders, ep)  # the parked ones stay in flight
        for t in loaders:
            if t not in parked:
                t.join(10)
        t0 = now()
        d.proc.send_signal(signal.SIGTERM)
        m = wait_log(d, r"no longer accepting; finishing (\d+) requests?", 5,
                     "SIGTERM")
        expect(int(m.group(1)) >= len(parked),
               f"SIGTERM: finishing {m.group(1)} requests, but "
               f"{len(parked)} are parked")
        if how == "disk":
            # A second signal ends the wait for the parked requests.
            time.sleep(0.3)
            expect(d.proc.poll() is None, "evictd exited before its grace "
                   "period with requests parked")
            d.proc.send_signal(signal.SIGTERM)
            limit = 5.0
        else:
            limit = 10.0 + 5.0  # the grace period, then the final attempt
        try:
            rc = d.proc.wait(limit)
        except subprocess.TimeoutExpired:
            raise Fail(f"evictd still running {limit:.0f} s after SIGTERM "
                       "with the journal failing")
        took = now() - t0
        d._forget()
        pending = join_loaders(loaders)
        wait_dir_free(state)
        log = d.log()
        final_failed = "not writing a snapshot over a failed journal" in log
        expect(re.search(r"journal: \d+ changes? (was|were) never written "
                         r"\(none was acknowledged", log),
               "the exit does not say how many changes were never written")
        segs = segments(state)
        fault.heal()
        applied = restart_verify(d, args, fls, pending, state)
        expect(d.term() == 0, "SIGTERM after the restart: exit status not 0")
        # Now the promises of the failed final attempt.
        hint = ("" if how == "disk" else
                " (evd_journal_close() in server/journal.c writes and syncs "
                "with plain write()/fdatasync(), not through the "
                "evictd/journal/write and evictd/journal/sync points, so "
                "with the point enabled the final attempt cannot fail)")
        expect(final_failed, "SIGTERM with the journal failing "
               f"({fault.err_text}): the final write attempt did not fail"
               f"{hint}; it wrote the parked records and a snapshot; exit "
               f"status {rc}, log tail:\n" + "\n".join(
                   log.splitlines()[-4:]))
        expect(rc != 0, f"exit status {rc} after a failed final write")
        expect(segs, "no journal segment left after a failed final write")
        return (f"{len(parked)} parked; exited {took:.1f} s after SIGTERM "
                f"with status {rc}, journal segments {segs} kept; restart: "
                f"{applied} of {len(pending)} cut off found applied, every "
                "acknowledged change there")
    return case


COMPACT_FAIL = {
    "open": r"cannot start a new segment",
    "fork": r"cannot fork the snapshot writer",
    "rename": r"the snapshot writer failed",
}
SNAP_WRITTEN = r"snapshot at LSN \d+ written .*older segments removed"


def compaction_case(point):
    """A compaction that fails (evictd/journal/open when the new segment
    is created, evictd/snapshot/fork, evictd/snapshot/rename in the
    writer): logged, and nothing else changes: changes accepted, health
    ok, nothing lost across kill -9; with the point disabled the retry
    compacts by itself."""
    name = ("evictd/journal/open" if point == "open"
            else f"evictd/snapshot/{point}")

    def case(ctx):
        state = ctx.path("state")
        d = fiu_daemon(ctx)
        args = ["--state-dir", state, "--fsync", "everysec", "--budget",
                DEFAULT_BUDGET, "--compact-after", "4096"]
        start(d, *args)
        fault = FiuPoint(d, name, None)
        fault.inject()
        fls = fleets(ctx, 2, 20)
        ep = Episode()
        loaders = start_loaders(d, fls, ep, delay=0.001)
        wait_log(d, COMPACT_FAIL[point], 10, f"a compaction with {name} "
                 "enabled failing")
        load_for(loaders, 0.3, f"after a compaction failed ({name})")
        c = Client(d.addr, timeout=10)
        (status, body), _ = timed("GET /healthz", lambda: c.call(
            "GET", "/healthz"))
        expect(body == {"status": "ok"}, f"GET /healthz after a failed "
               f"compaction: {status} {body}")
        expect(c.metric("evictd_journal_failing") == 0,
               "evictd_journal_failing 1 after a failed compaction")
        c.close()
        expect(not os.path.exists(os.path.join(state, "snapshot")),
               "a snapshot was written with " + name + " enabled")
        expect(not os.path.exists(os.path.join(state, "snapshot.tmp"))
               or point != "rename", "snapshot.tmp left after a failed "
               "rename")
        pending = kill_under_load(d, loaders, ep, state)
        segs1 = segments(state)
        # Lifetime 2: the point enabled before anything is journaled, so
        # that the compaction the replayed journal calls for fails too.
        start(d, *args)
        fault.inject()
        c = Client(d.addr)
        applied = verify(c, fls, pending)
        c.close()
        ep = Episode()
        loaders = start_loaders(d, fls, ep, delay=0.01)
        wait_log(d, COMPACT_FAIL[point], 10, f"after the restart, a "
                 f"compaction with {name} enabled failing")
        t_fail = now()
        fault.heal()
        segs2 = segments(state)
        # The retry, COMPACT_RETRY later, must now succeed by itself.
        bad = (r"cannot start a new segment \(File exists\)",
               f"after a failed compaction ({name}) the retry "
               f"{COMPACT_RETRY:.0f} s later cannot start a new segment: "
               "'File exists' (the segment the failed attempt created is "
               "still there); compaction never happens again until a "
               "restart")
        deadline = COMPACT_RETRY + 8
        while not re.search(SNAP_WRITTEN, d.log()):
            check_loaders(loaders, f"waiting for the retried compaction "
                          f"({name} disabled)")
            log = d.log()
            if re.search(bad[0], log):
                raise Fail(bad[1] + "; segments on disk: "
                           f"{segments(state)}")
            expect(now() - t_fail < deadline, f"no snapshot written "
                   f"{deadline:.0f} s after the compaction failed and "
                   f"{name} was disabled; segments {segments(state)}")
            time.sleep(0.05)
        waited = now() - t_fail
        time.sleep(0.1)
        segs3 = segments(state)
        expect(segs3 and segs3[0] > max(segs2) and len(segs3) <= 2,
               f"segments {segs2} before the retried compaction, {segs3} "
               "after it: the old ones should be gone")
        expect(os.path.exists(os.path.join(state, "snapshot")),
               "no snapshot file after the retried compaction")
        load_for(loaders, 0.2, "after the retried compaction")
        pending = kill_under_load(d, loaders, ep, state)
        applied += restart_verify(d, args, fls, pending, state)
        expect(d.term() == 0, "SIGTERM: exit status not 0")
        expect(segments(state) == [], "journal segments left after the "
               f"final snapshot: {segments(state)}")
        return (f"failed compaction logged, changes accepted; kill -9: "
                f"segments {segs1}, nothing lost ({applied} cut off found "
                f"applied); with the point disabled the retry compacted "
                f"{waited:.1f} s after the failure, segments {segs2} -> "
                f"{segs3}; {sum(f.sent for f in fls)} answers checked")
    return case


# name, function, what it needs ("root": a tmpfs; "fiu": the FIU build),
# whether it runs in a process of its own alongside the others (it waits)
def journal_wait_case(ctx):
    """A change whose record cannot be written waits --journal-wait for it,
    then gets 503 journal_failed saying it is applied in memory; once the
    journal works again the same request, resent, gets the original answer
    (a replay). SIGTERM while a change waits: it is answered 503 within the
    bound, and the daemon exits 1 naming the changes never written."""
    state = ctx.path("state")
    d = fiu_daemon(ctx)
    args = ["--state-dir", state, "--fsync", "always", "--journal-wait", "1"]
    start(d, *args)
    c = Client(d.addr, timeout=10)
    status, body = c.call("POST", "/session/w/step", {"pos": 1})
    expect(status == 200, f"first step: {status} {body}")
    fault = FiuPoint(d, "evictd/journal/write", None)
    fault.inject()
    req = {"positions": [2, 3]}
    t0 = now()
    status, body = c.call("POST", "/session/w/step", req)
    took = now() - t0
    expect(is_wait_expired(status, body), f"a change waiting on a failing "
           f"journal: {status} {body}, want 503 journal_failed 'applied in "
           "memory'")
    expect(0.9 <= took <= 2.0, f"answered after {took:.2f} s with "
           "--journal-wait 1")
    expect("once /healthz says ok" in body["error"]["message"],
           f"the message does not say when to resend: {body}")
    fault.heal()
    deadline = now() + 5
    while c.call("GET", "/healthz")[1] != {"status": "ok"}:
        expect(now() < deadline, "healthz not ok 5 s after the heal")
        time.sleep(0.05)
    status, body = c.call("POST", "/session/w/step", req)
    expect(status == 200 and body.get("replayed") is True
           and body.get("newest") == 3 and body.get("slots") == [2, 3],
           f"the resend after recovery: {status} {body}, want the replayed "
           "answer of positions 2, 3")
    # SIGTERM while a change waits: bounded, exit 1, the loss named.
    fault.inject()
    got = {}

    def send():
        got["answer"] = Client(d.addr, timeout=10).call(
            "POST", "/session/w/step", {"pos": 4})
    t = threading.Thread(target=send, daemon=True)
    t.start()
    time.sleep(0.3)
    t0 = now()
    d.proc.send_signal(signal.SIGTERM)
    try:
        rc = d.proc.wait(5)
    except subprocess.TimeoutExpired:
        raise Fail("evictd still running 5 s after SIGTERM with a change "
                   "waiting on a failing journal (--journal-wait 1)")
    took = now() - t0
    t.join(5)
    log = d.log()
    d._forget()
    expect(rc == 1, f"exit status {rc} after SIGTERM with the journal "
           "failing, want 1")
    expect(is_wait_expired(*got.get("answer", (None, None))),
           f"the change waiting at SIGTERM got {got.get('answer')}")
    expect("1 change was never written" in log,
           "the log does not name the change never written:\n" + log[-800:])
    c.close()
    return (f"503 'applied in memory' after {took:.2f} s at SIGTERM; resend "
            "after the heal replayed; exit 1 naming 1 change never written")


CASES = [
    ("disk-full-always", journal_case("always", "disk", "kill-under-load"),
     "root", False),
    ("disk-full-everysec", journal_case("everysec", "disk",
                                        "kill-while-failing", True), "root",
     False),
    ("disk-full-sigterm", sigterm_while_failing("disk"), "root", False),
    ("fiu-write-always", journal_case("always", "write", "kill-under-load"),
     "fiu", False),
    ("fiu-write-everysec", journal_case("everysec", "write",
                                        "kill-while-failing", True), "fiu",
     False),
    ("fiu-sync-always", journal_case("always", "sync", "kill-under-load"),
     "fiu", False),
    ("fiu-sync-everysec", journal_case("everysec", "sync",
                                       "kill-while-failing", True), "fiu",
     False),
    ("fiu-open", compaction_case("open"), "fiu", True),
    ("fiu-fork", compaction_case("fork"), "fiu", True),
    ("fiu-rename", compaction_case("rename"), "fiu", True),
    ("fiu-sigterm", sigterm_while_failing("fiu"), "fiu", True),
    ("fiu-journal-wait", journal_wait_case, "fiu", True),
]


# ---- running ----------------------------------------------------------------


def run_case(opts, seed, index, name, fn):
    """Runs one case in this process; prints its line. Returns "ok",
    "skip" or "fail"."""
    tmp = tempfile.mkdtemp(prefix=f"evictd-{name}-")
    ctx = Ctx(opts.binary, tmp, seed + index)
    ctx.opts, ctx.fiu_bin, ctx.cleanups = opts, opts.fiu_bin, []
    t0 = now()
    outcome = "ok"
    try:
        note = fn(ctx)
    except Skip as e:
        outcome = "skip"
        print(f"SKIP {name}: {e}: NOT tested (CI runs this as root)",
              flush=True)
    except (Fail, Transport, AssertionError, OSError,
            subprocess.SubprocessError) as e:
        outcome = "fail"
        Daemon.stop_all()
        print(f"FAIL {name} (seed {seed}, rerun with --seed {seed} --only "
              f"{name}): {e}", flush=True)
        for d in ctx.daemons:
            if os.path.exists(d.log_path):
                with open(d.log_path, errors="replace") as f:
                    text = f.read()
                print(f"--- {os.path.basename(d.log_path)} (last 40 lines):\n"
                      + "\n".join(text.splitlines()[-40:]), flush=True)
    finally:
        Daemon.stop_all()
        for fn_ in ctx.cleanups:
            try:
                fn_()
            except Exception as e:  # cleanup must go on
                print(f"warning: cleanup of {name}: {e!r}", flush=True)
        if opts.keep:
            print(f"scratch directory kept: {tmp}", flush=True)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    if outcome == "ok":
        print(f"ok {name} ({now() - t0:.1f} s)"
              + (f": {note}" if note else ""), flush=True)
    return outcome


def on_signal(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("binary", nargs="?", default=os.environ.get("EVICTD_BIN"))
    ap.add_argument("--fiu-bin", default=os.path.join(
        HERE, "..", "..", "build", "fiu", "evictd"))
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--keep", action="store_true",
                    help="keep the scratch directories")
    ap.add_argument("--only", default=None, help="comma-separated cases")
    ap.add_argument("--serial", action="store_true",
                    help="run every case in this process, one after another")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    opts = ap.parse_args()
    if not opts.binary:
        ap.error("no daemon: give its path or set EVICTD_BIN")
    opts.binary = os.path.abspath(opts.binary)
    opts.fiu_bin = os.path.abspath(opts.fiu_bin)
    seed = opts.seed if opts.seed is not None else random.randrange(1 << 31)
    prog = os.path.basename(sys.argv[0])
    signal.signal(signal.SIGTERM, on_signal)
    if not opts.child:
        print(f"{prog}: seed {seed} (rerun with --seed {seed})", flush=True)
    only = set(opts.only.split(",")) if opts.only else None
    if only is not None:
        unknown = only - {c[0] for c in CASES}
        if unknown:
            ap.error(f"unknown cases: {', '.join(sorted(unknown))}")
    if os.geteuid() != 0 and not opts.child:
        print(f"{prog}: not root: the disk-full cases need root (a tmpfs "
              "is mounted) and are NOT tested here; CI runs them as root",
              flush=True)
    fiu_ok = shutil.which("fiu-run") and shutil.which("fiu-ctrl") and \
        os.access(opts.fiu_bin, os.X_OK)
    t0 = now()
    outcomes, children = {}, []
    try:
        for i, (name, fn, needs, background) in enumerate(CASES):
            if only is not None and name not in only:
                continue
            if needs == "fiu" and not fiu_ok:
                print(f"FAIL {name}: needs fiu-run, fiu-ctrl (deploy/deps.sh "
                      f"faults) and the FIU=1 build {opts.fiu_bin}",
                      flush=True)
                outcomes[name] = "fail"
                continue
            if background and not opts.serial and not opts.child:
                cmd = [sys.executable, os.path.abspath(__file__), "--child",
                       "--seed", str(seed), "--only", name, "--fiu-bin",
                       opts.fiu_bin] + (["--keep"] if opts.keep else []) + \
                    [opts.binary]
                children.append((name, subprocess.Popen(
                    cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL)))
        for i, (name, fn, needs, background) in enumerate(CASES):
            if (only is not None and name not in only) or name in outcomes:
                continue
            if background and not opts.serial and not opts.child:
                continue
            outcomes[name] = run_case(opts, seed, i, name, fn)
        for name, p in children:
            out, _ = p.communicate()
            sys.stdout.write(out.decode("utf-8", "replace"))
            sys.stdout.flush()
            if p.returncode == 0:
                outcomes[name] = ("skip" if out.startswith(b"SKIP")
                                  else "ok")
            else:
                outcomes[name] = "fail"
                if b"FAIL" not in out:
                    print(f"FAIL {name}: its process exited with "
                          f"{p.returncode}", flush=True)
    finally:
        for name, p in children:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(30)
                except subprocess.TimeoutExpired:
                    p.kill()
    failed = [n for n, o in outcomes.items() if o == "fail"]
    skipped = [n for n, o in outcomes.items() if o == "skip"]
    if opts.child:
        sys.exit(1 if failed else 0)
    print(f"{prog}: {sum(o == 'ok' for o in outcomes.values())} ok, "
          f"{len(skipped)} skipped (NOT tested), {len(failed)} failed in "
          f"{now() - t0:.1f} s" + (f": FAILED: {', '.join(failed)} (seed "
                                   f"{seed})" if failed else ""), flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
