#!/usr/bin/python3
"""evictd-llama with every kind of layer llama.cpp has (issue 40): tiny
random-weight models of real architectures around llama.cpp's SentencePiece
vocabulary (tests/support/arch_models.py writes them with the tree's
gguf-py), each served with --exact, one thread, against the real daemon:

- gemma3: sliding-window layers (a window of 32; 6 of 7) and a global one;
- gpt-oss: sliding-window layers every other one, learned attention sinks,
  a mixture of experts;
- llama4: chunked attention layers and a global one (llama.cpp fixes the
  chunk at 8192 positions, so here they attend as full ones do, in
  llama.cpp's windowed cache);
- lfm2: short-convolution layers (a recurrent state; 4 of 6) and
  attention ones;
- granitehybrid: Mamba-2 layers (4 of 6) and attention ones;
- qwen2: full attention alone (the control: its cache can go back).

For each:
1. Within the window (nothing evicted), serve's greedy answer is llama.cpp's
   own (upstream_check's decode of the same prompt in a context of its
   own), token for token, and its top log-probabilities within 1e-4.
2. A generation of three times the model's training context completes in
   a llama.cpp cache of 256 cells per sequence (budget 96 + lookahead 16,
   rounded): the window bounds every attention layer's cells.
3. A conversation of 6 turns through /v1/completions on -np 1: each turn
   continues the one before (a parked conversation, or the checkpoint
   before the last 4 tokens of the turn before's prompt, where the answer
   retokenizes otherwise), decoding at most what is new since the turn
   before's prompt and those 4 tokens; the same
   request again decodes at most 4 tokens (its checkpoint) and gives the
   first answer; the last line edited decodes from where its turn began
   and gives the answer of a fresh serve sent the same turns, then the
   edited one. With --ctx-checkpoints 0, an edit within the window goes
   back in qwen2's conversation (exactly: nothing was evicted) and is
   decoded afresh by the others, counted in
   evictd_llama_conversation_no_back_total; either way the answer is a
   fresh serve's.
   The same for a chat of 10 turns through /v1/chat/completions.
4. /metrics says what the model keeps (evictd_llama_model_memory).
5. Every logit serve computed in a conversation past the window, a
   regenerated answer and an edit from checkpoints among them, is a
   float64 reference's (reference.replay of --dump with
   tests/support/arch_lm.py's models: the sliding-window layers' own
   window and learned sinks, the experts, the short convolutions and
   Mamba-2 layers reading every token) for the architectures it has
   (gemma3, gpt-oss, lfm2, granitehybrid); against a window twice as wide
   the same record fails.
6. n choices (forks of the prompt's state) each give the one answer.
7. generate runs past the window, and refuses --rewind where the cache
   cannot go back and --positions cache where it cannot be shifted;
   perplexity scores the same under a window that holds every token as
   under full attention, and otherwise under one of 32.

Runs in about a minute on two cores.
"""

import json
import math
import os
import subprocess
import sys
import tempfile
import unittest
from typing import Dict, List, Optional

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import torch  # noqa: E402

from support import arch_lm, arch_models, metrics, paths  # noqa: E402
from support import reference as ref  # noqa: E402
from support.daemon import Daemon  # noqa: E402
from support.http import request  # noqa: E402
from support.serve import Serve  # noqa: E402

VOCAB = "llama-spm"
CONTEXT = 512       # the models' training context
BUDGET, LOOKAHEAD = 96, 16
WINDOW = ["--budget", str(BUDGET), "--sinks", "4", "--lookahead",
          str(LOOKAHEAD), "--exact", "--threads", "1", "-np", "1"]
TAIL = 4            # serve's CK_TAIL: a prompt's last tokens, alone
# llama.cpp's float32 against the float64 reference: gemma3's GELU goes
# through a float16 table in llama.cpp's CPU backend (about 2e-4 of a
# logit; support/arch_lm.py), the others have none.
TOL = {"gemma3": 3e-4, "lfm2": 1e-5, "gpt-oss": 1e-5, "granitehybrid": 1e-5}
TOL_ELSE = 1e-4
# What each architecture's memory is (evictd_llama_model_memory's kind).
FAMILIES = {"gemma3": "windowed", "gpt-oss": "windowed",
            "llama4": "windowed", "lfm2": "hybrid",
            "granitehybrid": "hybrid", "qwen2": "full"}
LINES = [" The cat sat on the mat.", " It was a sunny day.",
         " A bird flew over the house.", " The dog barked at it.",
         " Then everyone went home.", " The night was quiet."]
OPENER = "Once upon a time there was a small village by the sea."
ANSWER = 12
KINDS = ("none", "conversation", "saved", "disk", "checkpoint")

TMP: Optional[tempfile.TemporaryDirectory] = None
MODELS: Dict[str, str] = {}
FIGURES: List[str] = []


