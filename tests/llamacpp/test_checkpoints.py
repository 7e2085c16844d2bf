#!/usr/bin/python3
"""evictd-llama serve's checkpoints (issue 43; deploy/llama/serve/engine/
park.c says the rules), end to end on stories260K (--exact, one thread)
with the real daemon: a conversation whose window has evicted cannot be
truncated back, so serve keeps its state where each turn's new text
begins and before its prompt's last 4 tokens.

1. After a conversation of 14 turns through /v1/completions (budget 96,
   sinks 4; the window evicts from turn 3 on), on -np 1 as a chat page
   runs it:
   - the same request again (a regenerated answer) decodes at most 4
     prompt tokens (timings' prompt_n; cache_n the rest) and gives the
     first answer, twice in a row;
   - the last line edited decodes from where that turn's text began, and
     an early line (turn 11 of 14) edited from where its turn began;
     each answer is the one a serve that was sent that edited turn in
     the first place gives (a fresh serve, the same turns before it);
   - every logit of the whole run, checkpoints restored and all, is the
     float64 reference's (reference.replay of --dump, whose "keep"
     events are the checkpoints), and every removal the policy's;
   - no session is left in evictd once serve stops.
   Control: with --ctx-checkpoints 0 the same request again decodes its
   whole prompt.
2. What is kept: at most --ctx-checkpoints per slot (the oldest dropped,
   counted), their bytes in /metrics; within --cache-ram, a saved
   conversation never pushed out by checkpoints; none with --cache-ram 0,
   none for
   "cache_prompt": false, none for a request that cannot overflow the
   window.

3. The same through /v1/chat/completions on a random-weight model of
   llama.cpp's Llama 3 BPE vocabulary (tests/support/vocab_model.py
   writes it with the tree's gguf-py) and a Llama 3 style template: the
   regenerated answer from 4 tokens, the first again; the last message
   edited from its turn's checkpoint, a fresh serve's answer.

Runs in about 20 s on two cores; the figures go to stderr.
"""

import json
import os
import sys
import tempfile
import unittest
from typing import Dict, List, Optional, Tuple

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import torch  # noqa: E402

from support import generate as gen  # noqa: E402
from support import gguf_lm, metrics, paths, vocab_model  # noqa: E402
from support import reference as ref  # noqa: E402
from support.daemon import Daemon  # noqa: E402
from support.http import request  # noqa: E402
from support.serve import Serve  # noqa: E402

GGUF = paths.stories_gguf()
WINDOW = ["--budget", "96", "--sinks", "4", "--lookahead", "16",
          "--exact", "--threads", "1", "-np", "1"]
TAIL = 4            # serve's CK_TAIL: a prompt's last tokens, alone
OPENER = "Once upon a time, there was a little girl named Lily."
LINES = [" She liked to play.", " One day she saw a dog.",
         " The dog was big.", " Lily was happy.",
         " They played in the park.", " Then it was night.",
         " The sun came up.", " Her mom made cake.", " It was sweet.",
         " Lily said thank you.", " They went for a walk.",
         " A bird sang.", " Lily smiled.", " The end came soon."]
ANSWER = 24
# timings.cache_kind: where the kept positions came from.
KINDS = ("none", "conversation", "saved", "disk", "checkpoint")

TMP: Optional[tempfile.TemporaryDirectory] = None
MODEL = None
FIGURES: Dict[str, str] = {}


def setUpModule() -> None:
    global TMP, MODEL
    paths.checked_stories()
    torch.set_num_threads(1)
    TMP = tempfile.TemporaryDirectory(prefix="evictd-ckpt-")
    MODEL = gguf_lm.load(GGUF, gen.gguf_py_dir())


def tearDownModule() -> None:
    if TMP is not None:
        TMP.cleanup()
    print("", file=sys.stderr)
    for name, line in sorted(FIGURES.items()):
        print("%-14s %s" % (name, line), file=sys.stderr)


class Answer:
    def __init__(self, out: dict) -> None:
        self.text = out["choices"][0]["text"]
        self.prompt_n = out["timings"]["prompt_n"]
        self.cache_n = out["timings"]["cache_n"]
        self.cache_from = KINDS[out["timings"]["cache_kind"]]
        self.prompt_tokens = out["usage"]["prompt_tokens"]


def post(sv: Serve, prompt: str, n: int = ANSWER, **extra) -> Answer:
    body = dict(prompt=prompt, max_tokens=n, temperature=0, **extra)
    status, _, raw = request(sv.addr, "POST", "/v1/completions", body)
    assert status == 200, (status, raw, sv.log()[-2000:])
    return Answer(json.loads(raw))


def talk(sv: Serve, turns: int) -> List[Tuple[str, str, Answer]]:
    """The conversation's first `turns` turns: (the history its line
    follows, the prompt, the answer) each."""
    return talk_from(sv, OPENER, turns)


def talk_from(sv: Serve, opener: str, turns: int
              ) -> List[Tuple[str, str, Answer]]:
    hist, out = opener, []
    for line in LINES[:turns]:
        a = post(sv, hist + line)
        out.append((hist, hist + line, a))
        hist = hist + line + a.text
    return out


