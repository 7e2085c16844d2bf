#!/usr/bin/env python3
"""kill -9 under load, in every --fsync mode (rounds take always,
everysec and no in turn): every acknowledged change survives, since an
answer leaves only once its record is written to the file, and nothing is
half-applied.

Each round starts the daemon on the same --state-dir, checks that it holds
what the previous round's acknowledged requests produced, then runs several
client threads, each on its own keep-alive connection and its own sessions,
sending single steps, multi-position steps (longer than the session's
lookahead too), drafts and commits, truncates, forks, batches (with stale
and replayed items now and then), evicts, PUTs, deletes, adoptions (made,
resent, replaced, refused), changes expecting the session's newest (and
refused as diverged) and retries of every kind, on sessions with and
without lookahead and pages, every answer checked against a naive model
(support/window_model.py). At a random moment the daemon gets SIGKILL. A
client has at most one request in flight then; after the restart, the
sessions it touches must be all as before it or all as after
it (a multi-position step, a fork or a batch is one record, all or
nothing), and every other session exactly as the acknowledged requests
left it, replay records included: each session's last step, commit or
truncate request is resent and must be answered "replayed" as before. (An
in-flight request that leaves every view as it was, such as a truncate
above the newest, is told applied or not by its replay record.) Some rounds
use a tiny --compact-after, so that kills also land while the forked child
writes a snapshot.

Two more cases: SIGTERM under load (any --fsync mode) keeps every answered
request; and a retry's "replayed":true answer under --fsync always must be
as durable as the original's (see case_retry_answer_durable).

Usage: crash_test.py [--rounds N] [--seed N] [path/to/evictd]
(default $EVICTD_BIN)."""
import json
import os
import random
import re
import select
import socket
import sys
import threading
import time

sys.dont_write_bytecode = True
from support.durability import (  # noqa: E402
    DEFAULT_BUDGET, Client, Fleet, Transport, coverage, run_cases,
    session_ids, verify, wait_dir_free)
from support.fail import Fail, expect  # noqa: E402

CLIENTS = 4
SESSIONS = 30  # per client
COMPACT = (None, "4096", "16384")  # round i uses COMPACT[i % 3]


class Loader(threading.Thread):
    """One client: sends requests until its connection breaks, which must
    only happen once the daemon has been killed."""

    def __init__(self, fleet, addr, killed):
        super().__init__(daemon=True)
        self.fleet, self.addr, self.killed = fleet, addr, killed
        self.acked, self.pending, self.error = 0, None, None

    def run(self):
        c = Client(self.addr, timeout=60)
        try:
            while True:
                op = self.fleet.next_op()
                try:
                    self.fleet.send(c, op)
                except Transport as e:
                    self.pending = op
                    if not self.killed.is_set():
                        self.error = f"connection failed before the kill: {e}"
                    return
                self.acked += 1
        except Fail as e:
            self.error = str(e)
        finally:
            c.close()


# A process crash loses nothing acknowledged in any mode (only a machine
# crash tells them apart), so the rounds go through all three.
MODES = ("always", "everysec", "no")


