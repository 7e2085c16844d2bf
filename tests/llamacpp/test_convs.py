#!/usr/bin/python3
"""evictd-llama serve's conversations (issue 30; deploy/llama/serve/convs.c
says the rules), end to end on stories260K (--exact) with the real daemon,
each test on an evictd of its own.

1. Every logit of continued conversations is the float64 reference's
   (reference.replay of serve's --dump, which follows its open, save,
   restore and truncate events): five conversations over -np 2, turn by
   turn (so saved and restored all along), through
   /v1/chat/completions (the template renders the history again),
   /v1/completions and /completion, at budget 48 without sinks (chunks
   of 8) and at budget 32 with 4 sinks (serve's default chunks of 512);
   turns that go back (the client drops the last characters of the
   answer; a stop string of two tokens, the first computed and never
   seen), the same request again. The dump is also read as books
   (Books): what each sequence's cells hold, rebuilt from its passes,
   removals and events. For every request the prompt's tokens (a
   --no-cache-prompt serve's, of the same request) must be what the
   cells hold after it (token ids, not text), and where it started
   decoding must be what the rules give (expected_reuse: convs.c's rules
   written out again); /metrics' reused and decoded prompt tokens must
   be those counts, request by request and in total. Controls: a prompt
   said to differ in one reused token fails the books; the scenario on
   a --no-cache-prompt serve fails the reuse checks.
2. An edited early message gets the answer "cache_prompt": false gives
   on the same serve and a --no-cache-prompt serve gives; the same
   request again gets, after its window evicted, that fresh answer too,
   and where nothing was evicted its first answer from one decoded
   token; "cache_prompt": false neither reuses nor parks.
3. Sixteen clients at once over -np 4 with a --cache-ram that keeps all
   the saved conversations: every turn's text is -np 16's. With 1 MiB
   (about eight saved) some are dropped: a turn that found nothing is
   the --no-cache-prompt answer to its prompt, one that continued a
   conversation never dropped is -np 16's, every logit of the run passes
   the reference (test_some_dropped); the same when the conversation to
   restore is the one that saving the slot's parked one pushes out of
   the store (test_restore_the_least_recently_saved).
4. serve restarted on the same --cache-dir (and evictd) continues its
   conversations, decoding what an unrestarted serve decodes, with its
   texts; its /metrics says what it found.
5. evictd restarted without its state while one conversation is parked
   and one saved: serve re-homes both, with an undisturbed run's texts
   and prompt tokens decoded.
6. evictd's sessions are serve's parked and saved conversations when
   idle: none once serve stops without --cache-dir, none with
   --no-cache-prompt, one per file with --cache-dir after it stops.

Runs in about 15 s on two cores (make e2e-llamacpp's environment,
deploy/llama/llama.mk's LLAMA_TEST_ENV); the figures go to stderr.
"""

import json
import os
import re
import sys
import tempfile
import threading
import time
import unittest
from typing import Dict, List, Optional, Set, Tuple

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import torch  # noqa: E402

from support import generate as gen  # noqa: E402
from support import gguf_lm, metrics, paths  # noqa: E402
from support import reference as ref  # noqa: E402
from support.daemon import Daemon  # noqa: E402
from support.http import request  # noqa: E402
from support.serve import Serve  # noqa: E402

GGUF = paths.stories_gguf()
TOL = gen.TOL
# These are the rules of going back without checkpoints (a turn's state
# kept: test_checkpoints.py has them), so none is kept here.
EXACT = ["--exact", "--threads", "1", "--ctx-checkpoints", "0"]
# Test 1's two windows: (budget, sinks, lookahead or None for serve's
# default chunks of 512).
WINDOWS = [(48, 0, 8), (32, 4, None)]
# The other tests' window: conversations of 100 to 200 tokens evict. A
# saved one of 96 cells takes about 125 KB: 1 MiB holds 8.
BIG = ["--budget", "96", "--sinks", "4", "--lookahead", "16"] + EXACT
SMALL = ["--budget", "32", "--sinks", "4", "--lookahead", "8"] + EXACT

TMP: Optional[tempfile.TemporaryDirectory] = None
NOCACHE: Optional[Serve] = None   # BIG, --no-cache-prompt, own evictd
NOCACHE_EVD: Optional[Daemon] = None
MODEL = None
FIGURES: Dict[str, str] = {}


def setUpModule() -> None:
    global TMP, NOCACHE, NOCACHE_EVD, MODEL
    paths.checked_stories()
    torch.set_num_threads(1)
    TMP = tempfile.TemporaryDirectory(prefix="evictd-convs-")
    NOCACHE_EVD = Daemon.started(TMP.name)
    NOCACHE = serve(NOCACHE_EVD, *BIG, "--no-cache-prompt", "-np", "4")
    MODEL = gguf_lm.load(GGUF, gen.gguf_py_dir())


def tearDownModule() -> None:
    for x in (NOCACHE, NOCACHE_EVD):
        if x is not None:
            x.stop()
    if TMP is not None:
        TMP.cleanup()
    print("", file=sys.stderr)
    for name, line in sorted(FIGURES.items()):
        print("%-28s %s" % (name, line), file=sys.stderr)


def serve(d: Daemon, *args: str, env: Optional[Dict[str, str]] = None
          ) -> Serve:
    return Serve(TMP.name, d.url, *args, model=GGUF, env=env)


# ---- conversations -------------------------------------------------------