def figures(sv: Serve) -> Dict[str, float]:
    m = metrics.scrape(sv.addr)
    return {k.replace("evictd_llama_", ""): v for k, v in m.items()
            if "checkpoint" in k or k.startswith("evictd_llama_conv")
            or k.startswith("evictd_llama_rehomes")}


class Case(unittest.TestCase):
    def setUp(self) -> None:
        self.evd = Daemon.started(TMP.name)
        self.servers: List[Serve] = []

    def tearDown(self) -> None:
        for sv in self.servers:
            sv.stop()
        self.evd.stop()

    def serve(self, *args: str) -> Serve:
        sv = Serve(TMP.name, self.evd.url, *WINDOW, *args, model=GGUF)
        self.servers.append(sv)
        return sv

    def stopped(self, sv: Serve) -> None:
        self.assertEqual(sv.stop(), 0, sv.log()[-2000:])
        self.servers.remove(sv)


class Rewind(Case):
    """Test 1: regenerate and edits from checkpoints, exact."""

    def test_regenerate_and_edit(self) -> None:
        prefix = os.path.join(TMP.name, "ckpt")
        sv = self.serve("--dump", prefix)
        turns = talk(sv, len(LINES))
        self.assertEqual(turns[0][2].cache_from, "none")
        self.assertEqual({t[2].cache_from for t in turns[1:]},
                         {"conversation"})
        # The window has evicted: the conversation holds 96 of its
        # positions, far fewer than it computed.
        self.assertGreater(turns[-1][2].cache_n, 3 * 96)
        before = figures(sv)
        self.assertGreaterEqual(before["checkpoints_total"], len(LINES))
        hist, prompt, first = turns[-1]
        # Another conversation takes the one slot: the first is saved to
        # host memory, and its next request restores it.
        other_prompt = "Tom had a red ball. " * 12 + "He"
        other = post(sv, other_prompt)
        self.assertEqual(other.cache_from, "none")
        # The same request again, twice: the first answer, from at most
        # the prompt's last TAIL tokens.
        for k in range(2):
            again = post(sv, prompt)
            self.assertEqual(again.text, first.text, k)
            self.assertEqual(again.cache_from, "checkpoint")
            self.assertLessEqual(again.prompt_n, TAIL, k)
            self.assertEqual(again.cache_n + again.prompt_n,
                             again.prompt_tokens)
        # The last line edited: decoded from where that turn began.
        edited_last = hist + " The dog ran away."
        e_last = post(sv, edited_last)
        self.assertLess(e_last.prompt_n, 16)
        self.assertEqual(e_last.cache_from, "checkpoint")
        self.assertGreaterEqual(e_last.cache_n, first.cache_n)
        # An early line edited (turn 11 of 14): from where it began.
        k_early = len(LINES) - 4
        early_hist = turns[k_early][0]
        edited_early = early_hist + " A cat sat on a mat."
        e_early = post(sv, edited_early)
        self.assertLess(e_early.prompt_n, 16)
        self.assertGreaterEqual(e_early.cache_n, turns[k_early][2].cache_n)
        # The other conversation, saved when a checkpoint took the slot,
        # goes on from host memory.
        more = post(sv, other_prompt + other.text + " Tom was glad.")
        self.assertEqual(more.cache_from, "saved")
        self.assertGreater(more.cache_n, other.prompt_tokens)
        after = figures(sv)
        self.assertEqual(after["checkpoint_hits_total"]
                         - before["checkpoint_hits_total"], 4)
        self.assertGreater(after["checkpoints_bytes"], 0)
        self.stopped(sv)
        # No session outlives serve (the checkpoints' own included).
        self.assertEqual(metrics.wait_sessions(self.evd, 0), 0)

        # Each edited turn's answer is the one a serve gets that was sent
        # it in the first place, after the same turns.
        for edited, got, k in ((edited_last, e_last, len(LINES) - 1),
                               (edited_early, e_early, k_early)):
            fresh = self.serve()
            before_edit = talk(fresh, k)
            self.assertEqual([t[2].text for t in before_edit],
                             [t[2].text for t in turns[:k]])
            self.assertEqual(post(fresh, edited).text, got.text, k)
            self.stopped(fresh)

        res = ref.replayed(self, prefix, MODEL, gen.TOL)
        FIGURES["1 rewind"] = (
            "%d turns; regenerate %d of %d prompt tokens decoded, the last "
            "line edited %d, turn %d's %d; %d checkpoints kept (%d bytes), "
            "%d hits; %s" % (
                len(LINES), again.prompt_n, again.prompt_tokens,
                e_last.prompt_n, k_early + 1, e_early.prompt_n,
                after["checkpoints_total"], after["checkpoints_bytes"],
                after["checkpoint_hits_total"], res.summary()))

    def test_control_without_checkpoints(self) -> None:
        sv = self.serve("--ctx-checkpoints", "0")
        turns = talk(sv, 8)
        again = post(sv, turns[-1][1])
        # The window lost positions since: decoded afresh, all of it.
        self.assertEqual(again.prompt_n, again.prompt_tokens)
        self.assertEqual(figures(sv)["checkpoints_total"], 0)


