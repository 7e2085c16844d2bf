#!/usr/bin/python3
"""`make compare-llama-server` (issue 31): are serve's greedy answers
llama-server's where no eviction happens? Both run on the same GGUF with
the same flags, and 50 completions and 50 chats go to each, temperature
0, every prompt and answer inside serve's budget. The script shows any
difference at its first differing token, with both servers' top-two
margin there, and explains it or exits 1.

  compare_llama_server.py [--evictd P] [--serve P] [--llama-server P]
                          [--model GGUF] [options]

The binaries come from the flags, else $EVICTD_BIN, $EVICTD_LLAMA and
$LLAMA_SERVER, else this repository's build layout (build/evictd,
build/evictd-llama, build/llama/server/build/bin/llama-server).

The 100 requests are generated from a fixed seed, so every run sends the
same ones. The completions are story openings of 14 to 177 tokens (on
stories260K), every fifth with special characters (quotes, a tab, a
newline, accents, an emoji, markup, backslashes). The chats have an
optional system turn and one to three user turns with the assistant's
turns between them.
Each request asks for the top two log-probabilities of every token. Both
servers give those for the raw logits, so a top-two difference in
log-probability equals the difference in logits. Where the answers
differ, the first token whose piece differs is shown with each server's
margin there. Two margins below --threshold (a near-tie, which rounding
can break either way) explain the difference; anything else is
unexplained and the exit status is 1.

How a prompt is split into batches is the usual cause of such rounding.
serve prefills in chunks of --lookahead, while llama-server decodes a
prompt of up to -ub tokens in one batch. So each differing request is
sent again both ways: to a llama-server with -b and -ub equal to serve's
lookahead, and to a serve whose lookahead takes a whole prompt in one
chunk. Either run shows whether matching the split gives the other
server's answer. A token written two ways in the logprobs (same
log-probability and runner-up, different piece: serve writes BOS as
"<s>", llama-server as "") is listed, but it is not a difference.

Only 127.0.0.1: evictd and both servers listen on ephemeral loopback
ports. This is a benchmark, not part of CI, because
llama-server takes about 17 minutes to build.
"""

import argparse
import http.client
import json
import os
import random
import shutil
import sys
import tempfile
from typing import Dict, List, Optional, Tuple, Union

from support import paths
from support.daemon import Daemon
from support.llama_server import LlamaServer
from support.process import wait_healthy
from support.serve import Serve

SEED = 31
OPENINGS = [
    "Once upon a time", "One day, a little girl named Lily",
    "Tom and his mom went to the park", "The sun was hot",
    "There was a big red ball", "Ben had a toy car",
    "In a small house lived an old cat", "The bird sang a song",
    "Sue wanted to play outside", "It was a cold day",
    "Max found a shiny stone", "The dog ran fast",
]
SENTENCES = [
    "She was very happy.", "He liked to play with his friends.",
    "They went to the park to play.", "The sky was blue and the sun was "
    "warm.", "Mom said, \"Be careful!\"", "The cat was sad and lonely.",
    "One day, they found a big box.", "Lily smiled and said thank you.",
    "They played all day long.", "The tree was tall and green.",
    "He wanted to eat the cake.", "The little boy was scared.",
]
SPECIALS = [
    "\"Hello,\" she said. 'Hi!'", "a\ttab and a\nnewline",
    "caf\u00e9, na\u00efve, \u00fcber", "a smile \U0001F642 and a star \u2605",
    "<b>bold</b> & {\"k\": [1, 2]}", "back\\slash C:\\dir\\file",
    "100% of $5 = #1 @ 3:45 pm?", "dash \u2014 ellipsis\u2026 \u00bfqu\u00e9?",
    "line one\n\nline two\r\n", "\u65e5\u672c\u8a9e and \u0440\u0443\u0441",
]
SYSTEMS = [
    "You are a kind storyteller.", "Answer in one short sentence.",
    "You tell stories for small children.", "Be brief \u2014 and friendly!",
]
ASKS = [
    "Tell me a story.", "Who is Lily?", "What did the cat do?",
    "Tell me about a dog.", "Why is the sky blue?", "What happened next?",
    "Say something nice about the park.", "Where did Tom go?",
    "Can you tell me a \"funny\" story?", "What is a tree?",
]
REPLIES = [
    "Once upon a time, there was a little dog.", "Lily is a girl.",
    "The cat sat on the mat.", "They went to the park.", "Yes!",
]


def completion_prompts(n: int, rng: random.Random) -> List[str]:
    """n story openings, longer as they go (up to about 120 tokens),
    every fifth with special characters."""
    out = []
    for i in range(n):
        text = rng.choice(OPENINGS)
        k = (i * 13) // n + rng.randint(0, 2)
        if k:
            text += ". " + " ".join(rng.choice(SENTENCES) for _ in range(k))
        if i % 5 == 4:
            text += " " + rng.choice(SPECIALS)
        if i % 7 == 3:
            text = text.rstrip(".") + ","
        out.append(text)
    return out