def crash_rounds(ctx, rounds):
    state = ctx.path("state")
    d = ctx.daemon()
    fls = [Fleet(random.Random(ctx.seed * 100 + k),
                 session_ids(f"c{k}", SESSIONS)) for k in range(CLIENTS)]
    pending = {}
    during_snapshot = tmp_left = torn = applied_total = 0
    line = None
    for r in range(1, rounds + 1):
        compact = COMPACT[r % len(COMPACT)]
        mode = MODES[(r - 1) % len(MODES)]
        args = ["--state-dir", state, "--fsync", mode,
                "--budget", DEFAULT_BUDGET]
        if compact:
            args += ["--compact-after", compact]
        rc = d.start(*args)
        expect(rc is None, f"round {r}: restart failed with {rc}:\n{d.log()}")
        dropped = "dropping a torn record" in d.log()
        torn += dropped
        c = Client(d.addr)
        applied = verify(c, fls, pending)
        applied_total += applied
        c.close()
        if line:
            print(f"{line}; restarted: {applied} of {len(pending)} "
                  "in-flight request(s) found applied"
                  f"{', a torn record dropped' if dropped else ''}",
                  flush=True)
        killed = threading.Event()
        loaders = [Loader(f, d.addr, killed) for f in fls]
        for t in loaders:
            t.start()
        wait = ctx.rng.uniform(0.05, 1.5)
        time.sleep(wait)
        if compact and ctx.rng.random() < 0.7:
            # Aim at a snapshot: kill within a few milliseconds of the
            # daemon saying it forked a writer.
            seen = d.log().count("writing a snapshot")
            deadline = time.monotonic() + 3
            while (d.log().count("writing a snapshot") == seen
                   and time.monotonic() < deadline):
                time.sleep(0.0005)
            time.sleep(ctx.rng.uniform(0, 0.003))
        killed.set()
        d.kill()
        for t in loaders:
            t.join(60)
            expect(not t.is_alive(), f"round {r}: a client hangs after the "
                   "kill")
        wait_dir_free(state)
        errors = [t.error for t in loaders if t.error]
        expect(not errors, f"round {r}: " + "; ".join(errors))
        acked = sum(t.acked for t in loaders)
        expect(acked > 0, f"round {r}: no request was answered in "
               f"{wait:.2f} s")
        log = d.log()
        begun = log.count("writing a snapshot")
        ended = len(re.findall(r"snapshot at LSN \d+ written|snapshot "
                               r"writer failed", log))
        in_snap = begun > ended
        during_snapshot += in_snap
        # A snapshot.tmp left behind proves the writer died mid-write.
        tmp = os.path.exists(os.path.join(state, "snapshot.tmp"))
        tmp_left += tmp
        pending = {t.fleet: t.pending for t in loaders if t.pending}
        line = (f"  round {r}: --fsync {mode}, compact-after {compact or 'default'}, "
                f"{acked} answers in {wait:.2f} s, {begun} snapshot(s); "
                "killed" + (" with a snapshot writer running" if in_snap
                            else "") +
                (" (snapshot.tmp left half-written)" if tmp else ""))
    # Recover once more, then a clean stop and start must change nothing.
    rc = d.start("--state-dir", state, "--fsync", "always")
    expect(rc is None, f"final restart failed with {rc}:\n{d.log()}")
    torn += "dropping a torn record" in d.log()
    c = Client(d.addr)
    applied = verify(c, fls, pending)
    applied_total += applied
    c.close()
    print(f"{line}; restarted: {applied} of {len(pending)} in-flight "
          "request(s) found applied", flush=True)
    expect(d.term() == 0, "SIGTERM: exit status not 0")
    rc = d.start("--state-dir", state)
    expect(rc is None, f"start after SIGTERM failed with {rc}")
    c = Client(d.addr)
    verify(c, fls)
    c.close()
    expect(d.term() == 0, "SIGTERM: exit status not 0")
    _, missing = coverage(fls)
    return (f"{rounds} of {rounds} kill -9 rounds survived; "
            f"{during_snapshot} killed with a snapshot writer running "
            f"({tmp_left} left snapshot.tmp), {torn} torn "
            f"record(s) dropped, {applied_total} in-flight request(s) "
            f"applied; {sum(f.sent for f in fls)} answers checked, "
            + (f"never exercised: {', '.join(missing)}" if missing else
               "every operation exercised"))


def case_crash(ctx):
    return crash_rounds(ctx, ctx.opts.rounds)


def case_sigterm_under_load(ctx):
    """SIGTERM while clients are busy writes a final snapshot whatever the
    --fsync mode: every answered request is there after the restart, and a
    request cut off by the shutdown is all or nothing, as after a crash."""
    notes = []
    for mode in ("no", "everysec", "always"):
        state = ctx.path(f"state-{mode}")
        d = ctx.daemon(f"evictd-{mode}")
        fls = [Fleet(random.Random(ctx.seed * 100 + k),
                     session_ids(f"t{k}", SESSIONS)) for k in range(CLIENTS)]
        args = ["--state-dir", state, "--fsync", mode, "--budget",
                DEFAULT_BUDGET, "--compact-after", "16384"]
        expect(d.start(*args) is None, "evictd did not start")
        stopping = threading.Event()
        loaders = [Loader(f, d.addr, stopping) for f in fls]
        for t in loaders:
            t.start()
        time.sleep(ctx.rng.uniform(0.3, 1.0))
        stopping.set()
        rc = d.term()
        for t in loaders:
            t.join(60)
        expect(rc == 0, f"--fsync {mode}: SIGTERM under load: exit status "
               f"{rc}, expected 0")
        errors = [t.error for t in loaders if t.error]
        expect(not errors, f"--fsync {mode}: " + "; ".join(errors))
        pending = {t.fleet: t.pending for t in loaders if t.pending}
        expect(d.start(*args) is None, "evictd did not restart")
        c = Client(d.addr)
        applied = verify(c, fls, pending)
        c.close()
        expect(d.term() == 0, "SIGTERM: exit status not 0")
        notes.append(f"{mode}: {sum(t.acked for t in loaders)} answers, "
                     f"{applied} of {len(pending)} cut off found applied")
    return "; ".join(notes)


