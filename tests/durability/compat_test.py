#!/usr/bin/env python3
"""A --state-dir written by the previous release still loads: the fixture
fixtures/v1/ (made by make_v1_fixture.py with the release before journal
and snapshot version 2: a snapshot "EVDSNAP1" left by SIGTERM and a journal
segment "EVDJRNL1" written after it, left by kill -9 under --fsync always)
holds a few dozen sessions; expected.json says what the old daemon showed
and answered.

- v1-load: every session's GET view is the old one, byte for byte as
  JSON, and resending each session's last step request (alone, and as a
  batch item) gets the old answer plus "replayed": true. Then SIGTERM: the
  snapshot is rewritten as version 2, and everything is the same after a
  restart.
- v1-then-new-ops: the fixture's sessions (and new ones) go on under the
  random workload of every operation, checked against support.window_model:
  drafts, commits, truncates, forks, lookahead and pages, retries; kill -9
  under --fsync always, so that a start replays the old snapshot, the old
  segment and the new one (version 2) together; then SIGTERM and start,
  from the version 2 snapshot alone.

Usage: compat_test.py [--seed N] [--only CASE,...] [path/to/evictd]
(default $EVICTD_BIN)."""
import json
import os
import shutil
import sys

sys.dont_write_bytecode = True
from support.durability import (  # noqa: E402
    Client, Fleet, run_cases, segments, verify)
from support.fail import expect  # noqa: E402
from support.window_model import (  # noqa: E402
    Sess, Win, same_answer, step_key)

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURE = os.path.join(HERE, "fixtures", "v1")
# Sessions whose newest is near 2^32 - 1: the random workload would step
# them past it, so they are only checked as the fixture left them.
STATIC = ("v1-top", "v1-large-gap")


def load_doc():
    with open(os.path.join(FIXTURE, "expected.json")) as f:
        return json.load(f)


def magic(path):
    with open(path, "rb") as f:
        return f.read(8).decode("latin-1")


def copy_fixture(ctx, doc):
    """The fixture's state directory in the case's scratch directory, after
    checking that it is what expected.json says (version 1 files)."""
    state = ctx.path("state")
    shutil.copytree(os.path.join(FIXTURE, "state"), state)
    found = {n: magic(os.path.join(state, n))
             for n in sorted(os.listdir(state))}
    expect(found == doc["files"] and set(found.values()) ==
           {"EVDSNAP1", "EVDJRNL1"},
           f"the fixture holds {found}, expected {doc['files']}, one "
           "version 1 snapshot and one version 1 journal segment")
    return state


def start(ctx, d, state, doc, *extra):
    rc = d.start("--state-dir", state, "--fsync", "always",
                 *doc["daemon_args"], *extra)
    expect(rc is None, f"evictd exited with {rc} at start:\n{d.log()}")
    return Client(d.addr)


def check_recorded(c, sessions, batch=False):
    """Every view as recorded, every last step replayed as recorded."""
    for s in sessions:
        sid = s["id"]
        status, view = c.call("GET", f"/session/{sid}")
        if s["view"] is None:
            expect(status == 404, f"GET {sid}: {status} {view}, expected "
                   "404 (deleted by the old daemon)")
            continue
        expect(status == 200 and view == s["view"],
               f"GET {sid}: {status} {json.dumps(view)}, the old daemon "
               f"showed {json.dumps(s['view'])}")
    replayed = 0
    for s in sessions:
        if s["last"] is None:
            continue
        sid, req = s["id"], s["last"]["request"]
        want = dict(s["last"]["answer"], replayed=True)
        status, got = c.call("POST", f"/session/{sid}/step", req)
        expect(status == 200 and same_answer(got, want),
               f"resending {sid}'s last step {json.dumps(req)}: {status} "
               f"{json.dumps(got)}, expected {json.dumps(want)}")
        replayed += 1
    if batch:
        items = [dict(s["last"]["request"], session=s["id"])
                 for s in sessions if s["last"] is not None]
        status, got = c.call("POST", "/step", {"steps": items})
        want = [dict(s["last"]["answer"], replayed=True)
                for s in sessions if s["last"] is not None]
        expect(status == 200 and same_answer(got, {"results": want}),
               f"the last steps resent as one batch: {status} "
               f"{json.dumps(got)[:600]}")
    return replayed