def chat_messages(n: int, rng: random.Random) -> List[List[dict]]:
    """n conversations ending with the user's turn: a system turn in two
    of three, one to three user turns with the assistant's in between."""
    out = []
    for i in range(n):
        msgs = []
        if i % 3:
            msgs.append({"role": "system", "content": rng.choice(SYSTEMS)})
        for t in range(1 + i % 3):
            if t:
                msgs.append({"role": "assistant",
                             "content": rng.choice(REPLIES)})
            ask = rng.choice(ASKS)
            if (i + t) % 5 == 4:
                ask += " " + rng.choice(SPECIALS)
            msgs.append({"role": "user", "content": ask})
        out.append(msgs)
    return out


def post(port: int, path: str, body: dict) -> dict:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    try:
        c.request("POST", path, json.dumps(body),
                  {"Content-Type": "application/json"})
        r = c.getresponse()
        raw = r.read()
    finally:
        c.close()
    if r.status != 200:
        raise SystemExit("%s on port %d: %d %s" % (path, port, r.status,
                                                   raw[:300]))
    return json.loads(raw)


Tok = Tuple[str, Optional[int], List[Tuple[str, float]]]


def tokens_of(answer: dict) -> List[Tok]:
    """The generated tokens of an answer: (piece, id or None, top two
    as (piece, logprob)). Two formats arrive. OpenAI's chat one, and
    llama-server's completions, hold a list under logprobs.content.
    serve's completions use OpenAI's legacy one (parallel lists, and
    no ids)."""
    lp = answer["choices"][0].get("logprobs") or {}
    if "content" in lp:
        return [(bytes(e["bytes"]).decode("utf-8", "replace")
                 if "bytes" in e else e["token"], e.get("id"),
                 [(t["token"], t["logprob"]) for t in e["top_logprobs"]])
                for e in lp["content"] or []]
    return [(t, None, sorted(top.items(), key=lambda kv: -kv[1]))
            for t, top in zip(lp.get("tokens", []),
                              lp.get("top_logprobs", []))]


def text_of(answer: dict) -> str:
    c = answer["choices"][0]
    return c["text"] if "text" in c else c["message"].get("content") or ""


def margin(tok: Optional[Tok]) -> Optional[float]:
    if tok is None or len(tok[2]) < 2:
        return None
    return tok[2][0][1] - tok[2][1][1]


def show(tok: Optional[Tok]) -> str:
    if tok is None:
        return "(end)"
    return json.dumps(tok[0]) + ("" if tok[1] is None else "#%d" % tok[1])


class Lineup:
    """evictd, serve beside it and llama-server, one model and flags;
    on demand, a llama-server that prefills in serve's chunks and a serve
    that prefills a whole prompt at once, as llama-server does."""

    def __init__(self, a: argparse.Namespace, model: str, tmp: str) -> None:
        self.a, self.tmp, self.model = a, tmp, model
        self.evictd = Daemon.started(tmp, binary=a.evictd)
        self.flags = ["-np", "1", "-t", str(a.threads), "-fa", a.flash_attn,
                      "-ctk", a.kv, "-ctv", a.kv, "--no-cache-prompt"]
        self.procs: Dict[str, Union[Serve, LlamaServer]] = {}
        try:
            self.serve_port = self.port("serve")
            self.server_port = self.port("llama-server")
        except BaseException:
            self.close()
            raise

    def port(self, which: str) -> int:
        """The port of one of the four servers, started when first asked
        for: "serve", "llama-server" (with the same cells per sequence as
        serve's budget and lookahead), "llama-server chunked" (-b and -ub
        equal to serve's lookahead) or "serve whole" (a lookahead as large
        as llama-server's batch, the budget unchanged). Each on 127.0.0.1,
        a port the system picks."""
        if which not in self.procs:
            a = self.a
            if which.startswith("serve"):
                look = a.budget + a.lookahead if "whole" in which \
                    else a.lookahead
                srv = Serve(self.tmp, self.evictd.url, "--host", "127.0.0.1",
                            "--port", "0", *self.flags, "--budget",
                            str(a.budget), "--sinks", "4", "--lookahead",
                            str(look), model=self.model, binary=a.serve,
                            listen=None)
                self.procs[which] = srv
                wait_healthy(srv.addr, srv.proc, which)
            else:
                args = self.flags + ["-c", str(a.budget + a.lookahead),
                                     "--no-webui"]
                if "chunked" in which:
                    args += ["-b", str(a.lookahead), "-ub", str(a.lookahead)]
                self.procs[which] = LlamaServer(
                    a.llama_server, self.model, *args,
                    log_path=os.path.join(self.tmp, which.replace(" ", "-")
                                          + ".log"))
        return self.procs[which].port

    def close(self) -> None:
        for srv in self.procs.values():
            srv.stop()
        self.evictd.stop()