def setUpModule() -> None:
    global TMP
    TMP = tempfile.TemporaryDirectory(prefix="evictd-families-")
    for arch in FAMILIES:
        MODELS[arch] = arch_models.write(arch, VOCAB, TMP.name,
                                         context=CONTEXT)


def tearDownModule() -> None:
    if TMP is not None:
        TMP.cleanup()
    print("", file=sys.stderr)
    for line in FIGURES:
        print(line, file=sys.stderr)


def llama_cpp(model: str, prompt: str, n: int, nprobs: int) -> dict:
    """llama.cpp's own greedy decode of prompt (upstream_check sample: a
    context of its own, the exact settings, nothing evicted)."""
    p = subprocess.run([paths.upstream_check(), "sample", model, prompt,
                        str(n), str(nprobs)],
                       input=json.dumps({"temperature": 0}).encode(),
                       capture_output=True, timeout=300)
    assert p.returncode == 0, p.stderr.decode(errors="replace")[-2000:]
    return json.loads(p.stdout)


class Answer:
    def __init__(self, out: dict) -> None:
        self.text = out["choices"][0]["text"]
        self.prompt_n = out["timings"]["prompt_n"]
        self.cache_n = out["timings"]["cache_n"]
        self.cache_from = KINDS[out["timings"]["cache_kind"]]
        self.prompt_tokens = out["usage"]["prompt_tokens"]
        self.completion_tokens = out["usage"]["completion_tokens"]


def post(sv: Serve, prompt: str, n: int = ANSWER, **extra) -> Answer:
    body = dict(prompt=prompt, max_tokens=n, temperature=0, **extra)
    status, _, raw = request(sv.addr, "POST", "/v1/completions", body)
    assert status == 200, (status, raw, sv.log()[-2000:])
    return Answer(json.loads(raw))


