#!/usr/bin/env python3
"""Writes the seed corpus of the API fuzzer (tests/fuzz/fuzz_api.c).

Seeds come from two places: every test vector in proto/vectors and
proto/vectors/rehome, turned into the requests the HTTP tests would send
(PUT the session, then one request per op, also as a batch and as
retries), and a hand-written list of requests that
reach every error code of the spec (lookahead, page_size, drafts, commit,
truncate and fork included). The framing is the harness's: records
separated by the byte 0xFF, each record an op byte (G H U P D X, or T for the
clock), the path, and after a newline the body.

Usage: make_corpus.py OUTDIR [VECTORS_DIR]
The output is generated, so it is not committed: make fuzz regenerates it."""
import glob
import hashlib
import json
import os
import sys

SEP = b"\xff"
MAX_RECORDS = 60      # the harness runs at most 64 records per input
MAX_BYTES = 6000      # below the fuzzer's -max_len


def rec(op, path, body=None):
    r = op.encode() + path.encode()
    if body is not None:
        if not isinstance(body, (bytes, bytearray)):
            body = json.dumps(body, separators=(",", ":")).encode()
        r += b"\n" + body
    return r


def join(records):
    return SEP.join(records)


def chunks(records, head):
    """Splits records into inputs, each starting with `head` (the PUT)."""
    cur, size = [head], len(head)
    for r in records:
        if len(cur) >= MAX_RECORDS or size + len(r) + 1 > MAX_BYTES:
            yield cur
            cur, size = [head], len(head)
        cur.append(r)
        size += len(r) + 1
    if len(cur) > 1:
        yield cur


def step_body(op):
    """The body of a vector's step op: pos or positions, tentative, commit."""
    body = {}
    if len(op["step"]) == 1:
        body["pos"] = op["step"][0]
    elif op["step"]:
        body["positions"] = op["step"]
    if op.get("tentative"):
        body["tentative"] = True
    if "commit" in op:
        body["commit"] = op["commit"]
    return body


def expecting(op, body):
    """`body` with the op's expect_newest, if it has one."""
    if "expect_newest" in op:
        body["expect_newest"] = op["expect_newest"]
    return body


def vector_config(v):
    cfg = {"budget": v["budget"], "sinks": v["sinks"]}
    for k in ("lookahead", "page_size"):
        if k in v:
            cfg[k] = v[k]
    return cfg


