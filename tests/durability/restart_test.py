#!/usr/bin/env python3
"""Restarts lose nothing: sessions of many budgets, sinks, lookaheads and
page sizes are created (PUT, or by a step), stepped (one position, several,
more than the lookahead, in batches), given drafts (tentative steps) and
commits (alone and in steps), truncated (into the sinks, into the drafts,
above the newest), forked (and both sides stepped on), evicted and deleted,
adopted (created, resent, replaced; refused for a state no session can be
in), changed with the newest expected (and refused as diverged when it is
not the session's), and retried, every answer checked against a naive model
(support/window_model.py); then
the daemon gets SIGTERM, must exit 0, and a daemon started on the same
--state-dir must show every session exactly as the model says (GET) and
answer a retry of each session's last step, commit or truncate request with
"replayed":true and the same body.

Cases: one per --fsync mode; compaction (a tiny --compact-after, so that
forked children write snapshots during the run and old segments go);
SIGKILL of an idle daemon under --fsync always; adoptions acknowledged
under --fsync always and everysec survive SIGKILL; more sessions on disk
than today's --max-sessions; reaped sessions stay reaped; sessions created
under
other --sinks/--lookahead/--page-size defaults keep their configuration
when the daemon restarts with others; and last, that the workloads of the
cases before it exercised every operation (support.durability.COVERAGE).

Usage: restart_test.py [--seed N] [--only CASE,...] [path/to/evictd]
(default $EVICTD_BIN)."""
import os
import re
import sys
import time

sys.dont_write_bytecode = True
from support.durability import (  # noqa: E402
    COVERAGE, DEFAULT_BUDGET, Client, Fleet, coverage, run_cases, segments,
    session_ids, verify)
from support.fail import expect  # noqa: E402

OPS = 1500
ALL = []  # every fleet of the cases run, for case_coverage


def fleets(ctx, n=3, per=40, defaults=None):
    fls = [Fleet(ctx.rng, session_ids(f"f{k}", per), defaults)
           for k in range(n)]
    ALL.extend(fls)
    return fls


def start(d, state, *args):
    rc = d.start("--state-dir", state, "--budget", DEFAULT_BUDGET, *args)
    expect(rc is None, f"evictd exited with {rc} at start:\n{d.log()}")
    return Client(d.addr)


def load(client, fls, ops, rng):
    for _ in range(ops):
        f = rng.choice(fls)
        f.send(client, f.next_op())


def sigterm(d, client):
    client.close()
    rc = d.term()
    expect(rc == 0, f"SIGTERM: exit status {rc}, expected 0")