class Family:
    """The checks of one architecture (a mixin: the classes below name
    it)."""
    arch = ""

    def setUp(self) -> None:  # noqa: D102
        self.evd = Daemon.started(TMP.name)
        self.servers: List[Serve] = []
        self.model = MODELS[self.arch]

    def tearDown(self) -> None:  # noqa: D102
        for sv in self.servers:
            sv.stop()
        self.evd.stop()

    def serve(self, *args: str) -> Serve:
        sv = Serve(TMP.name, self.evd.url, *WINDOW, *args, model=self.model)
        self.servers.append(sv)
        return sv

    def test_within_window_is_llama_cpps(self) -> None:
        sv = self.serve()
        prompt, n = "The quick brown fox jumps over the lazy dog", 40
        want = llama_cpp(self.model, prompt, n, 3)
        status, _, raw = request(sv.addr, "POST", "/completion", dict(
            prompt=prompt, n_predict=n, temperature=0, n_probs=3,
            cache_prompt=False, return_tokens=True))
        self.assertEqual(status, 200, raw)
        got = json.loads(raw)
        self.assertLessEqual(got["tokens_evaluated"] + n, BUDGET)
        self.assertEqual(got["tokens"], want["tokens"])
        if want["text"] is not None:  # else it ends within a character
            self.assertEqual(got["content"], want["text"])
        # Log-probabilities: a random model's are all near 1/n_vocab.
        worst = 0.0
        for mine, theirs in zip(got["completion_probabilities"],
                                want["probs"]):
            ours = {p["id"]: p["logprob"] for p in mine["top_logprobs"]}
            for tok, prob in theirs["top"]:
                worst = max(worst, abs(ours[tok] - math.log(prob)))
        self.assertLess(worst, 1e-4)
        FIGURES.append("%-14s within the window: %d tokens as llama.cpp's, "
                       "log-probabilities within %.1e" % (self.arch, n,
                                                          worst))
        m = metrics.scrape(sv.addr)
        kind = FAMILIES[self.arch]
        self.assertEqual(m['evictd_llama_model_memory{kind="%s",rewind="%s"}'
                         % (kind, "yes" if kind == "full" else "no")], 1)

    def test_three_contexts_in_a_bounded_cache(self) -> None:
        sv = self.serve()
        n = 3 * CONTEXT
        status, _, raw = request(sv.addr, "POST", "/completion", dict(
            prompt="Hello", n_predict=n, temperature=0, ignore_eos=True))
        self.assertEqual(status, 200, raw)
        got = json.loads(raw)
        self.assertEqual(got["tokens_predicted"], n)
        status, _, raw = request(sv.addr, "GET", "/props")
        cells = json.loads(raw)["default_generation_settings"]["n_ctx"]
        self.assertEqual(cells, 256)
        self.assertLess(cells, CONTEXT)

    def test_forked_choices(self) -> None:
        # n choices: the prompt decoded once, its state copied to each
        # (llama_memory_seq_cp: a recurrent state too); greedy, each is
        # the one answer, past the window.
        sv = self.serve("-np", "3")
        one = post(sv, OPENER, 120, cache_prompt=False).text
        body = dict(prompt=OPENER, max_tokens=120, temperature=0, n=3,
                    cache_prompt=False)
        status, _, raw = request(sv.addr, "POST", "/v1/completions", body)
        self.assertEqual(status, 200, raw)
        self.assertEqual([c["text"] for c in json.loads(raw)["choices"]],
                         [one] * 3)

    def talk(self, sv: Serve, hist: str, turns: int = len(LINES)
             ) -> List[tuple]:
        """The conversation's first `turns` turns on sv: (the history its
        line follows, the prompt, the answer) each."""
        out = []
        for line in LINES[:turns]:
            a = post(sv, hist + line)
            out.append((hist, hist + line, a))
            hist = hist + line + a.text
        return out

    def test_conversation(self) -> None:
        sv = self.serve()
        turns = self.talk(sv, OPENER)
        for k, (hist, prompt, a) in enumerate(turns[1:], 1):
            before = turns[k - 1][2]
            # Its new tokens: the line, and the answer before it where its
            # text tokenizes otherwise than it was drawn (from the
            # checkpoint where the turn before began).
            self.assertIn(a.cache_from, ("conversation", "checkpoint"), k)
            self.assertLessEqual(a.prompt_n, a.prompt_tokens -
                                 before.prompt_tokens + TAIL, k)
            self.assertGreater(a.cache_n, before.prompt_tokens // 2, k)
        hist, prompt, first = turns[-1]
        again = post(sv, prompt)
        self.assertEqual(again.text, first.text)
        if FAMILIES[self.arch] != "full":
            self.assertEqual(again.cache_from, "checkpoint")
        self.assertLessEqual(again.prompt_n, TAIL)
        edited = hist + " The dog ran away."
        e = post(sv, edited)
        self.assertIn(e.cache_from, ("conversation", "checkpoint"))
        self.assertLess(e.prompt_n, 16)
        # A serve sent that edited turn in the first place, after the
        # same turns: the same answer (the window evicted, so a serve
        # sent the edited conversation whole, in other chunks, may not).
        fresh = self.serve()
        before = self.talk(fresh, OPENER, len(LINES) - 1)
        self.assertEqual([t[2].text for t in before],
                         [t[2].text for t in turns[:-1]])
        self.assertEqual(post(fresh, edited).text, e.text)
        FIGURES.append("%-14s turn 6: %d of %d prompt tokens decoded; "
                       "again %d (%s); edited %d (%s)" % (
                           self.arch, first.prompt_n, first.prompt_tokens,
                           again.prompt_n, again.cache_from, e.prompt_n,
                           e.cache_from))

    def test_chat(self) -> None:
        # Through /v1/chat/completions (ChatML: these models have no
        # template), the whole message list sent each turn: no turn
        # decodes more than what is new since the turn before's prompt
        # and its last 4 tokens.
        sv = self.serve()
        msgs: List[dict] = []
        last = None
        for turn in range(10):
            msgs.append({"role": "user", "content": LINES[turn % 6] * 3})
            status, _, raw = request(sv.addr, "POST", "/v1/chat/completions",
                                     dict(messages=msgs, max_tokens=ANSWER,
                                          temperature=0))
            self.assertEqual(status, 200, raw)
            out = json.loads(raw)
            n = out["usage"]["prompt_tokens"]
            t = out["timings"]
            if last is not None:
                self.assertIn(KINDS[t["cache_kind"]],
                              ("conversation", "checkpoint"), turn)
                self.assertLessEqual(t["prompt_n"], n - last + TAIL, turn)
            last = n
            msgs.append({"role": "assistant",
                         "content": out["choices"][0]["message"]["content"]})
        self.assertGreater(last, 2 * BUDGET)
        # From turn 3 (two user messages shared with the turn before) the
        # template renders the last messages alone (rcache.h), and every
        # turn but the first tokenizes from where it parts from the last.
        m = metrics.scrape(sv.addr)
        self.assertGreaterEqual(
            m["evictd_llama_template_renders_window_total"], 8, m)
        self.assertGreaterEqual(
            m["evictd_llama_prompt_tokenize_hits_total"], 9, m)

    def test_no_checkpoints_decodes_afresh(self) -> None:
        # Two turns, within the window (nothing evicted), then the last
        # line edited: a full-attention cache goes back to where they
        # part, exactly; one that cannot go back decodes it afresh.
        sv = self.serve("--ctx-checkpoints", "0")
        hist, prompt, first = self.talk(sv, OPENER, 2)[-1]
        edited = hist + " The dog ran away."
        key = "evictd_llama_conversation_no_back_total"
        before = metrics.scrape(sv.addr)[key]
        e = post(sv, edited)
        self.assertLessEqual(e.prompt_tokens + ANSWER, BUDGET)
        gone_back = metrics.scrape(sv.addr)[key] - before
        fresh = self.serve("--ctx-checkpoints", "0")
        self.assertEqual(post(fresh, edited).text, e.text)
        if FAMILIES[self.arch] == "full":
            self.assertEqual(e.cache_from, "conversation")
            self.assertLess(e.prompt_n, 16)
            self.assertEqual(gone_back, 0)
        else:
            self.assertEqual(e.cache_from, "none")
            self.assertEqual(e.prompt_n, e.prompt_tokens)
            self.assertEqual(gone_back, 1)

    def test_generate_and_perplexity(self) -> None:
        base = [paths.evictd_llama(), "generate", "-m", self.model,
                "--evictd", self.evd.url, "--budget", "32", "--sinks", "4",
                "--exact", "-p", "Hello there", "-n", "200"]
        p = subprocess.run(base, capture_output=True, timeout=300)
        self.assertEqual(p.returncode, 0, p.stderr[-2000:])
        self.assertTrue(p.stdout)
        # --rewind takes decoded positions back: refused where the cache
        # cannot go back, with the reason.
        p = subprocess.run(base + ["--rewind", "100:3"], capture_output=True,
                           timeout=300)
        if FAMILIES[self.arch] == "full":
            self.assertEqual(p.returncode, 0, p.stderr[-2000:])
        else:
            self.assertNotEqual(p.returncode, 0)
            self.assertIn(b"cannot go back", p.stderr)
        # Cache positions move keys: a full-attention cache's alone.
        p = subprocess.run(base + ["--positions", "cache"],
                           capture_output=True, timeout=300)
        if FAMILIES[self.arch] == "full":
            self.assertEqual(p.returncode, 0, p.stderr[-2000:])
        else:
            self.assertNotEqual(p.returncode, 0)
            self.assertIn(b"cannot have them moved", p.stderr)
        text = os.path.join(TMP.name, "text.txt")
        with open(text, "w") as f:
            f.write(" ".join([OPENER] + LINES) * 8)
        p = subprocess.run([paths.evictd_llama(), "perplexity", "-m",
                            self.model, "--evictd", self.evd.url, "--exact",
                            "--budgets", "32,256", "-n", "200", "--json",
                            text], capture_output=True, timeout=300)
        self.assertEqual(p.returncode, 0, p.stderr[-2000:])
        got = {(q["policy"], q["budget"]): q["nll"]
               for q in json.loads(p.stdout)["policies"]}
        full = got[("full", None)]
        self.assertEqual(len(full), 200)
        # A window that holds every token is full attention; one of 32
        # evicted, and its scores part from full attention's.
        for policy in ("window", "sinks"):
            wide = got[(policy, 256)]
            self.assertLess(max(abs(a - b) for a, b in zip(wide, full)),
                            1e-6, policy)
            self.assertGreater(max(abs(a - b) for a, b in
                                   zip(got[(policy, 32)], full)), 1e-4,
                               policy)

    def every_logit_is_the_references(self) -> None:
        """(A test of the architectures support/arch_lm.py has.)"""
        prefix = os.path.join(TMP.name, "dump-" + self.arch)
        sv = self.serve("--dump", prefix)
        hist, prompt, first = self.talk(sv, OPENER)[-1]
        self.assertEqual(post(sv, prompt).text, first.text)
        post(sv, hist + " The dog ran away.")
        self.assertEqual(sv.stop(), 0, sv.log()[-2000:])
        self.servers.remove(sv)
        torch.set_num_threads(1)
        model = arch_lm.load(self.model)
        res = ref.replayed(self, prefix, model,
                           TOL.get(self.arch, TOL_ELSE))
        # Control: the same record against a window twice as wide.
        events, rows = ref.load_dump(prefix)
        wrong = ref.replay(events, rows, model, budget=2 * BUDGET)
        self.assertTrue(wrong.row_mismatches or wrong.max_diff > 1e-2,
                        wrong.summary())
        FIGURES.append("%-14s every logit within %.1e of the float64 "
                       "reference (%d rows, widest row %d)" % (
                           self.arch, res.max_diff, res.compared,
                           res.widest))


def _family(arch: str) -> type:
    name = "".join(p.capitalize() for p in arch.replace("-", " ").split())
    tests = {"arch": arch}
    if arch in arch_lm.ARCHES:
        tests["test_every_logit_is_the_references"] = \
            Family.every_logit_is_the_references
    return type(name, (Family, unittest.TestCase), tests)


for _arch in FAMILIES:
    _cls = _family(_arch)
    globals()[_cls.__name__] = _cls
del _arch, _cls  # else unittest runs the last class twice

if __name__ == "__main__":
    unittest.main()