def vector_seeds(path):
    v = json.load(open(path))
    name = v["name"]
    cfg = vector_config(v)
    out = []

    def op_records(sid, ops):
        """Every op of a vector as requests to session sid (forks to
        sid.<name>)."""
        recs = []
        for op in ops:
            target = sid if "session" not in op else f"{sid}.{op['session']}"
            base = f"/session/{target}"
            if "step" in op:
                recs.append(rec("P", base + "/step",
                                expecting(op, step_body(op))))
            elif "evict" in op:
                recs.append(rec("P", base + "/evict",
                                expecting(op, {"budget": op["evict"]})))
            elif "truncate" in op:
                recs.append(rec("P", base + "/truncate",
                                expecting(op, {"from": op["truncate"]})))
            elif "fork" in op:
                recs.append(rec("P", base + "/fork", expecting(
                    op, {"into": f"{sid}.{op['fork']}"})))
            elif "commit" in op:
                recs.append(rec("P", base + "/commit",
                                expecting(op, {"newest": op["commit"]})))
            elif "adopt" in op:
                recs.append(rec("P", base + "/adopt", op["adopt"]))
            else:
                recs.append(rec("G", base))
        return recs

    ops = v["ops"]
    # The whole vector in order, split where it gets long; later pieces run
    # on fresh sessions (gaps are allowed, so most steps still apply; ops on
    # forks that a piece does not create get 404).
    pieces = list(chunks(op_records(name, ops),
                         rec("U", f"/session/{name}", cfg)))
    if len(pieces) > 8:  # the long generated vectors: a sample suffices
        pieces = pieces[:3] + pieces[len(pieces) // 2:len(pieces) // 2 + 1] \
            + pieces[-2:]
    for k, p in enumerate(pieces):
        sid = f"{name}-{k}"
        out.append(join([r.replace(f"/session/{name}".encode(),
                                   f"/session/{sid}".encode())
                         .replace(f"\"{name}.".encode(),
                                  f"\"{sid}.".encode()) for r in p]))
    steps = [op["step"] for op in ops
             if "step" in op and "error" not in op and op["step"]
             and "session" not in op and not op.get("tentative")
             and "commit" not in op]
    # One request that fills the window past its budget.
    if steps:
        last = max(p for s in steps for p in s if isinstance(p, int))
        n = min(v["budget"] + 40, 1000)
        sid = f"{name}-fill"
        out.append(join([rec("U", f"/session/{sid}", cfg),
                         rec("P", f"/session/{sid}/step",
                             {"positions": list(range(1, n + 1))}),
                         rec("G", f"/session/{sid}"),
                         rec("P", f"/session/{sid}/evict",
                             {"budget": max(v["sinks"] + 1, 1)}),
                         rec("P", f"/session/{sid}/step", {"pos": last + n})]))
    # The first ops of the main session, each sent twice (a retry: steps,
    # commits and truncates are answered again, "replayed").
    sid = f"{name}-retry"
    recs = [rec("U", f"/session/{sid}", cfg)]
    for r in op_records(sid, [op for op in ops if "session" not in op
                              and "fork" not in op][:12]):
        recs += [r, r]
    out.append(join(recs))
    # The steps of the main session as one batch that creates its session.
    items = []
    for op in ops:
        if "step" not in op or "session" in op:
            continue
        item = dict({"session": f"{name}-batch"}, **step_body(op))
        if not items:
            item.update(cfg)
        items.append(item)
    items = items[:20]
    if items:
        out.append(join([rec("P", "/step", {"steps": items}),
                         rec("G", f"/session/{name}-batch"),
                         rec("D", f"/session/{name}-batch")]))
    return out


def error_seeds():
    """Requests that reach every error of the spec, and the odd corners."""
    s = []
    put = lambda sid, body=None: rec("U", f"/session/{sid}", body)
    step = lambda sid, body: rec("P", f"/session/{sid}/step", body)
    evict = lambda sid, body=None: rec("P", f"/session/{sid}/evict", body)
    raw = lambda b: b.encode() if isinstance(b, str) else b

    # routes, methods, ids
    s += [rec("G", "/healthz"), rec("H", "/healthz"), rec("G", "/metrics"),
          rec("H", "/metrics"), rec("P", "/healthz", {}), rec("G", "/"),
          rec("G", "/nope"), rec("G", "/session"), rec("G", "/session/a/x"),
          rec("G", "/session/a/step/"), rec("X", "/session/a"),
          rec("G", "/step"), rec("D", "/session/a/evict"),
          rec("P", "/session/a", {}), rec("U", "/session/"),
          rec("U", "/session/a%20b"), rec("U", "/session/" + "x" * 129),
          rec("U", "/session/" + "y" * 128), rec("G", "/session/a b"),
          rec("D", "/session/nobody"), rec("G", "/session/nobody"),
          rec("P", "/session//step", {"pos": 1})]
    # bodies that are not JSON objects, or too deep
    for b in ["", " ", "[]", "7", "null", "{", "{\"budget\":4}x",
              "{\"budget\":4,\"budget\":4}", "{\"pos\":01}",
              "\xef\xbb\xbf{}", "{\"a\":\"\\ud800\"}"]:
        s.append(rec("U", "/session/j", raw(b)))
        s.append(step("j", raw(b)))
    s.append(step("deep", raw("{\"pos\":1,\"attention\":" + "[" * 31
                              + "]" * 31 + "}")))
    s.append(step("deep", raw("{\"pos\":1,\"attention\":" + "[" * 40
                              + "]" * 40 + "}")))
    s.append(step("str", raw("{\"pos\":1,\"attention\":\"\\\"[[[[\\\\\"}")))
    # fields of PUT and step
    for b in [{"budget": "5"}, {"budget": 5.5}, {"budget": 0},
              {"budget": 4097}, {"budget": 4096}, {"sinks": -1},
              {"sinks": 4}, {"budget": 3, "sinks": 2}, {"extra": 1},
              {"budget": 4294967296}]:
        s.append(put("p", b))
    for b in [{"pos": -1}, {"pos": 4294967296}, {"pos": 4294967295},
              {"pos": 1.5}, {"pos": "1"}, {"positions": []},
              {"positions": [3, 3]}, {"positions": [4, 3]},
              {"positions": 5}, {"pos": 1, "positions": [2]}, {},
              {"pos": 1, "other": 1}, {"pos": 1, "budget": 0},
              {"pos": 1, "sinks": 9}, {"pos": 1, "budget": 2, "sinks": 1},
              {"pos": 0}, {"positions": list(range(1, 1030))},
              {"pos": 1, "attention": [0.5, {"x": None}]}]:
        s.append(step("q", b))
    # long keys and odd bytes in messages
    s.append(step("u", raw(b"{\"pos\":1,\"" + b"a" * 39 + "é".encode()
                           + b"\":1}")))
    s.append(step("u", raw(b"{\"pos\":1,\"\\\"\\\\\\u0001\":1}")))
    s.append(step("u", raw(b"{\"pos\":1\x01}")))
    s.append(step("u", raw(b"{\"pos\":1,\"a\\" + "é".encode() + b"\":1}")))
    s.append(step("u", raw("{\"pos\":99999999999999999999}")))
    s.append(join([rec("P", "/step", raw(
        "{\"steps\":[{\"session\":\"h1\",\"pos\":99999999999999999999},"
        "{\"session\":\"h2\",\"positions\":[6,7]}]}")),
        step("h3", raw("{\"pos\":5,\"attention\":[99999999999999999999]}"))]))
    # sessions: exists, stale, retry, evict, delete
    s.append(join([put("e", {"budget": 4, "sinks": 1}),
                   put("e", {"budget": 4, "sinks": 1}),
                   put("e", {"budget": 5}),
                   step("e", {"positions": [1, 2, 3, 4, 5, 6]}),
                   step("e", {"positions": [1, 2, 3, 4, 5, 6]}),
                   step("e", {"positions": [2, 3]}),
                   step("e", {"pos": 6}),
                   evict("e", {"budget": 2}), evict("e"), evict("e", {}),
                   evict("e", {"budget": 1}), evict("e", {"budget": "2"}),
                   evict("e", {"budget": 4294967295}),
                   step("e", {"positions": [1, 2, 3, 4, 5, 6]}),
                   step("e", {"pos": 7}), step("e", {"pos": 7}),
                   rec("G", "/session/e"), rec("D", "/session/e"),
                   rec("D", "/session/e"), evict("e")]))
    # batch
    s.append(rec("P", "/step", {"steps": [
        {"session": "b1", "pos": 5}, {"session": "b2", "positions": [7, 8],
                                      "budget": 2},
        {"session": "b1", "pos": 5}, {"session": "b1", "pos": 1},
        {"session": "a b", "pos": 6}, 7, {"pos": 6}, {"session": 5, "pos": 6},
        {"session": "b1", "pos": 6, "x": 1}, {"session": "c", "pos": 0}]}))
    for b in [{}, {"steps": {}}, {"steps": []}, {"steps": [], "x": 1},
              {"steps": [{"session": f"s{i}", "pos": 1} for i in range(65)]}]:
        s.append(rec("P", "/step", b))
    # lookahead, page_size: PUT and autocreating steps, all their errors
    for b in [{"lookahead": 0}, {"lookahead": 65}, {"lookahead": 64},
              {"lookahead": "2"}, {"lookahead": 2.5}, {"page_size": -1},
              {"page_size": 65537}, {"page_size": 65536},
              {"page_size": True}, {"budget": 4, "lookahead": 3,
                                    "page_size": 2},
              {"budget": 3, "sinks": 1, "lookahead": 2, "page_size": 1}]:
        s.append(join([put("la", b), put("la", b), put("la", {}),
                       rec("G", "/session/la"), rec("D", "/session/la")]))
        s.append(step("la2", dict({"positions": [1, 2, 3]}, **b)))
    # drafts: tentative steps, commits (as a step field and as a route),
    # tentative_pending, too_many_positions, stale after a commit
    dr = lambda sid: [
        put(sid, {"budget": 4, "sinks": 1, "lookahead": 3, "page_size": 2}),
        step(sid, {"positions": [1, 2, 3, 4, 5]}),
        step(sid, {"positions": [6, 7], "tentative": True}),
        step(sid, {"positions": [6, 7], "tentative": True}),
        rec("G", f"/session/{sid}"),
        step(sid, {"pos": 8}),
        evict(sid, {"budget": 2}),
        step(sid, {"positions": [8, 9], "tentative": True}),
        step(sid, {"pos": 8, "tentative": True}),
        rec("P", f"/session/{sid}/commit", {"newest": 6}),
        rec("P", f"/session/{sid}/commit", {"newest": 6}),
        rec("P", f"/session/{sid}/commit", {"newest": 5}),
        step(sid, {"positions": [7, 8, 9], "tentative": True}),
        step(sid, {"commit": 8, "positions": [9, 10], "tentative": True}),
        step(sid, {"commit": 8, "positions": [9, 10], "tentative": True}),
        step(sid, {"commit": 9, "pos": 9}),
        step(sid, {"commit": 10, "pos": 11}),
        step(sid, {"commit": 11}),
        step(sid, {"commit": 11}),
        rec("G", f"/session/{sid}"),
        step(sid, {"pos": 12, "tentative": False}),
        step(sid, {"pos": 13, "tentative": "yes"}),
        step(sid, {"pos": 13, "commit": "12"}),
        step(sid, {"pos": 13, "commit": -1}),
        step(sid, {"pos": 13, "commit": 4294967296}),
        step(sid, {"tentative": True}),
        step(sid, {}),
        rec("P", f"/session/{sid}/commit", {}),
        rec("P", f"/session/{sid}/commit", {"newest": "x"}),
        rec("P", f"/session/{sid}/commit", {"newest": 1.5}),
        rec("P", f"/session/{sid}/commit", {"newest": 12, "x": 1}),
        rec("P", f"/session/{sid}/commit"),
        rec("G", f"/session/{sid}/commit"),
        rec("P", f"/session/{sid}-none/commit", {"newest": 1}),
    ]
    s.append(join(dr("d1")))
    s.append(join([rec("P", "/step", {"steps": [
        {"session": "d2", "positions": [1, 2], "tentative": True,
         "lookahead": 2, "page_size": 1},
        {"session": "d2", "pos": 3},
        {"session": "d2", "commit": 1, "pos": 3, "tentative": True},
        {"session": "d2", "commit": 1, "pos": 3, "tentative": True},
        {"session": "d2", "commit": 3},
        {"session": "d2", "commit": 3, "positions": [4, 5, 6, 7, 8]},
        {"session": "d2", "commit": "3"}, {"session": "d2", "commit": 2},
        {"session": "d2", "tentative": 1, "pos": 9}]}),
        rec("G", "/session/d2")]))
    # truncate: into the pins, the window and the drafts, past the newest,
    # to nothing; its errors; retries
    tr = lambda sid: [
        put(sid, {"budget": 5, "sinks": 2, "lookahead": 2, "page_size": 3}),
        step(sid, {"positions": list(range(1, 12))}),
        rec("P", f"/session/{sid}/truncate", {"from": 20}),
        rec("P", f"/session/{sid}/truncate", {"from": 10}),
        rec("P", f"/session/{sid}/truncate", {"from": 10}),
        rec("G", f"/session/{sid}"),
        step(sid, {"positions": [10, 11], "tentative": True}),
        rec("P", f"/session/{sid}/truncate", {"from": 11}),
        rec("G", f"/session/{sid}"),
        rec("P", f"/session/{sid}/commit", {"newest": 10}),
        rec("P", f"/session/{sid}/truncate", {"from": 1}),
        rec("G", f"/session/{sid}"),
        step(sid, {"positions": [1, 2, 3]}),
        rec("P", f"/session/{sid}/truncate", {"from": 2}),
        step(sid, {"positions": [2, 3, 4, 5, 6, 7, 8]}),
        rec("G", f"/session/{sid}"),
        evict(sid, {"budget": 3}),
        rec("P", f"/session/{sid}/truncate", {"from": 0}),
        rec("P", f"/session/{sid}/truncate", {"from": -1}),
        rec("P", f"/session/{sid}/truncate", {"from": "3"}),
        rec("P", f"/session/{sid}/truncate", {}),
        rec("P", f"/session/{sid}/truncate", {"from": 3, "to": 4}),
        rec("P", f"/session/{sid}/truncate", raw("[3]")),
        rec("D", f"/session/{sid}/truncate"),
        rec("P", f"/session/{sid}-none/truncate", {"from": 3}),
    ]
    s.append(join(tr("t1")))
    # a truncate into the gap above the committed newest: drafts all
    # removed, then commits (the contract's C stays where it was)
    s.append(join([
        put("g1", {"budget": 4, "lookahead": 4}),
        step("g1", {"positions": [1, 2]}),
        step("g1", {"positions": [10, 20], "tentative": True}),
        rec("P", "/session/g1/truncate", {"from": 5}),
        rec("G", "/session/g1"),
        rec("P", "/session/g1/commit", {"newest": 3}),
        rec("P", "/session/g1/commit", {"newest": 4}),
        step("g1", {"pos": 5})]))
    s.append(join([
        put("g2", {"budget": 4, "lookahead": 4}),
        step("g2", {"positions": [1, 2]}),
        step("g2", {"positions": [10, 20], "tentative": True}),
        rec("P", "/session/g2/truncate", {"from": 15}),
        rec("G", "/session/g2"),
        rec("P", "/session/g2/commit", {"newest": 12}),
        step("g2", {"pos": 11, "tentative": True})]))
    # fork: new child, identical child (200), diverged child (409), into
    # itself, its errors; the child's own retries and drafts
    fk = lambda sid: [
        put(sid, {"budget": 4, "sinks": 1, "lookahead": 2, "page_size": 2}),
        step(sid, {"positions": [1, 2, 3, 4, 5]}),
        step(sid, {"positions": [6, 7], "tentative": True}),
        rec("P", f"/session/{sid}/fork", {"into": f"{sid}~a"}),
        rec("P", f"/session/{sid}/fork", {"into": f"{sid}~a"}),
        rec("P", f"/session/{sid}/fork", {"into": sid}),
        rec("G", f"/session/{sid}~a"),
        rec("P", f"/session/{sid}~a/commit", {"newest": 6}),
        rec("P", f"/session/{sid}/fork", {"into": f"{sid}~a"}),
        step(f"{sid}~a", {"positions": [6, 7], "tentative": True}),
        rec("P", f"/session/{sid}/commit", {"newest": 7}),
        rec("G", f"/session/{sid}"), rec("G", f"/session/{sid}~a"),
        rec("P", f"/session/{sid}/fork", {"into": "a b"}),
        rec("P", f"/session/{sid}/fork", {"into": 5}),
        rec("P", f"/session/{sid}/fork", {}),
        rec("P", f"/session/{sid}/fork", {"into": "z", "x": 1}),
        rec("P", f"/session/{sid}/fork"),
        rec("P", f"/session/{sid}-none/fork", {"into": f"{sid}~b"}),
        rec("U", f"/session/{sid}/fork"),
        rec("D", f"/session/{sid}"),
        rec("P", f"/session/{sid}~a/fork", {"into": sid}),
        rec("G", f"/session/{sid}"),
    ]
    s.append(join(fk("f1")))
    s.append(join([rec("U", "/session/f2"), rec("T", "2000"),
                   rec("P", "/session/f2/fork", {"into": "f2.c"}),
                   rec("T", "2000"), rec("P", "/session/f2/step", {"pos": 1}),
                   rec("T", "2000"),
                   rec("P", "/session/f2/fork", {"into": "f2.c"}),
                   rec("T", "2000"), rec("G", "/session/f2.c")]))
    # adopt: created, resent (with and without slots), refused for another
    # state, replaced; every rule of a state broken; bad fields
    ad = lambda sid, body: rec("P", f"/session/{sid}/adopt", body)
    a1 = {"budget": 4, "sinks": 1, "kept": [0, 5, 9, 10], "newest": 12}
    s.append(join([
        ad("a1", a1), ad("a1", a1), ad("a1", dict(a1, slots=[0, 1, 2, 3])),
        ad("a1", dict(a1, newest=13)),
        ad("a1", dict(a1, kept=[0, 5, 9, 11], replace=True)),
        rec("G", "/session/a1"), step("a1", {"pos": 14}),
        step("a1", {"pos": 14}),
        ad("a1", {"budget": 6, "kept": [2, 3, 4, 20], "newest": 20,
                  "slots": [2, 3, 4, 5], "replace": True}),
        step("a1", {"pos": 14}), step("a1", {"pos": 21}),
        ad("a1", {"budget": 6, "lookahead": 3, "page_size": 4,
                  "kept": [1, 2, 9], "newest": 11, "pages": [0, 2],
                  "replace": True}),
        step("a1", {"positions": [12, 13], "tentative": True}),
        ad("a1", {"budget": 6, "lookahead": 3, "page_size": 4,
                  "kept": [1, 2, 9], "newest": 11, "pages": [0, 2]}),
        rec("D", "/session/a1"), ad("a1", a1)]))
    for b in [{"kept": [0, 5, 5], "newest": 5}, {"kept": [0, 5, 3], "newest": 5},
              {"budget": 2, "kept": [0, 1, 2], "newest": 2},
              {"sinks": 1, "kept": [1, 2], "newest": 2},
              {"kept": [0, 5], "newest": 4},
              {"kept": [0, 5], "newest": 4294967295},
              {"kept": [0, 4294967295], "newest": 4294967295},
              {"kept": [], "newest": 4},
              {"kept": [0, 5], "newest": 5, "slots": [0]},
              {"kept": [0, 5], "newest": 5, "slots": [0, 9]},
              {"kept": [0, 5], "newest": 5, "slots": [0, -1]},
              {"sinks": 2, "kept": [0, 5, 6], "newest": 6, "slots": [1, 0, 2]},
              {"sinks": 1, "kept": [0, 5, 6], "newest": 6, "slots": [0, 0, 1]},
              {"kept": [0, 5, 6], "newest": 6, "slots": [0, 1, 3]},
              {"kept": [0, 1, 2], "newest": 2, "slots": [3, 4, 5]},
              {"kept": [4, 5, 6], "newest": 6, "slots": [4, 0, 1]},
              {"page_size": 4, "kept": [0, 5], "newest": 5, "pages": [0, 2]},
              {"page_size": 4, "kept": [0, 5], "newest": 5, "pages": [0]},
              {"kept": [0, 5], "newest": 5, "pages": [0, 1]},
              {"kept": [0, 5], "newest": 5, "pages": []},
              {"kept": [0, 5], "newest": 5, "pages": [0.5]},
              {"newest": 5}, {"kept": [0]}, {"kept": "0", "newest": 5},
              {"kept": [0, "5"], "newest": 5},
              {"kept": [0, 4294967296], "newest": 5},
              {"kept": [0], "newest": -1}, {"kept": [0], "newest": "0"},
              {"kept": [0], "newest": 0, "replace": 1},
              {"kept": [0], "newest": 0, "tentative": []},
              {"kept": [0], "newest": 0, "budget": 0},
              {"kept": [0], "newest": 0, "budget": 4, "sinks": 4}]:
        s.append(join([ad("ab", b), ad("ab", dict(b, replace=True))]))
    s.append(join([ad("al", {"kept": list(range(0, 1001)), "newest": 1000,
                             "budget": 1000}),
                   rec("G", "/session/al"), rec("D", "/session/al")]))
    # expect_newest on every change: matched, diverged, resent, missing
    ex = lambda sid: [
        put(sid, {"budget": 4, "lookahead": 2, "page_size": 2}),
        step(sid, {"positions": [1, 2, 10], "expect_newest": 0}),
        step(sid, {"pos": 11, "expect_newest": 10}),
        step(sid, {"pos": 11, "expect_newest": 10}),
        step(sid, {"pos": 12, "expect_newest": 10}),
        step(sid, {"positions": [12, 13], "tentative": True,
                   "expect_newest": 11}),
        rec("P", f"/session/{sid}/commit", {"newest": 12,
                                            "expect_newest": 13}),
        rec("P", f"/session/{sid}/commit", {"newest": 12,
                                            "expect_newest": 13}),
        rec("P", f"/session/{sid}/commit", {"newest": 13,
                                            "expect_newest": 13}),
        rec("P", f"/session/{sid}/truncate", {"from": 12,
                                              "expect_newest": 12}),
        rec("P", f"/session/{sid}/truncate", {"from": 11,
                                              "expect_newest": 12}),
        evict(sid, {"budget": 2, "expect_newest": 11}),
        evict(sid, {"budget": 2, "expect_newest": 0}),
        rec("P", f"/session/{sid}/fork", {"into": f"{sid}.f",
                                          "expect_newest": 11}),
        rec("P", f"/session/{sid}/fork", {"into": f"{sid}.f",
                                          "expect_newest": 3}),
        rec("P", f"/session/{sid}/fork", {"into": f"{sid}.g",
                                          "expect_newest": 3}),
        step(sid, {"pos": 20, "expect_newest": -1}),
        step(sid, {"pos": 20, "expect_newest": "11"}),
        step(f"{sid}.new", {"pos": 5, "expect_newest": 4}),
        step(f"{sid}.new", {"pos": 5, "expect_newest": 0}),
        rec("P", "/step", {"steps": [
            {"session": sid, "pos": 30, "expect_newest": 0},
            {"session": f"{sid}.m", "pos": 1, "expect_newest": 7},
            {"session": f"{sid}.k", "pos": 1, "expect_newest": 0},
            {"session": sid, "pos": 30, "expect_newest": 11}]}),
    ]
    s.append(join(ex("x1")))
    # the session limit through forks
    s.append(join([rec("U", "/session/fl")] + [
        rec("P", "/session/fl/fork", {"into": f"fl.{i}"}) for i in range(60)]))
    # the clock and the reaper (TTL 5 s in the harness)
    s.append(join([put("t"), rec("T", "4000"), rec("G", "/session/t"),
                   rec("T", "4999"), rec("G", "/session/t"),
                   rec("T", "6000"), rec("G", "/session/t")]))
    s.append(rec("T", "600000"))
    # the session limit (1000 in the harness; the state lives on across
    # inputs, so later ones reach it): batches, PUT, step and fork
    for k in range(16):
        s.append(join([rec("P", "/step", {"steps": [
            {"session": f"lim{k}-{i}", "pos": 1} for i in range(64)]}),
            put(f"lim{k}-put"), step(f"lim{k}-step", {"pos": 1}),
            rec("P", f"/session/lim{k}-put/fork", {"into": f"lim{k}-fork"})]))
    return s


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    outdir = sys.argv[1]
    vdir = sys.argv[2] if len(sys.argv) > 2 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "..", "proto",
        "vectors")
    os.makedirs(outdir, exist_ok=True)
    seeds = []
    for path in sorted(glob.glob(os.path.join(vdir, "*.json"))) + sorted(
            glob.glob(os.path.join(vdir, "rehome", "*.json"))):
        seeds += vector_seeds(path)
    seeds += error_seeds()
    for data in seeds:
        name = hashlib.sha1(data).hexdigest()
        with open(os.path.join(outdir, name), "wb") as f:
            f.write(data)
    print(f"make_corpus: {len(seeds)} seeds in {outdir}")


if __name__ == "__main__":
    main()
