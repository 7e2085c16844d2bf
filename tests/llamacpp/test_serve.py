"""evictd-llama serve end to end: the real daemon (build/evictd) and the
real server on ephemeral loopback ports and unix sockets, spoken to over
HTTP. A completion must be the very text `evictd-llama generate` writes for
the same prompt and settings (greedy), streamed or not, alone or beside
three others decoded in the same batches; sessions go away with their
requests (also when the client does), bad requests are 4xx JSON, and a
stream survives evictd killed with SIGKILL and restarted with its state,
or without it (its session re-homed; with re-homing off, session_lost)."""

import json
import os
import socket
import subprocess
import threading
import time
import unittest
from typing import Dict, List, Optional, Tuple

from support import metrics, paths
from support.daemon import Daemon, Scratch
from support.http import connect, events, request
from support.metrics import promtool_findings, wait_sessions
from support.metrics import scrape as serve_metrics
from support.serve import Serve, complete

BIN = paths.evictd_llama()
GGUF = paths.llama_model("evictd-lm.gguf")
# --exact: the settings generate has by default, so that both decode the
# same text (serve's defaults are llama.cpp's fast ones).
SETTINGS = ["--budget", "32", "--sinks", "4", "--lookahead", "8", "--exact"]
# serve's own: each request its own session, deleted as it ends (whose
# lifetime these tests check); conversations kept between requests, the
# default, are test_convs.py's.
SERVE = SETTINGS + ["--no-cache-prompt"]
BUDGET = 32
PROMPTS = ["The quick brown fox jumps", "Once upon a time there",
           "In the beginning was", "A long way from home, the"]

TMP: Optional[Scratch] = None
EVD: Optional[Daemon] = None
SERVER: Optional[Serve] = None


def serve_on(evictd: str, *args: str, **kw) -> Serve:
    """serve on this suite's model, its log in the suite's directory."""
    return Serve(TMP.name, evictd, *args, model=kw.pop("model", GGUF), **kw)


def setUpModule() -> None:
    global TMP, EVD, SERVER
    paths.require(BIN, GGUF)
    TMP = Scratch("evictd-serve-")
    EVD = TMP.daemon
    SERVER = serve_on(EVD.url, *SERVE, "--parallel", "4")


def tearDownModule() -> None:
    if SERVER is not None:
        SERVER.stop()
    if TMP is not None:
        TMP.close()


GENERATED: Dict[Tuple[str, int], str] = {}


def generate(text: str, n: int, *args: str) -> str:
    """What `evictd-llama generate` writes (without its final newline)."""
    key = (text, n) + args
    if key not in GENERATED:
        p = subprocess.run([BIN, "generate", "-m", GGUF, "--evictd",
                            EVD.url, "-p", text, "-n", str(n)] + SETTINGS +
                           list(args),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           check=True)
        GENERATED[key] = p.stdout.decode()[:-1]
    return GENERATED[key]


def stream(addr: str, text: str, n: int) -> Tuple[str, List[dict]]:
    c = connect(addr)
    c.request("POST", "/completion",
              body=json.dumps(dict(prompt=text, n_predict=n, stream=True,
                                   temperature=0)))
    r = c.getresponse()
    assert r.status == 200
    assert r.getheader("Content-Type") == "text/event-stream"
    ev = events(r)
    c.close()
    return "".join(e.get("content", "") for e in ev[:-1]), ev