class Conv:
    """One client's conversation on one route: its next request is built
    from the answers it got. cut: the characters of each answer the
    client drops before its next line; stop: the request's stop strings
    (whose text the client never sees)."""

    def __init__(self, name: str, route: str, opener, adds: List[str],
                 n: int, cut: int = 0, stop: Optional[List[str]] = None
                 ) -> None:
        self.name, self.route, self.adds, self.n = name, route, adds, n
        self.cut, self.stop = cut, stop
        self.history = opener     # a prompt, or chat messages
        self.turn = 0

    def request(self) -> Tuple[str, dict]:
        """The next request: (path, body)."""
        if self.route == "chat":
            body = dict(messages=json.loads(json.dumps(self.history)),
                        max_tokens=self.n, temperature=0)
            path = "/v1/chat/completions"
        elif self.route == "completions":
            body = dict(prompt=self.history, max_tokens=self.n,
                        temperature=0)
            path = "/v1/completions"
        else:
            body = dict(prompt=self.history, n_predict=self.n,
                        temperature=0)
            path = "/completion"
        if self.stop:
            body["stop"] = list(self.stop)
        return path, body

    def answered(self, text: str) -> None:
        """The answer to the last request: the next line follows it."""
        kept = text[:len(text) - self.cut] if self.cut else text
        add = self.adds[self.turn] if self.turn < len(self.adds) else ""
        if self.route == "chat":
            self.history = self.history + [
                {"role": "assistant", "content": kept},
                {"role": "user", "content": add}]
        else:
            self.history = self.history + kept + add
        self.turn += 1


def post(addr: str, path: str, body: dict) -> Tuple[str, int, int]:
    """(text, prompt tokens, tokens generated) of one request."""
    status, _, raw = request(addr, "POST", path, body)
    assert status == 200, (path, body, raw)
    out = json.loads(raw)
    if path == "/completion":
        return (out["content"], out["tokens_evaluated"],
                out["tokens_predicted"])
    ch = out["choices"][0]
    text = ch["message"]["content"] if "message" in ch else ch["text"]
    return (text, out["usage"]["prompt_tokens"],
            out["usage"]["completion_tokens"])


CONV_KEYS = ("evictd_llama_conversation_hits_total",
             "evictd_llama_conversation_misses_total",
             "evictd_llama_prompt_tokens_reused_total",
             "evictd_llama_prompt_tokens_decoded_total",
             "evictd_llama_cells_packed_total",
             "evictd_llama_conversations_parked",
             "evictd_llama_conversations_saved",
             "evictd_llama_conversations_saved_bytes",
             "evictd_llama_conversations_saved_total",
             "evictd_llama_conversations_restored_total",
             "evictd_llama_conversations_dropped_total",
             "evictd_llama_prompt_tokenize_hits_total")


def short(k: str) -> str:
    return k.replace("evictd_llama_", "").replace("conversation_", "") \
        .replace("conversations_", "").replace("prompt_tokens_", "")


def counts(sv: Serve) -> Dict[str, float]:
    m = metrics.scrape(sv.addr)
    out = {short(k): m[k] for k in CONV_KEYS}
    out["active"] = m["evictd_llama_sequences_active"]
    return out


def settled(sv: Serve, before: Dict[str, float], n_prompt: int,
            secs: float = 10) -> Dict[str, float]:
    """serve's counts once a request of n_prompt tokens has ended and its
    conversation is parked (every prompt token is counted as reused or
    decoded as the request is taken; the counts are published when the
    engine goes idle)."""
    deadline = time.monotonic() + secs
    while True:
        c = counts(sv)
        if (c["reused_total"] + c["decoded_total"] == before["reused_total"]
                + before["decoded_total"] + n_prompt and c["active"] == 0):
            return c
        assert time.monotonic() < deadline, (before, c, n_prompt)
        time.sleep(0.01)


class Turn:
    """One request sent and what came back, with serve's counts' moves."""

    def __init__(self, conv: str, turn: int, path: str, body: dict,
                 text: str, n_prompt: int, pred: int,
                 delta: Dict[str, float]) -> None:
        self.conv, self.turn, self.path, self.body = conv, turn, path, body
        self.text, self.n_prompt, self.pred = text, n_prompt, pred
        self.delta = delta
        self.parks = body.get("cache_prompt", True)

    @property
    def reused(self) -> int:
        return int(self.delta["reused_total"])

    def label(self) -> str:
        return "%s%d" % (self.conv, self.turn + 1)


def send(sv: Serve, path: str, body: dict, conv: str = "",
         turn: int = 0) -> Turn:
    """One request, alone: its Turn (the counts settled after it)."""
    before = counts(sv)
    text, n_prompt, pred = post(sv.addr, path, body)
    after = settled(sv, before, n_prompt)
    return Turn(conv, turn, path, body, text, n_prompt, pred,
                {k: after[k] - before[k] for k in after})


def talk(sv: Serve, convs: List[Conv], order: List[int]) -> List[Turn]:
    """Each conversation's next turn, one request at a time, in order."""
    out = []
    for i in order:
        c = convs[i]
        path, body = c.request()
        t = send(sv, path, body, c.name, c.turn)
        c.answered(t.text)
        out.append(t)
    return out


def again(sv: Serve, t: Turn, **extra) -> Turn:
    """The same request as t (with extra fields) once more."""
    body = dict(t.body, **extra)
    return send(sv, t.path, body, t.conv, t.turn)


# ---- the books ------------------------------------------------------------