# How far apart one token's log-probabilities in the two servers may be
# and still be one token: several times the drift between the two (0.011
# at most on stories260K, see deploy/BENCHMARKS.md).
SAME_TOKEN = 0.05


def same_choice(x: Tok, y: Tok) -> bool:
    """Whether two tokens whose pieces differ are one token written two
    ways: the same log-probability and the same runner-up. A control
    token is the case met: serve writes BOS as "<s>" in its logprobs,
    llama-server as ""."""
    return (len(x[2]) >= 2 and len(y[2]) >= 2 and x[2][1][0] == y[2][1][0]
            and abs(x[2][0][1] - y[2][0][1]) < SAME_TOKEN
            and abs(x[2][1][1] - y[2][1][1]) < SAME_TOKEN)


def compare(a: argparse.Namespace, model: str) -> Tuple[List[dict], int]:
    """Sends every request to both servers; returns the rows of the
    report (a differing answer, or a token written differently in an
    equal one) and the number of requests."""
    rng = random.Random(SEED)
    cases = [("/v1/completions", {"prompt": p, "logprobs": 2})
             for p in completion_prompts(a.prompts, rng)]
    cases += [("/v1/chat/completions", {"messages": m, "logprobs": True,
                                        "top_logprobs": 2})
              for m in chat_messages(a.prompts, rng)]
    rows, longest = [], 0
    noise = 0.0
    sizes: Dict[str, List[int]] = {}
    tmp = tempfile.mkdtemp(prefix="compare-llama-server-")
    s: Optional[Lineup] = None
    try:
        s = Lineup(a, model, tmp)
        for i, (path, body) in enumerate(cases):
            body = dict(body, max_tokens=a.tokens, temperature=0,
                        cache_prompt=False, model="compare")
            mine = post(s.serve_port, path, body)
            theirs = post(s.server_port, path, body)
            used = mine["usage"]
            longest = max(longest, used["total_tokens"])
            sizes.setdefault(path, []).append(used["prompt_tokens"])
            if used["total_tokens"] > a.budget:
                raise SystemExit(
                    "request %d: %d tokens exceed the budget of %d, so "
                    "serve would evict: raise --budget" %
                    (i, used["total_tokens"], a.budget))
            ta, tb = tokens_of(mine), tokens_of(theirs)
            k, written = 0, []
            while k < min(len(ta), len(tb)):
                if ta[k][0] != tb[k][0]:
                    if not same_choice(ta[k], tb[k]):
                        break
                    written.append((k, show(ta[k]), show(tb[k])))
                # How far the two servers' log-probabilities of the same
                # token drift apart: the size of the rounding.
                noise = max(noise, abs(ta[k][2][0][1] - tb[k][2][0][1]))
                k += 1
            same_text = text_of(mine) == text_of(theirs)
            prompts = (used["prompt_tokens"],
                       theirs["usage"]["prompt_tokens"])
            if same_text and k == len(ta) == len(tb) and \
                    prompts[0] == prompts[1]:
                if written:
                    rows.append({"i": i, "path": path, "written": written,
                                 "body": body})
                continue
            xa = ta[k] if k < len(ta) else None
            xb = tb[k] if k < len(tb) else None
            ma, mb = margin(xa), margin(xb)
            row = {"i": i, "path": path, "k": k, "serve": show(xa),
                   "server": show(xb), "m_serve": ma, "m_server": mb,
                   "tie": (prompts[0] == prompts[1] and ma is not None and
                           mb is not None and ma < a.threshold and
                           mb < a.threshold),
                   "prompts": prompts, "body": body, "written": written}
            # The prefill split both ways: llama-server in serve's
            # chunks, serve in one chunk as llama-server.
            chunked = text_of(post(s.port("llama-server chunked"), path,
                                   body))
            whole = text_of(post(s.port("serve whole"), path, body))
            row["chunked"] = ("serve's" if chunked == text_of(mine) else
                              "its own" if chunked == text_of(theirs)
                              else "a third")
            row["whole"] = ("llama-server's" if whole == text_of(theirs)
                            else "its own" if whole == text_of(mine)
                            else "a third")
            rows.append(row)
    except BaseException:
        print("the servers' logs: %s" % tmp, file=sys.stderr)
        raise
    finally:
        if s is not None:
            s.close()
    shutil.rmtree(tmp)
    print("%s: %d completions and %d chats of %d tokens, temperature 0; "
          "the longest prompt + answer %d tokens (budget %d, lookahead "
          "%d, -c %d): no eviction" %
          (os.path.basename(model), a.prompts, a.prompts, a.tokens,
           longest, a.budget, a.lookahead, a.budget + a.lookahead))
    print("  prompts of %d to %d tokens (completions), %d to %d (chats)" %
          (min(sizes["/v1/completions"]), max(sizes["/v1/completions"]),
           min(sizes["/v1/chat/completions"]),
           max(sizes["/v1/chat/completions"])))
    print("  the largest difference of a shared token's log-probability: "
          "%.2g" % noise)
    return rows, len(cases)