BALLAST = 1_000_000  # positions per ballast request: a 4 MB journal record


def http_send(sock, path, obj):
    body = json.dumps(obj).encode()
    sock.sendall(b"POST %s HTTP/1.1\r\nHost: evictd\r\nContent-Type: "
                 b"application/json\r\nContent-Length: %d\r\n\r\n"
                 % (path.encode(), len(body)) + body)


def has_data(sock):
    return bool(select.select([sock], [], [], 0)[0])


def case_retry_answer_durable(ctx):
    """With --fsync always, an answer saying a step is applied must mean it
    is on disk, also when it is a retry's "replayed":true answer.

    Two ballast clients keep the journal writer busy with 4 MB records, so
    that a small record waits for the write under way. Clients A and B send
    the same step X at the same time: one is applied, the other is a retry
    of it. When the retry's "replayed":true answer comes while the other
    is still unanswered, the daemon is killed at once. A client was told
    that X is applied: after the restart X must be there. (Without a wait
    for the disk the kill lands before X's record is written in about half
    the tries.) Four tries, each on a fresh state directory."""
    body = json.dumps({"positions": list(range(1, BALLAST + 1))}).encode()
    tries = 0
    for k in range(4):
        state = ctx.path(f"state{k}")
        d = ctx.daemon(f"evictd{k}")
        args = ["--state-dir", state, "--fsync", "always", "--budget", "8",
                "--max-body", str(len(body) * 2), "--max-positions",
                str(BALLAST)]
        expect(d.start(*args) is None, "evictd did not start")
        host, port = d.addr.rsplit(":", 1)
        g = Client(d.addr)
        expect(g.call("POST", "/session/s/step", {"pos": 1})[0] == 200,
               "first step refused")
        stop = threading.Event()

        def ballast(n):
            c = Client(d.addr, timeout=120)
            i = 0
            while not stop.is_set():
                i += 1
                try:
                    c.raw("POST", f"/session/ballast{n}-{i}/step", body,
                          {"Content-Type": "application/json"})
                except Transport:
                    return
        threads = [threading.Thread(target=ballast, args=(n,), daemon=True)
                   for n in range(2)]
        for t in threads:
            t.start()
        time.sleep(0.3)
        x, got = 1, None
        until = time.monotonic() + 1.5
        while time.monotonic() < until:
            x += 1
            a = socket.create_connection((host, int(port)), timeout=30)
            b = socket.create_connection((host, int(port)), timeout=30)
            http_send(a, "/session/s/step", {"pos": x})
            http_send(b, "/session/s/step", {"pos": x})
            # One of the two is the original, the other a retry of it;
            # when the retry's answer comes first, kill at once.
            first = select.select([a, b], [], [], 30)[0]
            expect(first, "no answer in 30 s")
            got = first[0].recv(65536)
            if b'"replayed":true' in got and len(first) == 1:
                d.kill()
                break
            got = None
            other = b if first[0] is a else a
            other.recv(65536)
            a.close()
            b.close()
        stop.set()
        d.kill()
        for t in threads:
            t.join(60)
        wait_dir_free(state)
        if got is None:
            continue  # the answers always came too fast to try
        tries += 1
        expect(d.start(*args) is None, "evictd did not restart")
        g = Client(d.addr)
        status, view = g.call("GET", "/session/s")
        g.close()
        d.term()
        if view["newest"] < x:
            raise Fail(
                f"step {x} was answered \"replayed\":true to a retry while "
                "the original request still waited for its record to be "
                f"durable; after kill -9 the session's newest is "
                f"{view['newest']}: an acknowledged step is lost "
                f"(try {k + 1})")
    return (f"{tries} kills right after a replayed answer came before the "
            "original's, nothing lost")


if __name__ == "__main__":
    run_cases(__doc__, [("kill9", case_crash),
                        ("sigterm-under-load", case_sigterm_under_load),
                        ("retry-answer-durable", case_retry_answer_durable)],
              {"rounds": (10, int, "kill -9 rounds (default 10)")})