def tokenize(requests: List[Tuple[str, dict]]) -> List[List[int]]:
    """The prompt tokens of each request, as serve makes them: a
    --no-cache-prompt serve with --dump decodes each prompt afresh (one
    token asked), its passes after each open event are the prompt's."""
    prefix = tempfile.mktemp(prefix="tokens-", dir=TMP.name)
    sv = serve(NOCACHE_EVD, "--budget", "32", "--sinks", "0",
               "--no-cache-prompt", "-np", "1", "--dump", prefix, *EXACT)
    try:
        for path, body in requests:
            b = {k: v for k, v in body.items() if k not in ("stop",)}
            b["max_tokens" if "max_tokens" in b else "n_predict"] = 1
            post(sv.addr, path, b)
    finally:
        assert sv.stop() == 0
    events, _ = ref.load_dump(prefix)
    out: List[List[int]] = []
    for ev in events[1:]:
        if ev["op"] == "open":
            out.append([])
        elif ev["op"] == "pass":
            for s, p, tok in ev["tokens"]:
                assert p == len(out[-1]), ev
                out[-1].append(tok)
    assert len(out) == len(requests), (len(out), len(requests))
    return out


def common(a: List[int], b: List[int]) -> int:
    n = 0
    while n < len(a) and n < len(b) and a[n] == b[n]:
        n += 1
    return n


def expected_reuse(convs: List[Tuple[List[int], Set[int]]],
                   prompt: List[int], budget: int, sinks: int
                   ) -> Tuple[int, str, int]:
    """What the rules let a prompt keep of the conversations there are
    (each: its computed tokens, the positions its cells hold): (tokens
    kept, "exact"/"lossy"/"", how far it goes back). It keeps the tokens
    both have, short of the prompt's last (decoded again for its logits),
    and goes back to there exactly when the window then holds all it
    held once that position was computed, any distance; else, losing
    what was evicted meanwhile, only when the prompt goes on past the
    conversation and at most (budget - sinks) / 2 back. The position
    before must be held, and at least half the conversation kept."""
    best = (0, "", 0)
    for hist, cells in convs:
        n = len(hist)
        m = min(common(hist, prompt), len(prompt) - 1)
        if m < 2 or (m < n and 2 * m < n):
            continue
        held = sorted(q for q in cells if q < m)
        if not held or held[-1] != m - 1:
            continue
        if len(held) == min(m, budget):
            how = "exact"
        elif len(prompt) > n and n - m <= (budget - sinks) // 2:
            how = "lossy"
        else:
            continue
        if m > best[0]:
            best = (m, how, n - m)
    return best


class Books:
    """What serve's cells hold, sequence by sequence, rebuilt from its
    --dump: each pass's tokens, each removal, and serve's events (open: a
    fresh conversation; save: to host memory under its session; restore;
    truncate). Read request by request (the requests were sent one at a
    time): check() says what was wrong with each. Without rules (a
    --cache-ram that drops conversations, which no event shows), only
    what the cells hold and what /metrics counts are checked."""

    def __init__(self, events: List[dict], budget: int, sinks: int,
                 rules: bool = True) -> None:
        self.events, self.at = events[1:], 0
        self.budget, self.sinks, self.rules = budget, sinks, rules
        self.hist: Dict[int, List[int]] = {}
        self.cells: Dict[int, Set[int]] = {}
        self.stash: Dict[str, Tuple[List[int], Set[int]]] = {}
        self.kinds = {"exact": 0, "lossy": 0, "continued": 0, "fresh": 0,
                      "back": 0}
        self.own = 0  # the prompt tokens the rules leave to decode

    def apply(self, ev: dict, problems: List[str]) -> None:
        op, s = ev["op"], ev.get("seq")
        if op == "open":
            if self.hist.get(s) and self.rules:
                # dropped (with --cache-ram unlimited it must be saved):
                # still what the rules would have continued
                problems.append("seq %d: a fresh conversation over one "
                                "parked there and never saved" % s)
                self.stash["lost %d" % len(self.stash)] = (self.hist[s],
                                                            self.cells[s])
            self.hist[s], self.cells[s] = [], set()
        elif op == "save":
            self.stash[ev["key"]] = (self.hist.pop(s), self.cells.pop(s))
        elif op == "restore":
            self.hist[s], self.cells[s] = self.stash.pop(ev["key"])
        elif op == "truncate":
            del self.hist[s][ev["from"]:]
        elif op == "remove" and ev["model"] == "target":
            self.cells[s] -= set(ev["positions"])
        elif op == "pass":
            for s, p, tok in ev["tokens"]:
                h = self.hist.setdefault(s, [])
                if p != len(h):
                    problems.append("seq %d computed position %d holding "
                                    "%d tokens" % (s, p, len(h)))
                    del h[p:]
                h.append(tok)
                self.cells.setdefault(s, set()).add(p)

    def check(self, t: Turn, tokens: List[int]) -> List[str]:
        """One request's events: where it started, what it computed."""
        bad: List[str] = []
        name = t.label()
        # What came back late of the request before (its last step), then
        # the conversations there are when this one is taken.
        while self.at < len(self.events) and self.events[self.at]["op"] \
                not in ("open", "save", "restore", "truncate", "pass"):
            self.apply(self.events[self.at], bad)
            self.at += 1
        there = [(list(h), set(self.cells[s])) for s, h in self.hist.items()]
        there += [(list(h), set(c)) for h, c in self.stash.values()]
        want, how, back = expected_reuse(there, tokens, self.budget,
                                         self.sinks) if t.parks else \
            (0, "", 0)
        seq = start = None
        while self.at < len(self.events):
            ev = self.events[self.at]
            self.at += 1
            self.apply(ev, bad)
            if ev["op"] == "pass":
                seq, start = ev["tokens"][0][0], ev["tokens"][0][1]
                break
        if seq is None:
            return bad + ["%s: no pass" % name]
        # The prompt's passes, then one per token drawn but the last.
        h = self.hist[seq]
        gen = 0
        while len(h) < t.n_prompt or gen < t.pred - 1:
            if self.at >= len(self.events):
                bad.append("%s: the record ends" % name)
                break
            ev = self.events[self.at]
            self.at += 1
            if ev["op"] == "pass":
                if any(tk[0] != seq for tk in ev["tokens"]):
                    bad.append("%s: a pass of another sequence" % name)
                if len(h) >= t.n_prompt:
                    gen += len(ev["tokens"])
            self.apply(ev, bad)
            h = self.hist[seq]
        p = common(h, tokens)
        if p < t.n_prompt:
            bad.append("%s: the cells hold %s at position %d, the prompt "
                       "%s (%d tokens reused)" % (
                           name, h[p] if p < len(h) else None, p,
                           tokens[p] if p < len(tokens) else None, start))
        if start != want and self.rules:
            bad.append("%s: decoding started at %d, the rules say %d (%s)"
                       % (name, start, want, how or "fresh"))
        if (t.reused, t.delta["decoded_total"]) != (start, t.n_prompt -
                                                    start):
            bad.append("%s: /metrics counts %d reused, %d decoded; the "
                       "record %d, %d" % (name, t.reused,
                                          t.delta["decoded_total"], start,
                                          t.n_prompt - start))
        self.own += t.n_prompt - want
        self.kinds["continued" if want else "fresh"] += 1
        if want and how:
            self.kinds[how] += back > 0
            self.kinds["back"] += back > 0
        if not t.parks:  # given back: no event says so
            self.hist.pop(seq, None)
            self.cells.pop(seq, None)
        return bad

    def rest(self) -> List[str]:
        left = [ev for ev in self.events[self.at:] if ev["op"] == "pass"]
        return ["%d passes after the last request" % len(left)] if left \
            else []


