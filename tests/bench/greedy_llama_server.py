#!/usr/bin/env python3
"""Greedy answers of evictd-llama serve beside llama-server's (issue 31):
the same model, the same settings (llama.cpp's fast defaults: F16 K/V,
flash attention auto, every core), temperature 0, 50 prompts (25 through
/v1/completions, 25 through /v1/chat/completions), each prompt and answer
inside serve's window, so that no eviction happens and the two should
decode the same text. Where an answer differs, the first differing token
is looked at with both servers' probabilities (n_probs / logprobs): a
near tie the two break apart, or a real difference.

Usage: greedy_llama_server.py EVICTD EVICTD_LLAMA LLAMA_SERVER MODEL
Prints a table and exits 0; not a pass/fail test (make compare-llama-server).
"""
import http.client
import json
import os
import subprocess
import sys
import tempfile
import time

STARTS = ["Once upon a time", "One day, a little", "Lily and Ben",
          "The sun was", "Tom had a big", "There was a cat", "Mom said",
          "A little bird", "In the park", "The dog ran", "Sue wanted",
          "It was a cold", "The boy saw", "Anna liked to", "Max was sad",
          "The tree", "A girl named", "Bob found a", "The sky was",
          "Once there lived", "Jack and Jill", "The fish", "Sam had a toy",
          "One night", "The old man"]
ASKS = ["Tell me a story.", "Who is Lily?", "What did the cat do?",
        "Tell me about a dog.", "Say something nice.", "Why is the sky blue?",
        "Tell me about a bird.", "What is a tree?", "Tell me a short story.",
        "Where is the park?", "Who is Tom?", "What happened next?",
        "Tell me about the sun.", "What is your name?", "Tell me a joke.",
        "What did Mom say?", "Tell me about a ball.", "What is a fish?",
        "Tell me about a car.", "Who is Ben?", "Where did they go?",
        "Tell me about a toy.", "What is a cake?", "Tell me about rain.",
        "Say hello."]
N = 48


def wait(port: int, proc: subprocess.Popen) -> None:
    for _ in range(600):
        if proc.poll() is not None:
            raise SystemExit("a server exited: %d" % proc.returncode)
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise SystemExit("no server on %d" % port)


def post(port: int, path: str, body: dict) -> dict:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    c.request("POST", path, body=json.dumps(body),
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    out = json.loads(r.read())
    if r.status != 200:
        raise SystemExit("%s %s: %d %s" % (port, path, r.status, out))
    return out


def free_port() -> int:
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def main() -> None:
    evictd, serve, server, model = sys.argv[1:5]
    tmp = tempfile.mkdtemp(prefix="greedy-")
    sock = os.path.join(tmp, "evictd.sock")
    procs = []
    try:
        procs.append(subprocess.Popen([evictd, "--listen", "unix:" + sock],
                                      stderr=subprocess.DEVNULL))
        ps, pl = free_port(), free_port()
        procs.append(subprocess.Popen(
            [serve, "serve", "-m", model, "--evictd", "unix:" + sock,
             "--listen", "127.0.0.1:%d" % ps, "--budget", "1024",
             "--sinks", "4", "-np", "1", "--no-cache-prompt"],
            stderr=open(os.path.join(tmp, "serve.log"), "w")))
        procs.append(subprocess.Popen(
            [server, "-m", model, "--host", "127.0.0.1", "--port", str(pl),
             "-np", "1", "-c", "2048", "--no-cache-prompt"],
            stderr=open(os.path.join(tmp, "server.log"), "w"),
            stdout=subprocess.DEVNULL))
        time.sleep(0.5)
        wait(ps, procs[1])
        wait(pl, procs[2])
        rows, same = [], 0
        cases = [("/v1/completions", dict(prompt=p)) for p in STARTS] + \
                [("/v1/chat/completions",
                  dict(messages=[{"role": "user", "content": a}]))
                 for a in ASKS]
        for path, body in cases:
            body = dict(body, max_tokens=N, temperature=0, logprobs=2
                        if "prompt" in body else True)
            if "messages" in body:
                body["top_logprobs"] = 2
            a = post(ps, path, body)
            b = post(pl, path, body)
            ta = a["choices"][0].get("text", a["choices"][0].get(
                "message", {}).get("content"))
            tb = b["choices"][0].get("text", b["choices"][0].get(
                "message", {}).get("content"))
            if ta == tb:
                same += 1
                continue
            k = next((i for i in range(min(len(ta), len(tb)))
                      if ta[i] != tb[i]), min(len(ta), len(tb)))
            why = ""
            lb = b["choices"][0].get("logprobs") or {}
            if "content" in lb and lb["content"]:
                # the first token whose text differs: its top two
                off = 0
                for e in lb["content"]:
                    off += len(e["token"])
                    if off > k:
                        tops = [round(t["logprob"], 4)
                                for t in e["top_logprobs"][:2]]
                        why = "llama-server's top two there: %s" % tops
                        break
            elif "top_logprobs" in lb:
                for off, tops in zip(lb.get("text_offset", []),
                                     lb["top_logprobs"]):
                    if off >= k:
                        why = "llama-server's top two there: %s" % \
                            sorted(tops.values(), reverse=True)[:2]
                        break
            rows.append((path, json.dumps(body.get("prompt") or
                                          body["messages"][0]["content"]),
                         k, why))
        print("greedy answers equal: %d of %d (%d tokens each, "
              "temperature 0)" % (same, len(cases), N))
        for r in rows:
            print("  differs: %s %s at char %d; %s" % r)
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(10)


if __name__ == "__main__":
    main()
