#!/usr/bin/env python3
"""Writes the seed corpus of the API fuzzer (tests/fuzz/fuzz_api.c).

Seeds come from two places: every test vector in proto/vectors, turned into
the requests the HTTP tests would send (PUT the session, then one request per
op, also as a batch and as retries), and a hand-written list of requests that
reach every error code of the spec. The framing is the harness's: records
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


def vector_seeds(path):
    v = json.load(open(path))
    name = v["name"]
    cfg = {"budget": v["budget"], "sinks": v["sinks"]}
    out = []

    def op_records(sid, ops):
        recs = []
        for op in ops:
            if "step" in op:
                recs.append(rec("P", f"/session/{sid}/step",
                                {"positions": op["step"]}))
            elif "evict" in op:
                recs.append(rec("P", f"/session/{sid}/evict",
                                {"budget": op["evict"]}))
            else:
                recs.append(rec("G", f"/session/{sid}"))
        return recs

    ops = v["ops"]
    # The whole vector in order, split where it gets long; later pieces run
    # on fresh sessions (gaps are allowed, so most steps still apply).
    pieces = list(chunks(op_records(name, ops),
                         rec("U", f"/session/{name}", cfg)))
    if len(pieces) > 8:  # the long generated vectors: a sample suffices
        pieces = pieces[:3] + pieces[len(pieces) // 2:len(pieces) // 2 + 1] \
            + pieces[-2:]
    for k, p in enumerate(pieces):
        sid = f"{name}-{k}"
        out.append(join([r.replace(f"/session/{name}".encode(),
                                   f"/session/{sid}".encode()) for r in p]))
    steps = [op["step"] for op in ops if "step" in op and "error" not in op]
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
    # The first steps as single "pos" requests, each sent twice (a retry).
    sid = f"{name}-retry"
    recs = [rec("U", f"/session/{sid}", cfg)]
    for s in steps[:8]:
        body = {"pos": s[0]} if len(s) == 1 else {"positions": s}
        recs += [rec("P", f"/session/{sid}/step", body)] * 2
    out.append(join(recs))
    # The same steps as one batch that creates its session.
    items = [dict({"session": f"{name}-batch", "positions": s},
                  **({"budget": v["budget"], "sinks": v["sinks"]} if i == 0
                     else {}))
             for i, s in enumerate(steps[:20])]
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
    # the clock and the reaper (TTL 5 s in the harness)
    s.append(join([put("t"), rec("T", "4000"), rec("G", "/session/t"),
                   rec("T", "4999"), rec("G", "/session/t"),
                   rec("T", "6000"), rec("G", "/session/t")]))
    s.append(rec("T", "600000"))
    # the session limit (1000 in the harness)
    for k in range(16):
        s.append(join([rec("P", "/step", {"steps": [
            {"session": f"lim{k}-{i}", "pos": 1} for i in range(64)]}),
            put(f"lim{k}-put"), step(f"lim{k}-step", {"pos": 1})]))
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
    for path in sorted(glob.glob(os.path.join(vdir, "*.json"))):
        seeds += vector_seeds(path)
    seeds += error_seeds()
    for data in seeds:
        name = hashlib.sha1(data).hexdigest()
        with open(os.path.join(outdir, name), "wb") as f:
            f.write(data)
    print(f"make_corpus: {len(seeds)} seeds in {outdir}")


if __name__ == "__main__":
    main()