# ---- the scenario of test 1 ----------------------------------------------

def story_convs(n: int = 20) -> List[Conv]:
    return [
        Conv("A", "chat", [
            {"role": "system", "content": "You tell short stories."},
            {"role": "user", "content": "Tell me a story about a cat."}],
            ["What did the cat do next?", "How did it end?"], n),
        # the client drops each answer's last 4 characters (the template
        # closes the answer after what is left)
        Conv("B", "chat", [
            {"role": "user", "content": "Once upon a time there was a "
             "little bird."}],
            ["Why was the bird sad?", "Who helped the bird?"], n, cut=4),
        Conv("C", "completions", "The sun was hot and the birds sang. "
             "Mia went to the", [" Then she saw a frog.",
                                 " The frog said hello."], n, cut=3),
        # a stop string of two tokens: the first computed, never seen
        Conv("D", "native", "Tom had a big red ball. He liked to",
             [" One day he lost it.", " His mom helped him."], n,
             stop=["ball. He", "very happy"]),
        # short: its window never evicts, going back is exact
        Conv("E", "native", "Lily and Ben were good friends.",
             [" They liked cake", " and tea."], 6, cut=2),
    ]


def scenario(sv: Serve) -> List[Turn]:
    """Test 1's requests: five conversations, three turns each (E two)
    taken in turn (over -np 2: saved and restored all along), then the
    last request of E (never evicted) and of C (evicted) again."""
    convs = story_convs()
    turns = talk(sv, convs, [0, 1, 2, 3, 4] * 2 + [0, 1, 2, 3])
    last = {t.conv: t for t in turns}
    turns.append(again(sv, last["E"]))
    turns.append(again(sv, last["C"]))
    return turns


def verify(turns: List[Turn], prefix: str, budget: int, sinks: int,
           tokens: Optional[List[List[int]]] = None
           ) -> Tuple[List[str], Dict[str, int], List[List[int]]]:
    """What is wrong with a run of scenario() by the books and the counts
    (nothing, on a serve that follows the rules), its figures, and the
    prompts' tokens (tokenized unless given)."""
    events, _ = ref.load_dump(prefix)
    if tokens is None:
        tokens = tokenize([(t.path, t.body) for t in turns])
    books = Books(events, budget, sinks)
    bad: List[str] = []
    for t, toks in zip(turns, tokens):
        if len(toks) != t.n_prompt:
            bad.append("%s: %d prompt tokens, usage says %d"
                       % (t.label(), len(toks), t.n_prompt))
        bad += books.check(t, toks)
    bad += books.rest()
    hits = int(sum(t.delta["hits_total"] for t in turns))
    decoded = int(sum(t.delta["decoded_total"] for t in turns))
    if hits == 0 or hits != books.kinds["continued"]:
        bad.append("%d hits, the rules say %d" % (hits,
                                                  books.kinds["continued"]))
    if decoded != books.own:
        bad.append("%d prompt tokens decoded, the rules say %d"
                   % (decoded, books.own))
    return bad, dict(books.kinds, hits=hits, decoded=decoded,
                     prompt=sum(t.n_prompt for t in turns)), tokens


# ---- the tests ----------------------------------------------------------

def tail(sv: Serve, n: int = 12) -> str:
    """serve's own last lines (llama.cpp's loading left out)."""
    lines = [x for x in sv.log().splitlines() if x.startswith((
        "evictd-llama", "init:", "decode:", "state_", " -", " it is",
        "free():", "double", "corrupted", "malloc"))]
    return "\n".join(lines[-n:])


def sessions_are(test: unittest.TestCase, d: Daemon,
                 servers: List[Serve]) -> int:
    """evictd's sessions are the servers' parked and saved conversations
    (all of them idle): the number."""
    want = 0
    for sv in servers:
        c = counts(sv)
        want += int(c["parked"] + c["saved"])
    got = metrics.wait_sessions(d, want)
    test.assertEqual(got, want, "evictd's sessions, serve's conversations")
    return want


