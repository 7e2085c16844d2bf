#!/usr/bin/env python3
"""Writes the seeds of the C client's answer fuzzer (tests/fuzz/fuzz_answer.c):
real answers of a real daemon to every vector of proto/vectors.

The daemon (its binary the first argument) is started on an ephemeral
loopback port; each vector's session is created, every op sent as the C
client sends it (create, step, commit, truncate, evict, fork, GET for a
check), and each answer's bytes are saved behind the target's two-byte
header: the shape (0 answer, 1 view, 2 batch, 3 error) and its parameter
(the answer's required fields, or the batch's item count). The steps of all
vectors are sent again interleaved through batches of at most 16 items (the
target's limit), on sessions of their own. Nothing here is committed: make
regenerates the seeds every time.

Usage: make_answer_seeds.py EVICTD OUTDIR [VECTORS_DIR]"""
import glob
import hashlib
import json
import os
import shutil
import sys
import tempfile

import support.daemon
from support.http import connect

# The API fuzzer's seed writer, beside this file: the same request bodies.
from make_corpus import step_body, vector_config as config

# The fields of reader.h's EVD__F_*: what the C client requires per op.
VICTIMS, SLOTS, DROPPED, REMOVED, SIZE, NEWEST = 1, 2, 4, 8, 16, 32
REQUIRED = {
    "step": VICTIMS | SLOTS | SIZE | NEWEST,
    "commit": VICTIMS | DROPPED | SIZE | NEWEST,
    "truncate": REMOVED | SIZE | NEWEST,
    "evict": VICTIMS | SIZE,
}
MAX_ITEMS = 16


class Evictd:
    """The daemon (support.daemon's, its log in a directory of its own)
    and one keep-alive connection to it."""

    def __init__(self, binary):
        self.tmp = tempfile.mkdtemp(prefix="answer-seeds-")
        self.d = support.daemon.Daemon(os.path.join(self.tmp, "evictd.log"),
                                       binary)
        rc = self.d.start("--budget", "512")
        if rc is not None:
            sys.exit("make_answer_seeds: the daemon did not start (exit "
                     "status %d); it said:\n%s" % (rc, self.d.log()))
        self.conn = connect(self.d.addr, timeout=10)

    def ask(self, method, path, body=None):
        data = None if body is None else json.dumps(
            body, separators=(",", ":")).encode()
        self.conn.request(method, path, body=data,
                          headers={"Content-Type": "application/json"})
        r = self.conn.getresponse()
        return r.status, r.read()

    def stop(self):
        self.conn.close()
        self.d.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)


class Seeds:
    def __init__(self, out):
        self.out, self.n = out, 0

    def save(self, shape, param, status, answer):
        if status >= 400:
            shape, param = 3, 0
        data = bytes([shape, param]) + answer
        name = hashlib.sha1(data).hexdigest()[:16]
        with open(os.path.join(self.out, name), "wb") as f:
            f.write(data)
        self.n += 1


def replay(d, seeds, v, sid):
    st, ans = d.ask("PUT", "/session/" + sid, config(v))
    seeds.save(1, 0, st, ans)
    for op in v["ops"]:
        target = sid + ("." + op["session"] if "session" in op else "")
        base = "/session/" + target
        if "step" in op:
            if any(p < 0 or p > 0xFFFFFFFF for p in op["step"]):
                continue  # positions the C client cannot send
            st, ans = d.ask("POST", base + "/step", step_body(op))
            seeds.save(0, REQUIRED["step"], st, ans)
        elif "commit" in op:
            st, ans = d.ask("POST", base + "/commit", {"newest": op["commit"]})
            seeds.save(0, REQUIRED["commit"], st, ans)
        elif "truncate" in op:
            st, ans = d.ask("POST", base + "/truncate", {"from": op["truncate"]})
            seeds.save(0, REQUIRED["truncate"], st, ans)
        elif "evict" in op:
            st, ans = d.ask("POST", base + "/evict", {"budget": op["evict"]})
            seeds.save(0, REQUIRED["evict"], st, ans)
        elif "fork" in op:
            st, ans = d.ask("POST", base + "/fork",
                            {"into": sid + "." + op["fork"]})
            seeds.save(1, 0, st, ans)
        elif "check" in op:
            st, ans = d.ask("GET", base)
            seeds.save(1, 0, st, ans)


def batches(d, seeds, vectors):
    """Round r: the r-th op of every vector that is a step, in batches."""
    for v in vectors:
        d.ask("PUT", "/session/b." + v["name"], config(v))
    most = max(len(v["ops"]) for v in vectors)
    for r in range(most):
        items = []
        for v in vectors:
            ops = v["ops"]
            if r >= len(ops) or "step" not in ops[r] or "session" in ops[r]:
                continue
            if any(p < 0 or p > 0xFFFFFFFF for p in ops[r]["step"]):
                continue
            item = {"session": "b." + v["name"]}
            item.update(step_body(ops[r]))
            items.append(item)
        for k in range(0, len(items), MAX_ITEMS):
            part = items[k:k + MAX_ITEMS]
            st, ans = d.ask("POST", "/step", {"steps": part})
            seeds.save(2, len(part), st, ans)


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    binary, out = sys.argv[1], sys.argv[2]
    vdir = sys.argv[3] if len(sys.argv) > 3 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "..", "proto",
        "vectors")
    os.makedirs(out, exist_ok=True)
    vectors = [json.load(open(p))
               for p in sorted(glob.glob(os.path.join(vdir, "*.json")))]
    seeds = Seeds(out)
    d = Evictd(binary)
    try:
        for v in vectors:
            replay(d, seeds, v, v["name"])
        batches(d, seeds, vectors)
        # Answers that are errors as a whole (a bad body, an unknown route).
        for method, path, body in (("POST", "/step", {"steps": 1}),
                                   ("GET", "/session/nobody", None),
                                   ("POST", "/session/x/step", {"pos": -1})):
            st, ans = d.ask(method, path, body)
            seeds.save(3, 0, st, ans)
        # A divergence (an error carrying a view), in a batch too, and an
        # adopted session's view (issue 26).
        name = vectors[0]["name"]
        st, ans = d.ask("POST", "/session/%s/step" % name,
                        {"pos": 4000000000, "expect_newest": 3999999999})
        seeds.save(3, 0, st, ans)
        st, ans = d.ask("POST", "/step", {"steps": [
            {"session": name, "pos": 4000000000, "expect_newest": 3999999999},
            {"session": "b." + name, "pos": 4000000000}]})
        seeds.save(2, 2, st, ans)
        st, ans = d.ask("POST", "/session/adopted/adopt",
                        {"budget": 4, "sinks": 1, "kept": [0, 5, 6, 7],
                         "newest": 9})
        seeds.save(1, 0, st, ans)
    finally:
        d.stop()
    print("answer seeds: %d in %s" % (seeds.n, out))


if __name__ == "__main__":
    main()