class Kept(Case):
    """Test 2: what is kept, and what is not."""

    def test_per_slot_limit(self) -> None:
        sv = self.serve("--ctx-checkpoints", "2")
        talk(sv, 6)
        f = figures(sv)
        self.assertEqual(f["checkpoints"], 2)
        self.assertGreater(f["checkpoints_total"], 2)
        self.assertEqual(f["checkpoints_dropped_total"],
                         f["checkpoints_total"] - 2)
        self.assertGreater(f["checkpoints_bytes"], 0)
        FIGURES["2 limit"] = "%d kept, %d held (%d bytes)" % (
            f["checkpoints_total"], f["checkpoints"],
            f["checkpoints_bytes"])

    def test_conversations_first(self) -> None:
        # 1 MiB of --cache-ram holds about eight checkpoints of this
        # window: a conversation saved to make room for another, whose
        # turns then keep more checkpoints than fit, stays saved.
        sv = self.serve("--cache-ram", "1")
        first = talk(sv, 3)
        talk_from(sv, "Tom had a red ball.", 8)
        f = figures(sv)
        self.assertGreater(f["checkpoints_dropped_total"], 0)
        self.assertEqual(f["conversations_dropped_total"], 0)
        hist, prompt, a = first[-1]
        more = post(sv, prompt + a.text + LINES[3])
        self.assertEqual(more.cache_from, "saved")

    def test_none_kept(self) -> None:
        # No store (--cache-ram 0), or a conversation not kept: none.
        for args, extra in ((["--cache-ram", "0"], {}),
                            ([], {"cache_prompt": False})):
            sv = self.serve(*args)
            hist = OPENER
            for line in LINES[:4]:
                hist += line + post(sv, hist + line, **extra).text
            self.assertEqual(figures(sv)["checkpoints_total"], 0, args)
            self.stopped(sv)
        # A request whose prompt and answer fit the window: going back
        # loses nothing there, so none is kept.
        sv = self.serve()
        short = post(sv, OPENER, 16)
        self.assertLess(short.prompt_tokens + 16, 96)
        self.assertEqual(figures(sv)["checkpoints_total"], 0)

class Chat(Case):
    """Test 3: the same through /v1/chat/completions, on a random-weight
    model of llama.cpp's Llama 3 BPE vocabulary (128,256 tokens) with a
    Llama 3 style template."""

    def chat(self, sv: Serve, msgs: List[dict]) -> dict:
        body = dict(messages=msgs, max_tokens=24, temperature=0)
        status, _, raw = request(sv.addr, "POST", "/v1/chat/completions",
                                 body)
        self.assertEqual(status, 200, raw)
        out = json.loads(raw)
        return dict(text=out["choices"][0]["message"]["content"],
                    **{k: out["timings"][k] for k in ("prompt_n", "cache_n")},
                    cache_from=KINDS[out["timings"]["cache_kind"]],
                    prompt_tokens=out["usage"]["prompt_tokens"])

    def turns(self, sv: Serve, n: int) -> List[Tuple[list, dict]]:
        msgs, out = [{"role": "system", "content": "You tell stories."}], []
        for k in range(n):
            msgs = msgs + [{"role": "user", "content":
                            "Tell me more about Lily, part %d." % k}]
            a = self.chat(sv, msgs)
            out.append((msgs, a))
            msgs = msgs + [{"role": "assistant", "content": a["text"]}]
        return out

    def test_regenerate_and_edit_chat(self) -> None:
        model = vocab_model.write("llama-bpe", TMP.name,
                                  template=vocab_model.LLAMA3)
        args = ["--budget", "64", "--sinks", "4", "--exact", "--threads",
                "1", "-np", "1"]
        sv = Serve(TMP.name, self.evd.url, *args, model=model)
        self.servers.append(sv)
        turns = self.turns(sv, 10)
        # The window has evicted.
        self.assertGreater(turns[-1][1]["prompt_tokens"], 2 * 64)
        msgs, first = turns[-1]
        again = self.chat(sv, msgs)
        self.assertEqual(again["text"], first["text"])
        self.assertEqual(again["cache_from"], "checkpoint")
        self.assertLessEqual(again["prompt_n"], TAIL)
        edited = msgs[:-1] + [{"role": "user", "content": "What did the "
                               "dog say?"}]
        e = self.chat(sv, edited)
        self.assertEqual(e["cache_from"], "checkpoint")
        self.assertLess(e["prompt_n"], 40)
        self.stopped(sv)
        fresh = Serve(TMP.name, self.evd.url, *args, model=model)
        self.servers.append(fresh)
        before = self.turns(fresh, 9)
        self.assertEqual([a["text"] for _, a in before],
                         [a["text"] for _, a in turns[:9]])
        self.assertEqual(self.chat(fresh, edited)["text"], e["text"])
        FIGURES["3 chat"] = (
            "Llama 3 BPE, 10 turns: regenerate %d of %d prompt tokens "
            "decoded, the last message edited %d" % (
                again["prompt_n"], again["prompt_tokens"], e["prompt_n"]))


if __name__ == "__main__":
    unittest.main()
