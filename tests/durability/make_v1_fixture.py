#!/usr/bin/env python3
"""Regenerates fixtures/v1/: a --state-dir written by the previous release
(journal segments "EVDJRNL1", snapshot "EVDSNAP1") and expected.json, what
that release answered. compat_test.py checks that the current daemon loads
it with every view and replay record intact. Not run by CI: the fixture is
committed, and regenerating it needs the old binary.

    git clone /path/to/evictd /tmp/evd-v1
    git -C /tmp/evd-v1 checkout 2ea14f1   # the last release before v2
    make -C /tmp/evd-v1 -s build/evictd
    tests/durability/make_v1_fixture.py /tmp/evd-v1/build/evictd

How the directory comes about (--fsync always, --budget 8 throughout):
  1. a daemon creates sessions (PUT and autocreating steps, budgets 1..64,
     sinks 0..4) and steps, evicts, batches and deletes; SIGTERM: the
     final snapshot (version 1), no journal segment left;
  2. a second daemon loads it, steps some sessions further, evicts,
     deletes, re-creates and creates more (single requests and batches);
     then kill -9: its journal segment (version 1) stays, after the
     snapshot.
Every session's GET view is recorded before the kill, and so is each
one's last applied step request with the answer it got (what a retry must
get again, with "replayed": true); the old daemon is asked to replay each
of them once, and must, before it is killed.

Usage: make_v1_fixture.py [--seed N] [--out DIR] path/to/old/evictd
"""
import argparse
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
from support.daemon import Daemon  # noqa: E402
from support.durability import Client  # noqa: E402
from support.fail import expect  # noqa: E402


class Gen:
    def __init__(self, client, rng):
        self.c, self.rng = client, rng
        self.live = {}  # id -> newest, for the sessions that exist
        self.cfg = {}  # id -> (budget, sinks)
        self.last = {}  # id -> {"body", "answer"} of the last applied step
        self.ids = []

    def _id(self, sid):
        if sid not in self.ids:
            self.ids.append(sid)

    def put(self, sid, budget=None, sinks=None):
        self._id(sid)
        body = {}
        if budget is not None:
            body["budget"] = budget
        if sinks is not None:
            body["sinks"] = sinks
        st, ans = self.c.call("PUT", f"/session/{sid}", body)
        expect(st == 201, f"PUT {sid}: {st} {ans}")
        self.live[sid] = 0
        self.cfg[sid] = (ans["budget"], ans["sinks"])
        self.last.pop(sid, None)

    def step(self, sid, positions, create=None, form=None):
        """One step request; create: (budget, sinks) fields to send."""
        self._id(sid)
        body = {}
        if len(positions) == 1 and form != "positions":
            body["pos"] = positions[0]
        else:
            body["positions"] = list(positions)
        if create:
            body["budget"], body["sinks"] = create
        st, ans = self.c.call("POST", f"/session/{sid}/step", body)
        expect(st == 200 and "replayed" not in ans,
               f"step {sid} {body}: {st} {ans}")
        self._applied(sid, body, ans)
        return ans

    def _applied(self, sid, body, ans):
        if sid not in self.live:
            self.cfg[sid] = (body.get("budget", 8), body.get("sinks", 0))
        self.live[sid] = ans["newest"]
        req = {k: body[k] for k in ("pos", "positions") if k in body}
        self.last[sid] = {"request": req, "answer": ans}

    def more(self, sid, n):
        p, out = self.live.get(sid, 0), []
        for _ in range(n):
            p += self.rng.choice((1, 1, 1, 2, 3, 7, 100))
            out.append(p)
        return out

    def batch(self, items):
        for it in items:
            self._id(it["session"])
        st, ans = self.c.call("POST", "/step", {"steps": items})
        expect(st == 200, f"batch: {st} {ans}")
        for it, res in zip(items, ans["results"]):
            if "error" not in res and "replayed" not in res:
                self._applied(it["session"], it, res)
        return ans

    def evict(self, sid, budget=None):
        st, ans = self.c.call("POST", f"/session/{sid}/evict",
                              None if budget is None else {"budget": budget})
        expect(st == 200, f"evict {sid}: {st} {ans}")

    def delete(self, sid):
        st, _ = self.c.call("DELETE", f"/session/{sid}")
        expect(st == 204, f"DELETE {sid}: {st}")
        del self.live[sid]
        self.last.pop(sid, None)

    def random_work(self, sids, n):
        rng = self.rng
        for _ in range(n):
            sid = rng.choice(sids)
            r = rng.random()
            if sid not in self.live:
                b = rng.choice((1, 2, 3, 5, 8, 13))
                self.step(sid, self.more(sid, rng.randrange(1, 5)),
                          (b, rng.randrange(0, min(4, b))))
            elif r < 0.55:
                self.step(sid, self.more(sid, 1 if rng.random() < 0.6
                                         else rng.randrange(2, 9)))
            elif r < 0.8:
                items = []
                for s in rng.sample(sids, 3):
                    if s in self.live:
                        items.append({"session": s,
                                      "positions": self.more(s, 2)})
                        self.live[s] = items[-1]["positions"][-1]
                if items:
                    self.batch(items)
            else:
                budget, sinks = self.cfg[sid]
                self.evict(sid, rng.randrange(sinks + 1, budget + 1)
                           if rng.random() < 0.5 else None)

    def views(self):
        out = []
        for sid in self.ids:
            st, view = self.c.call("GET", f"/session/{sid}")
            expect(st in (200, 404), f"GET {sid}: {st}")
            expect((st == 200) == (sid in self.live), f"GET {sid}: {st}")
            last = self.last.get(sid)
            if last is not None:
                # The old daemon's own replay, once: it must match.
                st2, again = self.c.call("POST", f"/session/{sid}/step",
                                         last["request"])
                expect(st2 == 200 and again == dict(last["answer"],
                                                    replayed=True),
                       f"the old daemon's replay of {sid}: {st2} {again}")
            out.append({"id": sid, "view": view if st == 200 else None,
                        "last": last})
        return out