def replayed(test: unittest.TestCase, prefix: str) -> ref.Result:
    """The float64 reference's verdict on a --dump: nothing wrong."""
    return ref.replayed(test, prefix, MODEL, TOL)


class Case(unittest.TestCase):
    """Each test on an evictd of its own (its sessions are counted)."""

    def setUp(self) -> None:
        self.evd = Daemon.started(TMP.name)

    def tearDown(self) -> None:
        self.evd.stop()

    def talk(self, sv: Serve, convs: List[Conv], order: List[int]
             ) -> List[Turn]:
        """talk(), failing with serve's last words if a request fails."""
        return self.guard(sv, talk, sv, convs, order)

    def guard(self, sv: Serve, fn, *args):
        """fn(*args) of requests to sv, failing with serve's last words if
        one fails."""
        try:
            return fn(*args)
        except (AssertionError, OSError) as e:
            self.fail("%r; serve (exit %s) says:\n%s" % (
                e, sv.proc.poll(), tail(sv)))


class Reference(Case):
    """Test 1: every logit of continued conversations, and the books."""

    def window(self, budget: int, sinks: int, lookahead: Optional[int],
               pack: Optional[int] = None) -> None:
        """pack: EVICTD_LLAMA_PACK, the round figure of cells serve packs
        a sequence's cells to (1: after every pass that held more than the
        next needs); None: llama.cpp's 256, which these windows never
        reach."""
        prefix = os.path.join(TMP.name, "ref-%d-%d" % (budget, sinks))
        args = ["--budget", str(budget), "--sinks", str(sinks)]
        args += ["--lookahead", str(lookahead)] if lookahead else []
        sv = serve(self.evd, *args, *EXACT, "-np", "2", "--dump", prefix,
                   env={"EVICTD_LLAMA_PACK": str(pack)} if pack else None)
        try:
            turns = self.guard(sv, scenario, sv)
            c = counts(sv)
            sessions_are(self, self.evd, [sv])
        finally:
            self.assertEqual(sv.stop(), 0)
        # Without --cache-dir nothing outlives serve.
        self.assertEqual(metrics.wait_sessions(self.evd, 0), 0)
        self.assertGreater(c["saved_total"], 0)
        self.assertGreater(c["restored_total"], 0)
        self.assertEqual(c["dropped_total"], 0)
        # Packed cells (saved, removed, put back from cell 0) hold what
        # they held: verify() checks every logit after them.
        if pack:
            self.assertGreater(c["cells_packed_total"], 0)
        else:
            self.assertEqual(c["cells_packed_total"], 0)
        # Prompts that began like one before were tokenized from where
        # they part (tokcache.h); verify() checks them against prompts
        # tokenized whole (a --no-cache-prompt serve's).
        self.assertGreater(c["prompt_tokenize_hits_total"], 0)
        bad, k, tokens = verify(turns, prefix, budget, sinks)
        self.assertEqual(bad, [])
        # The books' own control: a prompt said to differ in one token
        # that a continued turn reused is not what the cells hold.
        i = next(i for i, t in enumerate(turns) if t.reused > 8)
        tokens[i][5] = (tokens[i][5] + 1) % 512
        wrong = verify(turns, prefix, budget, sinks, tokens)[0]
        self.assertTrue(any("%s: the cells hold" % turns[i].label() in b
                            for b in wrong), wrong)
        # The scenario did what it is for: continued turns, turns that
        # went back, both exactly and losing what the window evicted.
        self.assertGreaterEqual(k["continued"], 10)
        self.assertGreater(k["exact"], 0)
        self.assertGreater(k["lossy"], 0)
        byconv = {t.label(): t for t in turns}
        # the same request again: E (never evicted) from one token, its
        # first answer; C (evicted) decoded afresh
        self.assertEqual(turns[-2].delta["decoded_total"], 1)
        self.assertEqual(turns[-2].text, byconv["E2"].text)
        self.assertEqual(turns[-1].delta["decoded_total"], turns[-1].n_prompt)
        res = replayed(self, prefix)
        FIGURES["1 reference %d/%d" % (budget, sinks)] = (
            "%d requests, %d continued (%d went back: %d exact, %d lossy), "
            "%d hits; %d of %d prompt tokens decoded; %d saved, %d "
            "restored; %s" % (len(turns), k["continued"], k["back"],
                              k["exact"], k["lossy"], k["hits"],
                              k["decoded"], k["prompt"], c["saved_total"],
                              c["restored_total"], res.summary()))

    def test_reference_window(self) -> None:
        self.window(*WINDOWS[0], pack=1)

    def test_reference_sinks(self) -> None:
        self.window(*WINDOWS[1])

    def test_negative_control(self) -> None:
        # The same on a --no-cache-prompt serve: the checks that say the
        # turns continued must fail (and evictd holds none of its
        # sessions once it is idle).
        prefix = os.path.join(TMP.name, "control")
        budget, sinks, lookahead = WINDOWS[0]
        sv = serve(self.evd, "--budget", str(budget), "--sinks", str(sinks),
                   "--lookahead", str(lookahead), *EXACT, "-np", "2",
                   "--no-cache-prompt", "--dump", prefix)
        try:
            turns = scenario(sv)
            self.assertEqual(sessions_are(self, self.evd, [sv]), 0)
            self.assertEqual(counts(sv)["prompt_tokenize_hits_total"], 0)
        finally:
            self.assertEqual(sv.stop(), 0)
        bad, k, _ = verify(turns, prefix, budget, sinks)
        self.assertEqual(k["hits"], 0)
        for says in ("hits, the rules say", "prompt tokens decoded, the "
                     "rules say", "decoding started at 0, the rules say",
                     "parked there and never saved"):
            self.assertTrue(any(says in b for b in bad), (says, bad))
        FIGURES["1 negative control"] = (
            "--no-cache-prompt: %d problems found, e.g. %s" % (
                len(bad), "; ".join(b for b in bad if "rules say" in b and
                                    "started" not in b)))