class Completions(unittest.TestCase):

    def test_plain_equals_generate(self) -> None:
        out = complete(SERVER.addr, PROMPTS[0], 80)
        self.assertEqual(out["content"], generate(PROMPTS[0], 80))
        self.assertEqual(out["tokens_predicted"], 80)
        self.assertEqual(out["stop_type"], "limit")
        self.assertGreater(out["tokens_evaluated"], len(PROMPTS[0]) // 2)
        self.assertTrue(out["session"].startswith("serve-"))
        self.assertEqual(wait_sessions(EVD, 0), 0)

    def test_sampling_is_seeded(self) -> None:
        # serve draws with llama-server's sampler chain (llama.cpp's common
        # sampler): a seed gives the same text every time, another seed
        # another text, and temperature 0 is greedy (generate's text)
        out = complete(SERVER.addr, PROMPTS[2], 60, temperature=0.8,
                       seed=7)["content"]
        self.assertEqual(out, complete(SERVER.addr, PROMPTS[2], 60,
                                       temperature=0.8, seed=7)["content"])
        self.assertNotEqual(out, generate(PROMPTS[2], 60))
        other = complete(SERVER.addr, PROMPTS[2], 60, temperature=0.8,
                         seed=8)["content"]
        self.assertNotEqual(out, other)
        self.assertEqual(complete(SERVER.addr, PROMPTS[2], 60,
                                  top_k=1, temperature=0.8)["content"],
                         generate(PROMPTS[2], 60))

    def test_stream_equals_plain(self) -> None:
        plain = complete(SERVER.addr, PROMPTS[1], 60)
        text, ev = stream(SERVER.addr, PROMPTS[1], 60)
        self.assertEqual(text, plain["content"])
        self.assertGreater(len(ev), 10)  # token by token, not one blob
        self.assertTrue(all(e["stop"] is False for e in ev[:-1]))
        last = ev[-1]
        self.assertEqual((last["stop"], last["stop_type"],
                          last["tokens_predicted"],
                          last["tokens_evaluated"]),
                         (True, "limit", 60, plain["tokens_evaluated"]))

    def test_stream_counts_and_stop_word(self) -> None:
        # As llama-server's: each piece says the tokens drawn so far (never
        # fewer than the last), the end what stopped the text: the stop
        # string itself (stopping_word), and whether a newline came
        text, ev = stream(SERVER.addr, PROMPTS[1], 60)
        counts = [e["tokens_predicted"] for e in ev[:-1]]
        self.assertEqual(counts, sorted(counts))
        self.assertTrue(1 <= counts[0] and counts[-1] <= 60, counts)
        self.assertGreater(counts[-1], counts[0])
        self.assertEqual((ev[-1]["stopping_word"], ev[-1]["has_new_line"]),
                         ("", "\n" in text))
        # The stop: a word of the greedy text, found again after a
        # piece of it
        word = text.split()[5]
        out = complete(SERVER.addr, PROMPTS[1], 60,
                       stop=["\u00e9t\u00e9", word])
        self.assertEqual((out["stop_type"], out["stopping_word"]),
                         ("word", word))
        self.assertEqual(out["content"], text[:text.index(word)])
        self.assertEqual(out["has_new_line"], "\n" in out["content"])
        none = complete(SERVER.addr, PROMPTS[1], 8)
        self.assertEqual((none["stop_type"], none["stopping_word"]),
                         ("limit", ""))

    def test_concurrent_batched(self) -> None:
        n = 100
        solo = [complete(SERVER.addr, p, n)["content"] for p in PROMPTS]
        batches0 = metrics.total(EVD.addr, "evictd_requests_total",
                                 'route="batch"')
        got: List[Optional[str]] = [None] * 4
        go = threading.Barrier(4)

        def run(i: int) -> None:
            go.wait()
            got[i] = complete(SERVER.addr, PROMPTS[i], n)["content"]

        ts = [threading.Thread(target=run, args=(i,)) for i in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        self.assertEqual(got, solo)
        batches = metrics.total(EVD.addr, "evictd_requests_total",
                                'route="batch"') - batches0
        # One request decodes in about n iterations (plus its prompt's
        # chunks); four in separate requests would need 4n. Till a window
        # fills, its generated positions go in runs (up to 16 a step).
        self.assertGreaterEqual(batches, n - BUDGET)
        self.assertLess(batches, 2 * n)
        self.assertEqual(wait_sessions(EVD, 0), 0)

    def test_steps_go_ahead(self) -> None:
        # The next iteration's steps go to evictd before this iteration's
        # pass: nearly every step of a long generation goes ahead, the
        # text is the one decoded without (EVICTD_LLAMA_PIPELINE=off, the
        # benchmarks' before), alone and beside others, with n choices
        # (whose first choice must not step ahead of its fork).
        n = 120
        before = serve_metrics(SERVER.addr)
        got = [None] * 3

        def run(i: int) -> None:
            got[i] = complete(SERVER.addr, PROMPTS[i], n)["content"]

        ts = [threading.Thread(target=run, args=(i,)) for i in range(3)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        after = serve_metrics(SERVER.addr)
        ahead = (after["evictd_llama_steps_ahead_total"] -
                 before["evictd_llama_steps_ahead_total"])
        steps = (after["evictd_llama_steps_total"] -
                 before["evictd_llama_steps_total"])
        # Each choice's first step (its session's creation) and those
        # after its last token do not go ahead; the rest do (one a run of
        # positions while the window fills, then one a token).
        self.assertGreaterEqual(ahead, 3 * (n - 4 - BUDGET))
        self.assertLessEqual(ahead, steps)
        off = serve_on(EVD.url, *SERVE, "--parallel", "4",
                       env={"EVICTD_LLAMA_PIPELINE": "off"})
        try:
            m0 = serve_metrics(off.addr)["evictd_llama_steps_ahead_total"]
            for i in range(3):
                self.assertEqual(complete(off.addr, PROMPTS[i], n)["content"],
                                 got[i])
            self.assertEqual(
                serve_metrics(off.addr)["evictd_llama_steps_ahead_total"],
                m0)
            body = dict(prompt=PROMPTS[3], max_tokens=40, n=3,
                        temperature=0.9, seed=5)
            outs = []
            for addr in (SERVER.addr, off.addr):
                st, _, raw = request(addr, "POST", "/v1/completions", body)
                self.assertEqual(st, 200, raw)
                outs.append([c["text"] for c in
                             json.loads(raw)["choices"]])
            self.assertEqual(outs[0], outs[1])
            self.assertEqual(len(set(outs[0])), 3)
        finally:
            off.stop()
        self.assertEqual(wait_sessions(EVD, 0), 0)

    def test_runs(self) -> None:
        # While a window has room, a step takes up to 16 generated
        # positions at once (no victim can fall, so the answer is each
        # position's own): the texts are those of a step per token
        # (EVICTD_LLAMA_RUN=1), past the window's fill too, and with n
        # choices; steps are fewer by what the runs saved. A kept
        # conversation whose turn ends inside a run (a stop string) holds
        # positions its cells never computed: its next turn truncates
        # them and answers as the step-per-token serve does.
        wide = ["--budget", "200", "--sinks", "4", "--lookahead", "8",
                "--exact"]
        one = serve_on(EVD.url, *wide, "--parallel", "4",
                       env={"EVICTD_LLAMA_RUN": "1"})
        many = serve_on(EVD.url, *wide, "--parallel", "4")
        try:
            def steps(addr: str) -> float:
                return serve_metrics(addr)["evictd_llama_steps_total"]

            counts = []
            texts = []
            for srv in (one, many):
                s0 = steps(srv.addr)
                texts.append([complete(srv.addr, p, 240)["content"]
                              for p in PROMPTS[:2]])
                counts.append(steps(srv.addr) - s0)
            self.assertEqual(texts[0], texts[1])
            self.assertNotEqual(texts[0][0], texts[0][1])
            # The step-per-token serve: a step per prompt chunk and one a
            # token but the last. The runs save at least 10 of each 16
            # while the window (200) fills.
            self.assertGreaterEqual(counts[0], 2 * 239)
            self.assertLess(counts[1], counts[0] - 2 * 150)
            body = dict(prompt=PROMPTS[3], max_tokens=60, n=3,
                        temperature=0.9, seed=11)
            outs = []
            for srv in (one, many):
                st, _, raw = request(srv.addr, "POST", "/v1/completions",
                                     body)
                self.assertEqual(st, 200, raw)
                outs.append([c["text"] for c in json.loads(raw)["choices"]])
            self.assertEqual(outs[0], outs[1])
            self.assertEqual(len(set(outs[0])), 3)
            # A turn cut by a stop string inside a run, then continued.
            full = texts[0][0]
            words = full.split()
            stop = " " + words[12] + " " + words[13]
            self.assertIn(stop, full)
            conv = []
            for srv in (one, many):
                a = complete(srv.addr, PROMPTS[0], 100, stop=[stop],
                             cache_prompt=True)
                self.assertEqual(a["stop_type"], "word")
                nxt = PROMPTS[0] + a["content"] + " and then"
                b = complete(srv.addr, nxt, 30, cache_prompt=True)
                conv.append((a["content"], b["content"],
                             b["tokens_cached"]))
            self.assertEqual(conv[0][:2], conv[1][:2])
            self.assertGreater(conv[1][2], 0)
            self.assertEqual(conv[0][2], conv[1][2])
            m = serve_metrics(many.addr)
            self.assertGreaterEqual(m["evictd_llama_steps_total"],
                                    m["evictd_llama_steps_ahead_total"])
        finally:
            one.stop()
            many.stop()
        self.assertEqual(wait_sessions(EVD, 0), 0)

    def test_pack(self) -> None:
        # llama.cpp attends over a sequence's cells up to the highest in
        # use, rounded up to 256. A conversation's turn over a full window
        # of 255 holds 255 + its new tokens in the pass (past 256), then
        # its victims go: serve moves the cells down to cell 0 (packs
        # them), so that the next passes attend over 256 again. The
        # texts are those of a serve that never packs (the cells' bits
        # and positions are the same), and nothing else changes.
        args = ["--budget", "255", "--sinks", "4", "--lookahead", "16",
                "--exact", "--parallel", "2"]
        packs = serve_on(EVD.url, *args)
        never = serve_on(EVD.url, *args, env={"EVICTD_LLAMA_PACK": "0"})
        try:
            out = []
            for srv in (packs, never):
                text, got = PROMPTS[1], []
                for line in (" Then", " The next day", " She said", " And",
                             " Later that night", " So"):
                    a = complete(srv.addr, text, 60, cache_prompt=True)
                    got.append((a["content"], a["tokens_cached"]))
                    text += a["content"] + line
                m = serve_metrics(srv.addr)
                out.append((got, m["evictd_llama_cells_packed_total"],
                            m["evictd_llama_conversation_hits_total"]))
            self.assertEqual(out[0][0], out[1][0])
            # Turns 5 and 6 went past the window (over 255 positions) and
            # continued the conversation (tokens cached).
            self.assertGreater(out[0][0][-1][1], 255)
            self.assertGreaterEqual(out[0][2], 5)
            self.assertGreater(out[0][1], 0)
            self.assertEqual(out[1][1], 0)
        finally:
            packs.stop()
            never.stop()
        self.assertEqual(wait_sessions(EVD, 0), 0)
        # Not given, the budget is the daemon's default (512) less one: a
        # full window's pass then holds 512 cells, not 513 (768 attended).
        for args, budget in (((), 511), (("--budget", "512"), 512)):
            srv = serve_on(EVD.url, *args)
            try:
                self.assertIn("budget %d," % budget, srv.log())
            finally:
                srv.stop()

    def test_disconnect(self) -> None:
        # A session is deleted as its request ends, through its lane: the
        # sessions of the tests before are gone first.
        self.assertEqual(wait_sessions(EVD, 0), 0)
        s = socket.create_connection(tuple_addr(SERVER.addr))
        body = json.dumps(dict(prompt=PROMPTS[2], n_predict=4000, temperature=0,
                               stream=True)).encode()
        s.sendall(b"POST /completion HTTP/1.1\r\nHost: x\r\n"
                  b"Content-Type: application/json\r\nContent-Length: %d"
                  b"\r\n\r\n%s" % (len(body), body))
        got = b""
        while got.count(b"data: ") < 20:
            chunk = s.recv(4096)
            self.assertTrue(chunk)
            got += chunk
        self.assertEqual(metrics.total(EVD.addr, "evictd_sessions"), 1)
        s.close()
        self.assertEqual(wait_sessions(EVD, 0, 5), 0)
        self.assertIn("went away", SERVER.log())
        # serve's gauges say so too, with no iteration after the leave
        deadline = time.monotonic() + 5
        while True:
            m = serve_metrics(SERVER.addr)
            if (m["evictd_llama_sequences_active"],
                    m["evictd_llama_requests_active"]) == (0, 0):
                break
            self.assertLess(time.monotonic(), deadline, m)
            time.sleep(0.02)
        out = complete(SERVER.addr, PROMPTS[0], 80)
        self.assertEqual(out["content"], generate(PROMPTS[0], 80))

    def test_disconnect_not_streamed(self) -> None:
        # A session is deleted as its request ends, through its lane: the
        # sessions of the tests before are gone first.
        self.assertEqual(wait_sessions(EVD, 0), 0)
        # a client waiting for a whole completion goes away: noticed from
        # its socket while the tokens flow, the session deleted (a length
        # the engine takes far longer than the wait below to make: the
        # disconnect must be noticed, not the answer finished)
        s = socket.create_connection(tuple_addr(SERVER.addr))
        body = json.dumps(dict(prompt=PROMPTS[3], n_predict=32000, temperature=0,
                               ignore_eos=True)).encode()
        s.sendall(b"POST /completion HTTP/1.1\r\nHost: x\r\n"
                  b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        deadline = time.monotonic() + 5
        while metrics.total(EVD.addr, "evictd_sessions") != 1:
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.02)
        time.sleep(0.5)  # the tokens flow: news at every look
        s.close()
        self.assertEqual(wait_sessions(EVD, 0, 5), 0)
        self.assertEqual(complete(SERVER.addr, PROMPTS[3], 5)
                         ["tokens_predicted"], 5)

    def restart_midway(self, sv: Serve, d: Daemon) -> List[dict]:
        """Four streams at once through sv; evictd (d, without a state
        directory) killed with SIGKILL once each has sent 50 events, then
        restarted: each stream's events."""
        conns, resps, got = [], [], []
        for p in PROMPTS:
            c = connect(sv.addr)
            c.request("POST", "/completion", body=json.dumps(
                dict(prompt=p, n_predict=1500, stream=True,
                     temperature=0)))
            conns.append(c)
            resps.append(c.getresponse())
            got.append(b"")
        for i, r in enumerate(resps):
            while got[i].count(b"data: ") < 50:
                got[i] += r.read1(4096)
        d.kill()
        d.restart()
        out = []
        for i, r in enumerate(resps):
            got[i] += r.read()
            conns[i].close()
            out.append([json.loads(b[6:]) for b in got[i].decode().split(
                "\n\n") if b.strip()])
        return out

    def test_restart_without_state(self) -> None:
        # evictd restarted WITHOUT its state while four requests decode in
        # the same batches: each next step is 404 unknown_session, serve
        # re-homes those sessions within the iteration (adopts what its
        # cache holds, sends the items again), and every stream goes on
        # with the text of an undisturbed one.
        d = Daemon.started(TMP.name)
        sv = serve_on(d.url, *SERVE)
        try:
            solo = [stream(sv.addr, p, 1500)[0] for p in PROMPTS]
            for p, ev in zip(PROMPTS, self.restart_midway(sv, d)):
                self.assertEqual(ev[-1].get("stop_type"), "limit", ev[-1])
                self.assertEqual("".join(e["content"] for e in ev[:-1]),
                                 solo[PROMPTS.index(p)])
            m = serve_metrics(sv.addr)
            self.assertEqual(
                m['evictd_llama_rehomes_total{cause="unknown_session"}'], 4)
            self.assertEqual(m["evictd_llama_requests_failed_total"], 0)
            self.assertEqual(metrics.total(
                d.addr, "evictd_adoptions_created_total"), 4)
            self.assertEqual(wait_sessions(d, 0), 0)
        finally:
            sv.stop()
            d.stop()

    def test_restart_without_state_negative_control(self) -> None:
        # The same with re-homing off (serve as it was): each request fails
        # with session_lost (the answers' size gives it away), the server
        # goes on serving.
        d = Daemon.started(TMP.name)
        sv = serve_on(d.url, *SERVE, env={"EVICTD_LLAMA_REHOME": "off"})
        try:
            for ev in self.restart_midway(sv, d):
                self.assertEqual(ev[-1]["error"]["code"], "session_lost",
                                 ev[-1])
                self.assertIn("lost the session", ev[-1]["error"]["message"])
            self.assertEqual(wait_sessions(d, 0), 0)
            out = complete(sv.addr, PROMPTS[0], 80)
            self.assertEqual(out["content"], generate(PROMPTS[0], 80))
        finally:
            sv.stop()
            d.stop()

    def test_empty_piece_first(self) -> None:
        # A fresh serve whose first answer begins with a token that shows
        # nothing (BOS, drawn by a logit bias): its choice's held text has
        # no memory yet, and an empty piece must leave it so (UBSan caught
        # serve passing that NULL to memmove, in test_crash's loop; this
        # model's vocabulary has such tokens). The answer is a second
        # request's, and serve stops cleanly.
        sv = serve_on(EVD.url, *SERVE, model=paths.stories_gguf())
        try:
            bos = json.loads(request(sv.addr, "POST", "/tokenize", {
                "content": "", "add_special": True})[2])["tokens"]
            self.assertEqual(len(bos), 1, bos)
            ask = dict(logit_bias=[[bos[0], 100.0]], ignore_eos=True)
            first = complete(sv.addr, PROMPTS[1], 3, **ask)
            self.assertEqual(first["tokens_predicted"], 3)
            self.assertEqual(first["content"],
                             complete(sv.addr, PROMPTS[1], 3, **ask)[
                                 "content"])
        finally:
            self.assertEqual(sv.stop(), 0, sv.log()[-3000:])

    def test_bad_inputs(self) -> None:
        cases = [
            ("POST", "/completion", {}, 400),
            ("POST", "/completion", {"prompt": 5}, 400),
            ("POST", "/completion", {"prompt": "a", "n_predict": 0}, 400),
            ("POST", "/completion", {"prompt": "a", "n_predict": 40000}, 400),
            ("POST", "/completion", {"prompt": "a", "n_predict": "9"}, 400),
            ("POST", "/completion", {"prompt": "a", "stream": "yes"}, 400),
            # llama-server takes a temperature of 0 or less as greedy
            ("POST", "/completion", {"prompt": "a", "temperature": -1,
                                     "n_predict": 2}, 200),
            ("POST", "/completion", {"prompt": "a", "top_k": "x"}, 400),
            ("POST", "/completion", [1, 2], 400),
            ("POST", "/completion", b"{not json", 400),
            ("POST", "/completion", b"x" * (2 << 20), 413),
            ("GET", "/completion", None, 405),
            ("POST", "/health", None, 405),
            ("GET", "/nowhere", None, 404),
        ]
        for method, path, body, want in cases:
            raw = body if isinstance(body, bytes) else None
            status, hdr, out = request(SERVER.addr, method, path,
                                       None if raw else body, raw)
            self.assertEqual(status, want, (method, path, body, out))
            if want == 200:
                continue
            err = json.loads(out)["error"]
            self.assertTrue(err["code"] and err["message"], out)
            self.assertEqual(hdr["Content-Type"], "application/json")
            if want == 405:  # RFC 9110: a 405 names what the path takes
                self.assertEqual(hdr.get("Allow"), "POST" if path ==
                                 "/completion" else "GET", hdr)
        # the server still serves
        self.assertEqual(complete(SERVER.addr, PROMPTS[3], 5)
                         ["tokens_predicted"], 5)

    def test_usage(self) -> None:
        for args, rc, says in (
                ((), 2, "-m MODEL.gguf is required"),
                (("-m", GGUF, "--parallel", "0"), 2,
                 "--parallel wants a whole number from 1"),
                (("-m", GGUF, "--frob"), 2, "--help lists the options"),
                (("-m", GGUF, "--listen", "nowhere"), 1,
                 "wants HOST:PORT or unix:/path"),
                (("-m", os.path.join(TMP.name, "none.gguf")), 1,
                 "cannot load"),
                (("-m", GGUF, "--evictd", "unix:" + os.path.join(
                    TMP.name, "nobody.sock"), "--reconnect-ms", "0"), 1,
                 "cannot read evictd's session defaults"),
                (("-m", GGUF, "--listen", "127.0.0.1:0", "--port", "80"), 2,
                 "give --listen or --host/--port, not both"),
                (("-m", GGUF, "-np", "0"), 2,
                 "--parallel wants a whole number from 1"),
                (("-m", GGUF, "-ctk", "q4"), 2,
                 "--cache-type-k is one of f32 f16 q8_0 bf16 q4_0 q4_1 "
                 "iq4_nl q5_0 q5_1, not 'q4'"),
                (("-m", GGUF, "-ctv", "q8_0", "-fa", "off"), 2,
                 "--cache-type-v q8_0 needs flash attention"),
                (("-m", GGUF, "--api-key", "has blank"), 2,
                 "printable ASCII without blanks"),
                (("-m", GGUF, "--api-key-file", "/nonexistent"), 2,
                 "cannot read --api-key-file")):
            p = subprocess.run([BIN, "serve"] + list(args),
                               capture_output=True, timeout=60)
            self.assertEqual(p.returncode, rc, (args, p.stderr))
            self.assertIn(says, p.stderr.decode(), args)
        p = subprocess.run([BIN, "serve", "--help"], capture_output=True)
        self.assertEqual(p.returncode, 0)
        for says in ("POST /completion", "POST /v1/chat/completions",
                     "-np, --parallel", "-fa, --flash-attn WHEN",
                     "(default auto)", "--cache-type-k TYPE", "(default f16)",
                     "--exact", "--api-key-file", "--host HOST"):
            self.assertIn(says, p.stdout.decode())
        p = subprocess.run([BIN, "--help"], capture_output=True)
        self.assertIn("evictd-llama serve", p.stdout.decode())

    def test_health_and_metrics(self) -> None:
        status, _, body = request(SERVER.addr, "GET", "/health")
        self.assertEqual((status, json.loads(body)), (200, {"status": "ok"}))
        down = serve_on("unix:" + os.path.join(TMP.name, "nobody.sock"),
                        *SETTINGS, "--reconnect-ms", "0")
        try:
            status, _, body = request(down.addr, "GET", "/health")
            self.assertEqual(status, 503)
            self.assertEqual(json.loads(body)["status"], "unavailable")
        finally:
            self.assertEqual(down.stop(), 0)
        complete(SERVER.addr, PROMPTS[3], 7)
        _, _, text = request(SERVER.addr, "GET", "/metrics")
        # Clean but for llama-server's own names (test_routes.py).
        self.assertEqual([f for f in promtool_findings(text)
                          if not f.startswith("llamacpp:")], [])
        m = serve_metrics(SERVER.addr)
        for k in ("evictd_llama_requests_total",
                  "evictd_llama_tokens_predicted_total",
                  "evictd_llama_requests_active",
                  "evictd_llama_requests_queued",
                  "evictd_llama_sequences_active",
                  'evictd_llama_requests_finished_total{outcome="ok"}',
                  "evictd_llama_evictd_round_trip_seconds_count",
                  "evictd_llama_evictd_seconds_total"):
            self.assertIn(k, m)
        self.assertGreaterEqual(
            m['evictd_llama_requests_finished_total{outcome="ok"}'], 1)
        # One round trip per iteration that sent steps.
        self.assertGreaterEqual(
            m["evictd_llama_evictd_round_trip_seconds_count"], 7)
        self.assertLessEqual(
            m["evictd_llama_evictd_round_trip_seconds_count"],
            m["evictd_llama_iterations_total"])
        self.assertGreaterEqual(m["evictd_llama_tokens_predicted_total"], 7)
        self.assertEqual(m["evictd_llama_requests_active"], 0)

    def test_listen_unix_socket_rules(self) -> None:
        # As the daemon's --listen: a Unix socket another server listens on
        # is refused (its file left alone), a stale one (its server gone)
        # is replaced; --host/--port is --listen HOST:PORT.
        path = os.path.join(TMP.name, "rules.sock")
        a = serve_on(EVD.url, *SERVE, listen="unix:" + path)
        try:
            p = subprocess.run([BIN, "serve", "-m", GGUF, "--listen",
                                "unix:" + path, "--evictd", EVD.url]
                               + SETTINGS, capture_output=True, timeout=60)
            self.assertEqual(p.returncode, 1, p.stderr)
            self.assertIn(b"Address already in use", p.stderr)
            self.assertEqual(request(a.addr, "GET", "/health")[0], 200)
        finally:
            a.proc.kill()  # no clean-up: the socket file stays, stale
            a.proc.wait()
        self.assertTrue(os.path.exists(path))
        b = serve_on(EVD.url, *SERVE, listen="unix:" + path)
        try:
            self.assertEqual(request(b.addr, "GET", "/health")[0], 200)
        finally:
            self.assertEqual(b.stop(), 0)
        self.assertFalse(os.path.exists(path))
        c = serve_on(EVD.url, *SERVE, "--host", "127.0.0.1", "--port", "0",
                     listen=None)
        try:
            self.assertTrue(c.addr.startswith("127.0.0.1:"), c.addr)
            self.assertEqual(request(c.addr, "GET", "/health")[0], 200)
        finally:
            c.stop()

    def test_sigterm(self) -> None:
        # A session is deleted as its request ends, through its lane: the
        # sessions of the tests before are gone first.
        self.assertEqual(wait_sessions(EVD, 0), 0)
        # SIGTERM mid-stream: the stream ends with an error event, the
        # session is deleted, the server exits 0.
        sv = serve_on(EVD.url, *SERVE)
        try:
            c = connect(sv.addr)
            c.request("POST", "/completion", body=json.dumps(
                dict(prompt=PROMPTS[1], n_predict=4000, stream=True,
                     temperature=0)))
            r = c.getresponse()
            got = b""
            while got.count(b"data: ") < 10:
                got += r.read1(4096)
            self.assertEqual(metrics.total(EVD.addr, "evictd_sessions"), 1)
            sv.proc.terminate()
            got += r.read()
            last = json.loads(got.decode().strip().split("\n\n")[-1][6:])
            c.close()
            self.assertEqual(last["error"]["code"], "shutting_down")
            self.assertEqual(sv.proc.wait(20), 0)
            self.assertEqual(metrics.total(EVD.addr, "evictd_sessions"), 0)
        finally:
            sv.stop()

    def test_kill_restart_unix(self) -> None:
        # evictd (--state-dir, --fsync always) on a unix socket, killed
        # with SIGKILL mid-stream and restarted on the same socket: the
        # stream goes on and equals an uninterrupted one. The server
        # listens on a unix socket too.
        state = os.path.join(TMP.name, "state")
        os.mkdir(state)
        d = Daemon.started(TMP.name, "--state-dir", state, "--fsync",
                           "always", listen="unix:" + os.path.join(
                               TMP.name, "evictd.sock"))
        sv = serve_on(d.addr, *SERVE,
                      listen="unix:" + os.path.join(TMP.name, "serve.sock"))
        try:
            n = 1500
            base, _ = stream(sv.addr, PROMPTS[0], n)
            c = connect(sv.addr)
            c.request("POST", "/completion", body=json.dumps(
                dict(prompt=PROMPTS[0], n_predict=n, stream=True,
                     temperature=0)))
            r = c.getresponse()
            got = b""
            while got.count(b"data: ") < 100:
                got += r.read1(4096)
            d.kill()
            time.sleep(0.3)
            d.restart()
            got += r.read()
            c.close()
            ev = [json.loads(b[6:]) for b in got.decode().split("\n\n")
                  if b.strip()]
            self.assertEqual(ev[-1].get("stop"), True, ev[-1])
            self.assertEqual("".join(e["content"] for e in ev[:-1]), base)
            self.assertEqual(wait_sessions(d, 0), 0)
            m = serve_metrics(sv.addr)
            self.assertGreater(m["evictd_llama_evictd_resends_total"], 0)
            self.assertGreaterEqual(
                m["evictd_llama_evictd_connections_total"], 2)
            self.assertEqual(sv.stop(), 0)
        finally:
            sv.stop()
            d.stop()


def tuple_addr(addr: str) -> Tuple[str, int]:
    host, port = addr.rsplit(":", 1)
    return host, int(port)


if __name__ == "__main__":
    unittest.main()