def phase_a(g):
    """Sessions that the snapshot will hold."""
    g.put("v1-sinks", 5, 4)
    for p in range(1, 12):
        g.step("v1-sinks", [p])  # last: one position, a victim (slot 4)
    g.put("v1-multi-victims", 5, 0)
    g.step("v1-multi-victims", [1, 2, 3])
    g.step("v1-multi-victims", [4, 5, 6, 7, 8, 9])  # several, victims
    g.put("v1-single", 8)
    g.step("v1-single", [3])
    g.step("v1-single", [4])  # one position, no victim
    g.step("v1-budget1", [1, 2, 3], (1, 0))
    g.put("v1-put-only", 13, 2)  # never stepped: no replay record
    g.step("v1-evicted-after", [1, 2, 3, 4, 5, 6, 7, 8, 9], (8, 1))
    g.evict("v1-evicted-after", 3)  # the record predates the evict
    g.step("v1-default", [1, 5])  # autocreated with the defaults
    g.step("v1-large-gap", [1, 4294967000], (3, 0))
    g.step("v1-top", [4294967294, 4294967295], (2, 1))
    g.put("v1-big", 64, 3)
    g.step("v1-big", list(range(1, 100)))
    g.step("v1-big", [100, 101, 102], form="positions")
    g.step("v1-" + "L" * 125, [1, 2], (2, 0))  # a 128-byte id
    g.step("v1-deleted", [1], (5, 0))
    g.delete("v1-deleted")
    g.step("v1-recreated", [1, 2, 3], (3, 0))
    g.delete("v1-recreated")
    g.put("v1-recreated", 4, 1)  # its record went with the delete
    g.batch([{"session": "v1-batch-a", "positions": [1, 2], "budget": 2},
             {"session": "v1-batch-b", "pos": 7, "budget": 3, "sinks": 2},
             {"session": "v1-batch-a", "pos": 3}])
    g.random_work([f"v1-r{i}" for i in range(10)], 120)


