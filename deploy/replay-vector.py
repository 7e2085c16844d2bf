#!/usr/bin/env python3
"""Replays proto/vectors/*.json (and rehome/*.json) files against a running
evictd over HTTP.

Usage: replay-vector.py http://HOST:PORT VECTOR.json...

Each vector becomes one session (created with the vector's budget, sinks,
lookahead and page size; forks and adoptions add more; all deleted at the
end); every op
is sent as the API request it stands for and the answer must equal the
vector's expected fields exactly. Exits 0 when all
match, 1 with the first difference otherwise. Standard library only, so that
it runs wherever python3 does (it checks deployed daemons, not the policy).
"""
import http.client
import json
import sys
import urllib.parse

# The HTTP status that goes with each error code a vector may expect.
STATUS = {"invalid_position": 400, "invalid_budget": 400,
          "too_many_positions": 400, "stale_position": 409,
          "tentative_pending": 409, "session_exists": 409,
          "invalid_state": 400, "diverged": 409}
# Keys of an op that describe its request; the others are its answer.
REQUEST_KEYS = {"step", "tentative", "commit", "evict", "truncate", "fork",
                "check", "session", "error", "adopt", "expect_newest"}


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


def request_of(op, path):
    """The (path, body) of the API request a vector op stands for."""
    expect_newest = {"expect_newest": op["expect_newest"]} \
        if "expect_newest" in op else {}
    if "step" in op:
        body = {"positions": op["step"]} if op["step"] else {}
        for k in ("tentative", "commit"):
            if k in op:
                body[k] = op[k]
        return path + "/step", {**body, **expect_newest}
    if "commit" in op:
        return path + "/commit", {"newest": op["commit"], **expect_newest}
    if "truncate" in op:
        return path + "/truncate", {"from": op["truncate"], **expect_newest}
    if "evict" in op:
        return path + "/evict", {"budget": op["evict"], **expect_newest}
    raise Mismatch("unknown op")


def replay(client, vector):
    sid = "replay-" + vector["name"]
    sessions = {None: "/session/" + sid}  # op "session" name -> path
    client.call("DELETE", sessions[None])  # a leftover from an earlier run
    config = {k: vector[k] for k in ("budget", "sinks", "lookahead",
                                     "page_size") if k in vector}
    status, body = client.call("PUT", sessions[None], config)
    expect("PUT status", status, 201)
    for i, op in enumerate(vector["ops"]):
        where = f"{vector['name']} op {i} {json.dumps(op)[:80]}"
        try:
            path = sessions.get(op.get("session"))
            if "adopt" in op:
                # 201 for a name not made yet, else 200; the view's id
                # aside, the answer is the op's.
                fresh = path is None
                if fresh:
                    path = f"/session/{sid}.{op['session']}"
                    client.call("DELETE", path)
                status, body = client.call("POST", path + "/adopt",
                                           op["adopt"])
                if "error" not in op:
                    expect("adopt status", status, 201 if fresh else 200)
                    expect("id", body.pop("id", None), path[9:])
                    expect("answer", body, {k: v for k, v in op.items()
                                            if k not in REQUEST_KEYS})
                    sessions[op.get("session")] = path
                    continue
            elif path is None:
                raise Mismatch("op on a session never forked or adopted")
            elif "check" in op:
                status, body = client.call("GET", path)
                expect("status", status, 200)
                for k, want in op["check"].items():
                    expect(k, body.get(k, [] if k in ("tentative", "pages")
                                       else None), want)
                continue
            elif "fork" in op:
                child = f"{sid}.{op['fork']}"
                client.call("DELETE", "/session/" + child)
                status, body = client.call(
                    "POST", path + "/fork",
                    {"into": child, **({"expect_newest": op["expect_newest"]}
                                       if "expect_newest" in op else {})})
                if "error" not in op:
                    expect("fork status", status, 201)
                    sessions[op["fork"]] = "/session/" + child
                    continue
            else:
                status, body = client.call("POST", *request_of(op, path))
            if "error" in op:
                expect("status", status, STATUS[op["error"]])
                expect("error code", body["error"]["code"], op["error"])
            else:
                expect("status", status, 200)
                expect("answer", body, {k: v for k, v in op.items()
                                        if k not in REQUEST_KEYS})
        except Mismatch as e:
            raise Mismatch(f"{where}: {e}") from None
    for path in sessions.values():
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