class Rules(Case):
    """Test 2: what a request gets that cannot continue a conversation."""

    def test_edited_and_again(self) -> None:
        sv = serve(self.evd, *BIG, "-np", "2")
        try:
            self.edited_and_again(sv)
        finally:
            self.assertEqual(sv.stop(), 0)
        self.assertEqual(metrics.wait_sessions(NOCACHE_EVD, 0), 0)

    def edited_and_again(self, sv: Serve) -> None:
        chat = Conv("A", "chat", [
            {"role": "system", "content": "You tell short stories."},
            {"role": "user", "content": "Tell me a story about a dog."}],
            ["What did the dog find?", "Who came to play?"], 40)
        turns = self.talk(sv, [chat], [0, 0, 0])
        self.assertEqual([t.delta["hits_total"] for t in turns], [0, 1, 1])
        # An early message edited: decoded afresh, the answer cache_prompt
        # false gives (on this serve, which then neither reuses nor
        # parks) and a --no-cache-prompt serve gives.
        path, body = chat.request()
        body["messages"][1]["content"] = "Tell me a story about a frog."
        edited = send(sv, path, body)
        before = metrics.total(self.evd.addr, "evictd_sessions")
        off = send(sv, path, dict(body, cache_prompt=False))
        self.assertEqual(metrics.total(self.evd.addr, "evictd_sessions"),
                         before)
        plain = post(NOCACHE.addr, path, body)[0]
        self.assertEqual((edited.delta["misses_total"],
                          edited.delta["decoded_total"]),
                         (1, edited.n_prompt))
        self.assertEqual(edited.text, plain)
        self.assertEqual(off.text, plain)
        # (it takes a slot: the parked conversation there is saved)
        self.assertEqual((off.delta["hits_total"], off.delta["misses_total"],
                          off.reused, off.delta["parked"] +
                          off.delta["saved"]), (0, 0, 0, 0))
        # The last request again: it ends within its conversation, whose
        # window evicted since: decoded afresh, as cache_prompt false.
        last = turns[-1]
        same = again(sv, last)
        self.assertEqual(same.delta["decoded_total"], same.n_prompt)
        self.assertEqual(same.text, again(sv, last, cache_prompt=False).text)
        self.assertEqual(same.text, post(NOCACHE.addr, last.path,
                                         last.body)[0])
        # Where the window never evicted: continued from its last token,
        # its first answer; a longer prompt with cache_prompt false is
        # decoded whole and leaves the conversation there to continue.
        short_conv = Conv("E", "native", "Lily and Ben were good friends.",
                          [" They liked cake."], 10)
        first = self.talk(sv, [short_conv], [0])[0]
        rep = again(sv, first)
        self.assertEqual((rep.delta["hits_total"], rep.reused,
                          rep.delta["decoded_total"]),
                         (1, first.n_prompt - 1, 1))
        self.assertEqual(rep.text, first.text)
        path, body = short_conv.request()
        off = send(sv, path, dict(body, cache_prompt=False))
        self.assertEqual((off.reused, off.delta["decoded_total"]),
                         (0, off.n_prompt))
        on = send(sv, path, body)
        self.assertEqual(on.delta["hits_total"], 1)
        self.assertGreaterEqual(on.reused, first.n_prompt)
        self.assertEqual(on.text, off.text)  # nothing evicted: the same
        sessions_are(self, self.evd, [sv])
        FIGURES["2 rules"] = (
            "edited early: %d of %d tokens decoded afresh, the "
            "--no-cache-prompt answer; again after eviction: %d of %d "
            "decoded; again, never evicted: 1 of %d" % (
                edited.delta["decoded_total"], edited.n_prompt,
                same.delta["decoded_total"], same.n_prompt, rep.n_prompt))


OPENERS = [
    "Tom had a big red ball. He liked to play with it in the park every",
    "The sun was hot and the birds sang. Mia went to the garden to look",
    "Ben and his mom went to the shop. They wanted to buy some apples",
    "Once upon a time there was a little fish who lived in a blue",
    "Sara found a shiny key under her bed. She did not know what it",
    "The old dog was tired. He lay down near the fire and closed his",
    "One day a small bird fell out of its nest. A kind girl named",
    "Max wanted to build a tall tower with his blocks. He put one block",
    "It was raining and Lucy could not go outside. She sat by the window",
    "The king had a golden crown. One morning the crown was gone and",
    "Jack saw a big truck on the road. It was full of toys and",
    "Anna liked to paint. She painted the sky, the trees and a little",
    "A little mouse lived in a hole in the wall. Every night it came out",
    "The children ran to the beach. The water was cold but they jumped",
    "Grandma made a cake for Tim. It was a big chocolate cake with",
    "The moon was bright and the stars were out. Sam looked up and",
]
ADDS = [" Then they went home.", " The next day was sunny."]
ROOMY: Dict[str, List[str]] = {}  # each conversation's texts on -np 16


def many_convs() -> List[Conv]:
    return [Conv("c%d" % i, "completions", text, list(ADDS), 30)
            for i, text in enumerate(OPENERS)]