def report(rows: List[dict], total: int, a: argparse.Namespace) -> int:
    """Prints the tables; returns the number of unexplained differences."""
    for r in rows:
        r["name"] = ("completion %d" % r["i"] if r["i"] < a.prompts else
                     "chat %d" % (r["i"] - a.prompts))
    differ = [r for r in rows if "k" in r]
    per: Dict[str, int] = {"/v1/completions": 0, "/v1/chat/completions": 0}
    for r in differ:
        per[r["path"]] += 1
    print()
    print("| endpoint | equal answers |")
    print("|---|---|")
    for path, bad in per.items():
        print("| %s | %d of %d |" % (path, a.prompts - bad, a.prompts))
    unexplained = 0
    if differ:
        print()
        print("| request | endpoint | first differing token | serve | "
              "llama-server | serve's margin | llama-server's margin | "
              "llama-server, -b/-ub %d, gives | serve, one chunk, gives | "
              "near-tie |" % a.lookahead)
        print("|---|---|---|---|---|---|---|---|---|---|")
    for r in differ:
        unexplained += not r["tie"]
        fmt = lambda m: "-" if m is None else "%.4f" % m  # noqa: E731
        print("| %s | %s | %d | %s | %s | %s | %s | %s | %s | %s |" %
              (r["name"], r["path"], r["k"], r["serve"], r["server"],
               fmt(r["m_serve"]), fmt(r["m_server"]), r["chunked"],
               r["whole"], "yes" if r["tie"] else "no"))
        if r["prompts"][0] != r["prompts"][1]:
            print("    prompt tokens differ: serve %d, llama-server %d" %
                  r["prompts"])
    written = [(r["name"], w) for r in rows for w in r["written"]]
    if written:
        print()
        print("The same token written differently in the logprobs (the "
              "same log-probability and runner-up; not a difference of "
              "the answer):")
        for i, (k, x, y) in written:
            print("  %s, token %d: serve %s, llama-server %s" %
                  (i, k, x, y))
    print()
    print("near-tie: both top-two margins below %g (log-probability, equal "
          "to the logit margin); %d of %d answers differ, %d unexplained" %
          (a.threshold, len(differ), total, unexplained))
    for r in differ:
        if not r["tie"]:
            print("unexplained, %s: %s" % (r["name"],
                                            json.dumps(r["body"])))
    return unexplained


def main() -> None:
    env = os.environ.get
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--evictd", default=paths.evictd_bin())
    p.add_argument("--serve", default=paths.evictd_llama())
    p.add_argument("--llama-server", default=env("LLAMA_SERVER") or
                   os.path.join(paths.REPO, "build", "llama", "server",
                                "build", "bin", "llama-server"))
    p.add_argument("--model", action="append", help="a GGUF (repeatable; "
                   "default ../shared/models/stories260K.gguf)")
    p.add_argument("--prompts", type=int, default=50,
                   help="requests per endpoint (default 50)")
    p.add_argument("--tokens", type=int, default=32,
                   help="max_tokens of each (default 32)")
    p.add_argument("--threads", type=int, default=1,
                   help="-t of both (default 1: the machine is shared)")
    p.add_argument("--flash-attn", default="auto", help="-fa of both")
    p.add_argument("--kv", default="f16", help="-ctk and -ctv of both")
    p.add_argument("--budget", type=int, default=480,
                   help="serve's budget; llama-server's -c is it plus "
                   "the lookahead (default 480)")
    p.add_argument("--lookahead", type=int, default=32,
                   help="serve's prefill chunk (default 32)")
    p.add_argument("--threshold", type=float, default=0.05,
                   help="a near-tie's top-two margin (default 0.05)")
    a = p.parse_args()
    models = a.model or [paths.stories_gguf()]
    for path in (a.evictd, a.serve, a.llama_server):
        if not os.access(path, os.X_OK):
            raise SystemExit("%s is missing (see --help)" % path)
    unexplained = 0
    for model in models:
        rows, total = compare(a, model)
        unexplained += report(rows, total, a)
        print()
    sys.exit(1 if unexplained else 0)


if __name__ == "__main__":
    main()