def phase_b(g):
    """Changes the journal segment after the snapshot will hold."""
    g.step("v1-multi-victims", [10, 11, 12, 13])  # several, victims
    g.step("v1-single", [5])
    g.evict("v1-sinks")  # its own budget: nothing to evict
    g.evict("v1-big", 10)  # the record is still the step's
    g.step("v1-j-created", [2, 3, 4, 5], (3, 1))  # CREATE + STEP
    g.put("v1-j-put", 6, 0)
    g.step("v1-j-put", [1])
    g.delete("v1-budget1")
    g.step("v1-budget1", [9, 10], (2, 1))  # re-created, another config
    g.batch([{"session": "v1-batch-a", "positions": [4, 5, 6]},
             {"session": "v1-j-batch", "pos": 1, "budget": 2},
             {"session": "v1-batch-b", "pos": 7},  # a retry: no change
             {"session": "v1-batch-b", "pos": 3}])  # stale: an error item
    g.random_work([f"v1-r{i}" for i in range(5, 15)], 60)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("binary")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default=os.path.join(HERE, "fixtures", "v1"))
    opts = ap.parse_args()
    binary = os.path.abspath(opts.binary)
    version = subprocess.run([binary, "--version"], capture_output=True,
                             text=True).stdout.strip()
    tmp = tempfile.mkdtemp(prefix="evictd-v1-fixture-")
    state = os.path.join(tmp, "state")
    args = ("--state-dir", state, "--fsync", "always", "--budget", 8)
    d = Daemon(os.path.join(tmp, "evictd.log"), binary)
    g = Gen(None, random.Random(opts.seed))
    try:
        expect(d.start(*args) is None, "the old daemon did not start")
        g.c = Client(d.addr)
        phase_a(g)
        g.c.close()
        expect(d.term() == 0, "SIGTERM: exit status not 0")
        expect(d.start(*args) is None, "the old daemon did not restart")
        g.c = Client(d.addr)
        phase_b(g)
        sessions = g.views()
        g.c.close()
        d.kill()
    except BaseException:
        print(f"failed; the scratch directory is kept: {tmp}",
              file=sys.stderr)
        raise
    finally:
        Daemon.stop_all()
    files = {}
    for name in sorted(os.listdir(state)):
        path = os.path.join(state, name)
        with open(path, "rb") as f:
            magic = f.read(8)
        if name == "snapshot" or name.startswith("journal."):
            files[name] = magic.decode()
    expect(files.get("snapshot") == "EVDSNAP1", f"files: {files}")
    expect(sorted(files.values()) == ["EVDJRNL1", "EVDSNAP1"],
           f"expected one snapshot and one journal segment: {files}")
    with open(os.path.join(state, "snapshot"), "rb") as f:
        snap_lsn = struct.unpack_from("<Q", f.read(16), 8)[0]
    out_state = os.path.join(opts.out, "state")
    shutil.rmtree(out_state, ignore_errors=True)
    os.makedirs(out_state)
    for name in files:
        shutil.copy(os.path.join(state, name), out_state)
    doc = {
        "about": "A --state-dir of the previous release (evictd "
                 f"{version}, git 2ea14f1) and what it answered; made by "
                 "make_v1_fixture.py, checked by compat_test.py.",
        "daemon_args": ["--budget", "8"],
        "files": files,
        "snapshot_lsn": snap_lsn,
        "sessions": sessions,
    }
    with open(os.path.join(opts.out, "expected.json"), "w") as f:
        json.dump(doc, f, indent=1, sort_keys=True)
        f.write("\n")
    shutil.rmtree(tmp, ignore_errors=True)
    live = sum(s["view"] is not None for s in sessions)
    print(f"{opts.out}: {len(sessions)} sessions ({live} live), files "
          f"{files}, snapshot at LSN {snap_lsn}")


if __name__ == "__main__":
    main()