def sigterm(d, c):
    c.close()
    rc = d.term()
    expect(rc == 0, f"SIGTERM: exit status {rc}, expected 0")


def check_v2_snapshot(state):
    expect(magic(os.path.join(state, "snapshot")) == "EVDSNAP2",
           "the snapshot written at SIGTERM is not version 2")
    expect(segments(state) == [], f"journal segments left after the final "
           f"snapshot: {segments(state)}")


def case_load(ctx):
    doc = load_doc()
    state = copy_fixture(ctx, doc)
    d = ctx.daemon()
    c = start(ctx, d, state, doc)
    n = check_recorded(c, doc["sessions"], batch=True)
    sigterm(d, c)
    check_v2_snapshot(state)
    c = start(ctx, d, state, doc)
    check_recorded(c, doc["sessions"])
    sigterm(d, c)
    live = sum(s["view"] is not None for s in doc["sessions"])
    return (f"{live} sessions of {len(doc['sessions'])} ids as the old "
            f"daemon showed them, {n} replays as it answered, also from a "
            "version 2 snapshot")


def model_fleet(ctx, doc):
    """A Fleet over the fixture's sessions (but STATIC) and a few new ids,
    its model read from the recorded views and last steps."""
    olds = [s for s in doc["sessions"] if s["id"] not in STATIC]
    f = Fleet(ctx.rng, [s["id"] for s in olds] +
              [f"v2-new{i}" for i in range(10)],
              defaults=(int(doc["daemon_args"][1]), 0, 1, 0))
    for s in olds:
        v = s["view"]
        if v is None:
            continue
        w = Win(v["budget"], v["sinks"])
        w.held = list(zip(v["kept"], v["slots"]))
        w.newest = w.committed = v["newest"]
        expect(w.view(s["id"]) == v, f"the model cannot read {v}")
        last = None
        if s["last"] is not None:
            req = s["last"]["request"]
            last = (step_key(req.get("positions") or [req["pos"]]),
                    s["last"]["answer"])
        f.s[s["id"]] = Sess(w, last)
    return f


def case_new_ops(ctx):
    doc = load_doc()
    state = copy_fixture(ctx, doc)
    static = [s for s in doc["sessions"] if s["id"] in STATIC]
    f = model_fleet(ctx, doc)
    d = ctx.daemon()
    c = start(ctx, d, state, doc)
    verify(c, [f])
    f.run(c, 700)
    verify(c, [f])
    c.close()
    d.kill()
    # The old snapshot and segment, and what this daemon appended.
    kinds = sorted(magic(os.path.join(state, n)) for n in os.listdir(state)
                   if n == "snapshot" or n.startswith("journal."))
    expect("EVDJRNL2" in kinds and "EVDSNAP1" in kinds,
           f"after kill -9: files of versions {kinds}, expected the old "
           "snapshot and a version 2 segment")
    c = start(ctx, d, state, doc)
    verify(c, [f])
    check_recorded(c, static)
    f.run(c, 300)
    sigterm(d, c)
    check_v2_snapshot(state)
    c = start(ctx, d, state, doc)
    verify(c, [f])
    check_recorded(c, static)
    sigterm(d, c)
    touched = sum(1 for s in doc["sessions"] if s["id"] not in STATIC
                  and f.s[s["id"]].last is not None
                  and s["last"] is not None
                  and f.s[s["id"]].last[1] is not s["last"]["answer"])
    return (f"{f.sent} requests checked by the model over "
            f"old and new sessions ({touched} old records replaced), "
            f"files after kill -9: {', '.join(kinds)}")


CASES = [("v1-load", case_load), ("v1-then-new-ops", case_new_ops)]

if __name__ == "__main__":
    run_cases(__doc__, CASES)