def talk_at_once(sv: Serve, convs: List[Conv]) -> Dict[str, List[str]]:
    """Every conversation's turns, each client in a thread of its own:
    the texts."""
    out: Dict[str, List[str]] = {c.name: [] for c in convs}
    errors: List[str] = []

    def run(c: Conv) -> None:
        try:
            for _ in range(len(c.adds) + 1):
                path, body = c.request()
                text = post(sv.addr, path, body)[0]
                c.answered(text)
                out[c.name].append(text)
        except Exception as e:  # reported below
            errors.append("%s: %r" % (c.name, e))

    threads = [threading.Thread(target=run, args=(c,)) for c in convs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    return out


class Many(Case):
    """Test 3: more conversations than slots: saved, restored, dropped."""

    def roomy(self) -> Dict[str, List[str]]:
        """The sixteen conversations on -np 16 (nothing saved)."""
        if not ROOMY:
            sv = serve(self.evd, *BIG, "-np", "16")
            try:
                ROOMY.update(talk_at_once(sv, many_convs()))
                c = counts(sv)
                self.assertEqual((c["hits_total"], c["saved_total"]),
                                 (32, 0))
                self.assertEqual(sessions_are(self, self.evd, [sv]), 16)
            finally:
                self.assertEqual(sv.stop(), 0)
            self.assertEqual(metrics.wait_sessions(self.evd, 0), 0)
        return ROOMY

    def test_sixteen_over_four(self) -> None:
        # 2 MiB: the twelve saved at a time fit. All sixteen clients at
        # once (so in the queue, taken as slots free up).
        want = self.roomy()
        sv = serve(self.evd, *BIG, "-np", "4", "--cache-ram", "2")
        try:
            got = talk_at_once(sv, many_convs())
            c = counts(sv)
            self.assertEqual(sessions_are(self, self.evd, [sv]), 16)
        finally:
            self.assertEqual(sv.stop(), 0)
        self.assertEqual(got, want)
        self.assertEqual((c["hits_total"], c["misses_total"],
                          c["dropped_total"], c["parked"], c["saved"]),
                         (32, 16, 0, 4, 12))
        self.assertGreaterEqual(c["restored_total"], 20)
        self.assertGreaterEqual(c["saved_total"], c["restored_total"])
        FIGURES["3 16 over -np 4, 2 MiB"] = (
            "48 turns, the texts of -np 16; %d hits, %d saved, %d "
            "restored, 0 dropped, %.0f KB saved at the end" % (
                c["hits_total"], c["saved_total"], c["restored_total"],
                c["saved_bytes"] / 1e3))

    def dropped(self, name: str, order: List[int]) -> Dict[str, int]:
        """The sixteen over -np 4 with 1 MiB (about eight saved), one
        request at a time in order. A turn that found nothing (a miss:
        its conversation dropped, or a first turn) is decoded afresh: the
        --no-cache-prompt answer to its prompt. One that continued a
        conversation never dropped has -np 16's text; one that continued
        a conversation begun afresh after a drop has no other serve to
        match: every logit of the run is checked against the reference."""
        want = self.roomy()
        prefix = os.path.join(TMP.name, name)
        sv = serve(self.evd, *BIG, "-np", "4", "--cache-ram", "1", "--dump",
                   prefix)
        try:
            turns = self.talk(sv, many_convs(), order)
            c = counts(sv)
            sessions_are(self, self.evd, [sv])
        finally:
            self.assertEqual(sv.stop(), 0, tail(sv))
        self.assertEqual(metrics.wait_sessions(self.evd, 0), 0)
        clean = {"c%d" % i: True for i in range(16)}
        kinds = {"fresh": 0, "continued": 0, "after a drop": 0}
        for t in turns:
            if t.reused == 0:
                self.assertEqual(t.delta["misses_total"], 1, t.label())
                self.assertEqual(t.text, post(NOCACHE.addr, t.path,
                                              t.body)[0], t.label())
                clean[t.conv] = t.turn == 0
                kinds["fresh"] += 1
            elif clean[t.conv]:
                self.assertEqual(t.text, want[t.conv][t.turn], t.label())
                kinds["continued"] += 1
            else:
                kinds["after a drop"] += 1
        self.assertGreater(c["dropped_total"], 0)
        self.assertGreater(c["restored_total"], 0)
        self.assertGreater(kinds["fresh"], 16)  # some beyond first turns
        # Each request's cells hold its prompt's tokens (no other
        # conversation's), and /metrics counts what the record shows.
        events, _ = ref.load_dump(prefix)
        books = Books(events, 96, 4, rules=False)
        bad = []
        for t, toks in zip(turns, tokenize([(t.path, t.body)
                                            for t in turns])):
            bad += books.check(t, toks)
        self.assertEqual(bad + books.rest(), [])
        res = replayed(self, prefix)
        FIGURES["3 " + name] = (
            "%d fresh (each the --no-cache-prompt answer), %d continued "
            "(-np 16's texts), %d continued after a drop; %d dropped, %d "
            "restored; %s" % (
                kinds["fresh"], kinds["continued"], kinds["after a drop"],
                c["dropped_total"], c["restored_total"], res.summary()))
        return kinds

    def test_some_dropped(self) -> None:
        # First turns 0..15, second turns 15..8 (the latest first: found),
        # 0..3 (dropped meanwhile: fresh), third turns 3..0 (continued
        # after a drop) and 8..15 (the most recently saved first).
        kinds = self.dropped("dropped", list(range(16)) +
                             list(range(15, 7, -1)) + [0, 1, 2, 3] +
                             [3, 2, 1, 0] + list(range(8, 16)))
        self.assertGreaterEqual(kinds["continued"], 8)
        self.assertGreaterEqual(kinds["after a drop"], 4)

    def test_restore_the_least_recently_saved(self) -> None:
        # Second turns in the reverse order: the conversation to restore
        # is, sooner or later, the store's least recently used, the one
        # that saving the slot's parked conversation pushes out.
        kinds = self.dropped("dropped-lru", list(range(16)) +
                             list(range(15, -1, -1)))
        self.assertGreater(kinds["continued"], 0)


def three_convs() -> List[Conv]:
    return [Conv("X", "native", OPENERS[0], [" Then he ran home."], 40),
            Conv("Y", "completions", OPENERS[1], [" She saw a cat."], 40),
            Conv("Z", "chat", [{"role": "user", "content": OPENERS[2]}],
                 ["What did they buy?"], 40)]


def files(folder: str) -> List[str]:
    """The conversations --cache-dir holds."""
    return [f for f in os.listdir(folder) if re.match(r"conv-\d+\.bin$", f)]


def session_prefix(sv: Serve) -> str:
    p = sv.line.prefix()
    assert p, sv.log()
    return p


class Restarts(Case):
    """Tests 4 and 5: serve restarted on its --cache-dir; evictd restarted
    without its state."""

    def test_cache_dir(self) -> None:
        d = self.evd
        folder = os.path.join(TMP.name, "convs")
        args = list(SMALL) + ["-np", "2"]
        # Undisturbed: three conversations over two slots, two turns.
        u = serve(d, *args)
        try:
            base = self.talk(u, three_convs(), [0, 1, 2, 0, 1, 2])
        finally:
            self.assertEqual(u.stop(), 0)
        self.assertEqual(metrics.wait_sessions(d, 0), 0)
        convs = three_convs()
        a = serve(d, *args, "--cache-dir", folder)
        try:
            first = self.talk(a, convs, [0, 1, 2])
            self.assertEqual(counts(a)["saved_total"], 1)
        finally:
            self.assertEqual(a.stop(), 0)   # SIGTERM
        # One saved when its slot was needed, two at shutdown: three
        # files, three sessions kept in evictd.
        self.assertEqual(len(files(folder)), 3, os.listdir(folder))
        self.assertEqual(metrics.wait_sessions(d, 3), 3)
        b = serve(d, *args, "--cache-dir", folder)
        try:
            self.assertIn("3 conversations found in %s" % folder, b.log())
            self.assertNotEqual(session_prefix(b), session_prefix(a))
            at_start = counts(b)
            second = self.talk(b, convs, [0, 1, 2])
            c = counts(b)
            self.assertEqual(sessions_are(self, d, [b]), 3)
        finally:
            self.assertEqual(b.stop(), 0)
        self.assertEqual(metrics.wait_sessions(d, 3), 3)
        self.assertEqual(len(files(folder)), 3, os.listdir(folder))
        self.assertEqual([t.text for t in first + second],
                         [t.text for t in base])
        self.assertEqual((c["hits_total"], c["misses_total"],
                          c["restored_total"]), (3, 0, 3))
        # each continued turn decodes what the undisturbed serve decoded:
        # its new tokens
        self.assertEqual([t.delta["decoded_total"] for t in second],
                         [t.delta["decoded_total"] for t in base[3:]])
        for t in second:
            self.assertGreater(t.reused, t.n_prompt // 2, t.label())
        FIGURES["4 --cache-dir restart"] = (
            "3 conversations found again; their next turns decoded %s of "
            "%s prompt tokens (unrestarted: %s), the unrestarted texts" % (
                [int(t.delta["decoded_total"]) for t in second],
                [t.n_prompt for t in second],
                [int(t.delta["decoded_total"]) for t in base[3:]]))
        # /metrics says what the start found, before any request
        self.assertEqual((at_start["saved"], at_start["parked"]), (3, 0),
                         "conversations_saved and _parked after a start "
                         "that found 3")

    def test_evictd_restart_without_state(self) -> None:
        args = list(SMALL) + ["-np", "1"]
        u = serve(self.evd, *args)  # undisturbed
        try:
            base = self.talk(u, three_convs()[:2], [0, 1, 1, 0])
        finally:
            self.assertEqual(u.stop(), 0)
        d = self.evd
        sv = serve(d, *args)
        try:
            convs = three_convs()[:2]
            first = self.talk(sv, convs, [0, 1])  # X saved, Y parked
            self.assertEqual(sessions_are(self, d, [sv]), 2)
            d.kill()
            d.restart()
            self.assertEqual(metrics.total(d.addr, "evictd_sessions"), 0)
            m0 = metrics.scrape(sv.addr)
            second = self.talk(sv, convs, [1, 0])  # Y parked, X restored
            m1 = metrics.scrape(sv.addr)
            self.assertEqual(sessions_are(self, d, [sv]), 2)
        finally:
            self.assertEqual(sv.stop(), 0)
        key = 'evictd_llama_rehomes_total{cause="unknown_session"}'
        rehomed = m1[key] - m0[key]
        self.assertEqual(rehomed, 2)
        self.assertEqual([t.text for t in first + second],
                         [t.text for t in base])
        self.assertEqual([t.delta["decoded_total"] for t in second],
                         [t.delta["decoded_total"] for t in base[2:]])
        self.assertEqual([t.delta["hits_total"] for t in second], [1, 1])
        self.assertEqual(m1["evictd_llama_requests_failed_total"],
                         m0["evictd_llama_requests_failed_total"])
        FIGURES["5 evictd restarted"] = (
            "a parked and a saved conversation re-homed (%d), their next "
            "turns decoded %s prompt tokens (undisturbed: %s), the "
            "undisturbed texts" % (
                rehomed, [int(t.delta["decoded_total"]) for t in second],
                [int(t.delta["decoded_total"]) for t in base[2:]]))


if __name__ == "__main__":
    unittest.main()
