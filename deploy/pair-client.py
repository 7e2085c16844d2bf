#!/usr/bin/env python3
"""The HTTP side of deploy/pair-test.sh: completions through the engine
(`evictd-llama serve`) and evictd's /metrics over its Unix socket.

    pair-client.py complete http://HOST:PORT PROMPT N
        POST /completion, not streamed, "cache_prompt": false (nothing
        kept: its session is deleted at its end); prints the answer's JSON.
    pair-client.py stream http://HOST:PORT PROMPT N --kill-after K
                   --stop CMD --kill CMD
        POST /completion with "stream": true, "cache_prompt": false;
        after K pieces runs the stop
        CMD (a shell command: SIGSTOP of evictd, which freezes the engine
        at its next step), asks the engine's /metrics whether the request
        is still decoding (evictd_llama_requests_active), then runs the
        kill CMD (SIGKILL of evictd) and reads on to the end. Prints
        {"content", "pieces", "after_kill", "last": the final event, "gap":
        the longest wait between two events after the kill, in s,
        "landed": whether the kill came while the request was decoding}.
    pair-client.py chat http://HOST:PORT PROMPT N
        POST /v1/chat/completions (OpenAI's API) with PROMPT as the user's
        message, N tokens at most, greedy, the conversation kept (serve's
        default); prints the answer's JSON.
    pair-client.py metrics unix:/PATH
        GET /metrics from evictd over its socket; prints the text.
    pair-client.py get http://HOST:PORT/PATH
        GET; prints the body; exit 1 unless 200.
    pair-client.py page http://HOST:PORT
        GET / as a browser asks for it (gzip): the web UI's page; prints
        its size; exit 1 unless 200 and an HTML page.

Standard library only. Exits 1 with a message on any HTTP error, a
malformed event, or a stream that ends without its final event.
"""
import gzip
import http.client
import json
import socket
import subprocess
import sys
import time
import urllib.parse


class UnixConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout=10):
        super().__init__("localhost", timeout=timeout)
        self.path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.path)


def die(msg):
    print(f"pair-client: {msg}", file=sys.stderr)
    sys.exit(1)


def connect(base, timeout):
    url = urllib.parse.urlsplit(base)
    if url.scheme != "http" or not url.hostname:
        die(f"not an http:// URL: {base}")
    return http.client.HTTPConnection(url.hostname, url.port or 80,
                                      timeout=timeout), url.path


def post(base, body, timeout, path="/completion"):
    conn, _ = connect(base, timeout)
    conn.request("POST", path, body=json.dumps(body).encode(),
                 headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    if r.status != 200:
        die(f"POST {path}: {r.status} {r.read().decode(errors='replace')}")
    return r


def complete(base, prompt, n):
    r = post(base, {"prompt": prompt, "n_predict": n, "temperature": 0,
                    "cache_prompt": False}, 600)
    print(json.dumps(json.loads(r.read())))


def chat(base, prompt, n):
    r = post(base, {"messages": [{"role": "user", "content": prompt}],
                    "max_tokens": n, "temperature": 0}, 600,
             "/v1/chat/completions")
    print(json.dumps(json.loads(r.read())))


def active(base):
    """The engine's count of requests decoding, from its /metrics."""
    conn, _ = connect(base, 10)
    conn.request("GET", "/metrics")
    r = conn.getresponse()
    body = r.read().decode()
    if r.status != 200:
        die(f"GET /metrics: {r.status} {body}")
    for line in body.splitlines():
        if line.startswith("evictd_llama_requests_active "):
            return float(line.split()[1])
    die("the engine's /metrics has no evictd_llama_requests_active")


def stream(base, prompt, n, kill_after, stop_cmd, kill_cmd):
    # The read timeout covers evictd's restart: the engine keeps the
    # request waiting meanwhile (--reconnect-ms, 30 s by default).
    r = post(base, {"prompt": prompt, "n_predict": n, "temperature": 0,
                    "cache_prompt": False, "stream": True}, 60)
    ctype = r.getheader("Content-Type", "")
    if not ctype.startswith("text/event-stream"):
        die(f"streamed answer has Content-Type {ctype!r}")
    pieces, content, last = 0, [], None
    killed_at, after_kill, gap, prev, landed = None, 0, 0.0, None, False
    for raw in r:
        line = raw.decode().rstrip("\r\n")
        if not line:
            continue
        if not line.startswith("data: "):
            die(f"not an SSE data line: {line!r}")
        ev = json.loads(line[6:])
        if "error" in ev:
            die(f"the stream ended with an error: {ev['error']}")
        now = time.monotonic()
        if killed_at is not None:
            gap = max(gap, now - prev)
        prev = now
        if ev.get("stop"):
            last = ev
            break
        content.append(ev["content"])
        pieces += 1
        if killed_at is not None:
            after_kill += 1
        elif pieces == kill_after:
            # Frozen, evictd answers no step: the engine cannot finish
            # meanwhile, so what its /metrics says now holds at the kill.
            subprocess.run(stop_cmd, shell=True, check=True)
            landed = active(base) >= 1
            subprocess.run(kill_cmd, shell=True, check=True)
            killed_at = prev = time.monotonic()
    if last is None:
        die(f"the stream ended after {pieces} pieces without its final event")
    if killed_at is None:
        die(f"the stream ended after {pieces} pieces, before the kill at {kill_after}")
    print(json.dumps({"content": "".join(content), "pieces": pieces,
                      "after_kill": after_kill, "last": last,
                      "gap": round(gap, 3), "landed": landed}))


def main(argv):
    if len(argv) >= 2 and argv[0] == "metrics" and argv[1].startswith("unix:"):
        conn = UnixConnection(argv[1][5:])
        conn.request("GET", "/metrics")
        r = conn.getresponse()
        body = r.read().decode()
        if r.status != 200:
            die(f"GET /metrics: {r.status} {body}")
        sys.stdout.write(body)
    elif len(argv) == 2 and argv[0] == "get":
        conn, path = connect(argv[1], 10)
        conn.request("GET", path or "/")
        r = conn.getresponse()
        sys.stdout.write(r.read().decode())
        sys.exit(0 if r.status == 200 else 1)
    elif len(argv) == 2 and argv[0] == "page":
        conn, _ = connect(argv[1], 10)
        conn.request("GET", "/", headers={"Accept-Encoding": "gzip"})
        r = conn.getresponse()
        body = r.read()
        if r.status != 200 or r.getheader("Content-Encoding") != "gzip":
            die(f"GET /: {r.status} {r.getheader('Content-Encoding')}")
        html = gzip.decompress(body).decode()
        if "<html" not in html:
            die("GET /: not an HTML page: " + html[:200])
        print(f"{len(body)} bytes gzip'd, {len(html)} of HTML")
    elif len(argv) == 4 and argv[0] == "complete":
        complete(argv[1], argv[2], int(argv[3]))
    elif len(argv) == 4 and argv[0] == "chat":
        chat(argv[1], argv[2], int(argv[3]))
    elif len(argv) == 10 and argv[0] == "stream" and \
            argv[4] == "--kill-after" and argv[6] == "--stop" and \
            argv[8] == "--kill":
        stream(argv[1], argv[2], int(argv[3]), int(argv[5]), argv[7],
               argv[9])
    else:
        die("usage: see the docstring of deploy/pair-client.py")


if __name__ == "__main__":
    main(sys.argv[1:])
