#!/usr/bin/env python3
"""Replays proto/vectors/*.json files against a running evictd over HTTP.

Usage: replay-vector.py http://HOST:PORT VECTOR.json...

Each vector becomes one session (created with the vector's budget and sinks,
deleted at the end); every op is sent as the API request it stands for and
the answer must equal the vector's expected fields exactly. Exits 0 when all
match, 1 with the first difference otherwise. Standard library only, so that
it runs wherever python3 does (it checks deployed daemons, not the policy).
"""
import http.client
import json
import sys
import urllib.parse

# The HTTP status that goes with each error code a vector may expect.
STATUS = {"invalid_position": 400, "invalid_budget": 400,
          "stale_position": 409}


class Mismatch(Exception):
    pass


class Client:
    def __init__(self, base):
        url = urllib.parse.urlsplit(base)
        if url.scheme != "http" or not url.hostname:
            raise SystemExit(f"replay-vector: not an http:// URL: {base}")
        self.conn = http.client.HTTPConnection(url.hostname, url.port or 80,
                                               timeout=10)

    def call(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"} if data else {}
        self.conn.request(method, path, body=data, headers=headers)
        resp = self.conn.getresponse()
        raw = resp.read()
        return resp.status, (json.loads(raw) if raw else None)


def expect(what, got, want):
    if got != want:
        raise Mismatch(f"{what}: got {json.dumps(got)}, want {json.dumps(want)}")


def replay(client, vector):
    sid = "replay-" + vector["name"]
    path = "/session/" + sid
    client.call("DELETE", path)  # a leftover from an earlier run, if any
    status, body = client.call("PUT", path, {"budget": vector["budget"],
                                             "sinks": vector["sinks"]})
    expect("PUT status", status, 201)
    for i, op in enumerate(vector["ops"]):
        where = f"{vector['name']} op {i} {json.dumps(op)[:80]}"
        try:
            if "step" in op:
                status, body = client.call("POST", path + "/step",
                                           {"positions": op["step"]})
                fields = ("victims", "slots", "size", "newest")
            elif "evict" in op:
                status, body = client.call("POST", path + "/evict",
                                           {"budget": op["evict"]})
                fields = ("victims", "size")
            elif "check" in op:
                status, body = client.call("GET", path)
                expect("status", status, 200)
                expect("kept", body["kept"], op["check"]["kept"])
                expect("slots", body["slots"], op["check"]["slots"])
                continue
            else:
                raise Mismatch("unknown op")
            if "error" in op:
                expect("status", status, STATUS[op["error"]])
                expect("error code", body["error"]["code"], op["error"])
            else:
                expect("status", status, 200)
                expect("answer", body, {k: op[k] for k in fields})
        except Mismatch as e:
            raise Mismatch(f"{where}: {e}") from None
    status, _ = client.call("DELETE", path)
    expect(f"{vector['name']} DELETE status", status, 204)
    return len(vector["ops"])


def main(argv):
    if len(argv) < 3:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    client = Client(argv[1])
    for name in argv[2:]:
        with open(name) as f:
            vector = json.load(f)
        try:
            n = replay(client, vector)
        except Mismatch as e:
            print(f"replay-vector: FAIL {e}", file=sys.stderr)
            return 1
        print(f"replay-vector: {vector['name']}: {n} ops match")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