def restart_mode(mode):
    def case(ctx):
        state = ctx.path("state")
        d = ctx.daemon()
        fls = fleets(ctx)
        c = start(d, state, "--fsync", mode)
        load(c, fls, OPS, ctx.rng)
        verify(c, fls)
        sigterm(d, c)
        expect(segments(state) == [],
               f"journal segments left after the final snapshot: "
               f"{segments(state)}")
        # Twice: the second restart replays the journal written after a
        # snapshot was loaded.
        for _ in range(2):
            c = start(d, state, "--fsync", mode)
            verify(c, fls)
            load(c, fls, OPS // 3, ctx.rng)
            sigterm(d, c)
        c = start(d, state, "--fsync", mode)
        verify(c, fls)
        live = sum(f.s[s].win is not None for f in fls for s in f.ids)
        sigterm(d, c)
        return f"{live} live sessions, every view and retry identical"
    return case


def case_compaction(ctx):
    state = ctx.path("state")
    d = ctx.daemon()
    fls = fleets(ctx)
    c = start(d, state, "--fsync", "everysec", "--compact-after", "4096")
    load(c, fls, OPS * 2, ctx.rng)
    # The last snapshot writer may still be busy: wait for its report.
    deadline = time.monotonic() + 20
    while True:
        log = d.log()
        begun = len(re.findall(r"writing a snapshot", log))
        done = re.findall(r"snapshot at LSN \d+ written.*older segments "
                          r"removed", log)
        if begun >= 2 and len(done) == begun or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    expect(begun >= 2 and len(done) == begun,
           f"{begun} snapshots begun, {len(done)} reported written with "
           f"old segments removed; expected at least 2, all written")
    segs = segments(state)
    expect(segs and segs[0] > 1 and len(segs) <= 2,
           f"journal segments on disk: {segs}; expected the ones before the "
           f"last snapshot removed")
    expect(os.path.exists(os.path.join(state, "snapshot")), "no snapshot")
    verify(c, fls)
    sigterm(d, c)
    c = start(d, state, "--fsync", "everysec", "--compact-after", "4096")
    verify(c, fls)
    load(c, fls, OPS // 2, ctx.rng)
    sigterm(d, c)
    c = start(d, state)
    verify(c, fls)
    sigterm(d, c)
    return f"{begun} snapshots by the forked writer, segments now {segs}"


def case_kill_idle(ctx):
    """With --fsync always every answer means "on disk": SIGKILL of an idle
    daemon loses nothing, also with snapshots coming and going."""
    state = ctx.path("state")
    d = ctx.daemon()
    fls = fleets(ctx)
    for compact in ("4096", "67108864", "4096"):
        c = start(d, state, "--fsync", "always", "--compact-after", compact)
        verify(c, fls)
        load(c, fls, OPS // 2, ctx.rng)
        c.close()
        d.kill()
    c = start(d, state, "--fsync", "always")
    verify(c, fls)
    sigterm(d, c)


def case_adopt_kill9(ctx):
    """Adoptions (new sessions, replacements, and steps on from them) are
    as durable as any change: acknowledged under --fsync always or
    everysec, they survive SIGKILL, from the journal and, after a restart,
    from the snapshot."""
    state = ctx.path("state")
    d = ctx.daemon()
    fls = fleets(ctx, 2, 30)
    adopted = 0
    for mode in ("always", "everysec", "always", "everysec"):
        c = start(d, state, "--fsync", mode)
        verify(c, fls)
        for _ in range(120):
            f = ctx.rng.choice(fls)
            sid = ctx.rng.choice(f.ids)
            op = (f.op_adopt(sid) if ctx.rng.random() < 0.6
                  or f.s[sid].win is None else f.next_op())
            f.send(c, op)
            adopted += op.kind == "adopt" and op.status in (200, 201)
        c.close()
        d.kill()
    c = start(d, state)
    verify(c, fls)
    sigterm(d, c)
    c = start(d, state)
    verify(c, fls)
    sigterm(d, c)
    return f"{adopted} adoptions answered, each found after SIGKILL"


def case_max_sessions(ctx):
    """Saved sessions all come back even above today's --max-sessions; new
    ones are then refused."""
    state = ctx.path("state")
    d = ctx.daemon()
    fls = fleets(ctx, 1, 30)
    c = start(d, state)
    for sid in fls[0].ids:
        fls[0].send(c, fls[0].op_put(sid))
    load(c, fls, 200, ctx.rng)
    sigterm(d, c)
    c = start(d, state, "--max-sessions", "5")
    verify(c, fls)
    live = sum(fls[0].s[s].win is not None for s in fls[0].ids)
    expect(live > 5, f"only {live} live sessions")
    status, body = c.call("PUT", "/session/one-too-many", {})
    expect(status == 503 and body["error"]["code"] == "session_limit",
           f"PUT above --max-sessions: {status} {body}")
    sigterm(d, c)
    return f"{live} sessions loaded under --max-sessions 5"


def case_reaped_stay_reaped(ctx):
    """A session reaped after --idle-ttl is journaled as gone: neither a
    final snapshot nor a journal replay brings it back."""
    state = ctx.path("state")
    d = ctx.daemon()
    fls = fleets(ctx, 1, 20)
    f = fls[0]
    for kill in (False, True):
        c = start(d, state, "--fsync", "always", "--idle-ttl", "1")
        for sid in f.ids:
            if f.s[sid].win is None:
                f.send(c, f.op_put(sid))
        deadline = time.monotonic() + 20
        while c.metric("evictd_sessions") > 0:
            expect(time.monotonic() < deadline, "sessions not reaped in 20 s")
            time.sleep(0.2)
        for sid in f.ids:
            f.s[sid] = type(f.s[sid])()
        # With --fsync always this answer is durable, and so is every
        # record before it: the reaps.
        f.send(c, f.op_put(f.ids[0]))
        c.close()
        if kill:
            d.kill()
        else:
            sigterm(d, c)
        c = start(d, state)
        verify(c, fls)
        sigterm(d, c)


def case_defaults_change(ctx):
    """Sessions created with the daemon's defaults (--sinks, --lookahead,
    --page-size) keep the configuration they got when the daemon comes
    back with other defaults, from the journal and from a snapshot."""
    state = ctx.path("state")
    d = ctx.daemon()
    runs = [((DEFAULT_BUDGET, 1, 3, 4), "always", True),
            ((DEFAULT_BUDGET, 0, 1, 0), "always", False),
            ((DEFAULT_BUDGET, 2, 5, 16), "everysec", False)]
    fls = fleets(ctx, 2, 30, runs[0][0])
    for defaults, mode, kill in runs:
        for f in fls:
            f.defaults = defaults
        c = start(d, state, "--fsync", mode, "--sinks", defaults[1],
                  "--lookahead", defaults[2], "--page-size", defaults[3])
        verify(c, fls)
        load(c, fls, OPS // 4, ctx.rng)
        if kill:
            c.close()
            d.kill()  # the next start replays the journal
        else:
            sigterm(d, c)
    c = start(d, state)
    verify(c, fls)
    sigterm(d, c)


def case_coverage(ctx):
    """The workloads of the cases before this one (when all of them ran)
    used every operation and variant support.durability.COVERAGE names."""
    total, missing = coverage(ALL)
    if len(ALL) < 10:
        return "skipped: not every case ran"
    expect(not missing, f"the workloads never exercised: {missing}")
    sent = sum(f.sent for f in ALL)
    return (f"{sent} requests; " + ", ".join(
        f"{t} {total[t]}" for t in COVERAGE))


CASES = [("restart-fsync-" + m, restart_mode(m))
         for m in ("always", "everysec", "no")] + [
    ("compaction", case_compaction),
    ("kill-idle", case_kill_idle),
    ("adopt-kill9", case_adopt_kill9),
    ("max-sessions", case_max_sessions),
    ("reaped-stay-reaped", case_reaped_stay_reaped),
    ("defaults-change", case_defaults_change),
    ("coverage", case_coverage),
]

if __name__ == "__main__":
    run_cases(__doc__, CASES)
