#!/usr/bin/python3
"""stories260K decoding through evictd, every logit checked (make
e2e-llamacpp runs it after test_positions.py).

The model: ../shared/models/stories260K.gguf beside the repository (as CI
has it; $STORIES_GGUF overrides), Karpathy's TinyStories model (README
beside it): grouped-query attention (8 heads over 4 KV heads), a
SentencePiece vocabulary of 512 with byte fallback, an untied output head,
weights nobody here chose. Without it the tests fail, saying so: never a
skip.

The reference is gguf_lm's model of the file itself (its weights through
the build's gguf-py, its eps and RoPE base from its metadata, float64),
replaying evictd-llama's --dump as test_llamacpp.py does for the byte
model (reference.replay: the window from the README's policy, the
engine's removals and llama.cpp's cache checked against it, every logit
of every pass within TOL): the window, sinks with original and cache
positions, chunked prefill, fork, speculative decoding (the draft: the
model's first four layers, an early exit, written by gguf_lm.derive) and
a rewind (speculative decoding, chunked prefill and fork also with sinks
in cache mode). Controls that must fail: an engine window one wider than
the reference's, a record with one removal moved, the cache-position
record checked as original or unshifted positions, and the model read
with any other layout (Q/K permuted, KV heads tiled) or with the
metadata ignored. The tokenizer, end to end: the
greedy text from BOS is the README's, and the tokens llama.cpp made of a
prompt and printed spell them, piece by piece, through the file's own
token list.
"""

import copy
import os
import unittest
from typing import List, Optional, Tuple

import numpy as np

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import torch  # noqa: E402

from support import generate as gen  # noqa: E402
from support import gguf_lm  # noqa: E402
from support import paths  # noqa: E402
from support import reference as ref  # noqa: E402

TOL = gen.TOL
GGUF = paths.stories_gguf()
# The README's greedy text from BOS (llama.cpp's piece of the first token,
# "\u2581Once", keeps its space).
GREEDY = (b" Once upon a time, there was a little girl named Lily. She loved "
          b"to play outside in the park.")
CACHE = ("--positions", "cache")
BYTE_TOKEN = 6  # llama.cpp's LLAMA_TOKEN_TYPE_BYTE: <0xXX>

MODEL = DRAFT = None
DRAFT_GGUF = ""
PIECES: List[bytes] = []   # each token's text, as llama.cpp prints it
KINDS: List[int] = []      # each token's type (tokenizer.ggml.token_type)

# Our own sentences, long enough for several prompt chunks.
STORY = ("Once upon a time, there was a little dog named Max. Max liked to "
         "run in the big green park with his friend Sue. One day, Sue found "
         "a red ball under a tree. She threw the ball and Max ran very fast "
         "to get it. The ball went into the pond, and Max jumped in with a "
         "splash. Sue laughed and clapped her hands. Max swam back with the "
         "ball in his mouth, wet and happy. Then the sun went down and they "
         "walked home together, tired and glad. Mom gave them warm milk and "
         "a hug.")


def setUpModule() -> None:
    global MODEL, DRAFT, DRAFT_GGUF
    paths.checked_stories()
    gen.set_up()
    gp = gen.gguf_py_dir()
    MODEL = gguf_lm.load(GGUF, gp)
    DRAFT_GGUF = os.path.join(gen.TMP.name, "stories-draft.gguf")
    gguf_lm.derive(GGUF, DRAFT_GGUF, gp, n_layers=4)
    DRAFT = gguf_lm.load(DRAFT_GGUF, gp)
    reader = gguf_lm.import_gguf(gp).GGUFReader(GGUF)
    KINDS.extend(reader.fields["tokenizer.ggml.token_type"].contents())
    for text, kind in zip(reader.fields["tokenizer.ggml.tokens"].contents(),
                          KINDS):
        if kind == BYTE_TOKEN:
            PIECES.append(bytes([int(text[3:5], 16)]))
        elif kind == 1:  # normal: SentencePiece's U+2581 is a space
            PIECES.append(text.replace("\u2581", " ").encode("utf-8"))
        else:  # control and unknown tokens print nothing
            PIECES.append(b"")


def tearDownModule() -> None:
    gen.tear_down()


def spell(tokens: List[int]) -> bytes:
    return b"".join(PIECES[t] for t in tokens)


def sequence(events: List[dict], seq: int = 0) -> List[int]:
    """The target's tokens of a sequence by position, as last computed
    (the generation's last token is sampled, never computed)."""
    toks = {}
    for ev in events:
        if ev["op"] == "pass" and ev["model"] == "target":
            for tk in ev["tokens"]:
                if tk[0] == seq:
                    toks[tk[1]] = tk[2]
    return [toks[p] for p in range(len(toks))]


class Stories(gen.Engine):

    def model_file(self) -> str:
        return GGUF

    def reference_models(self):
        return MODEL, DRAFT

    def story(self, budget: int, n: int, text: str, *args: str,
              sinks: int = 0) -> Tuple[bytes, ref.Result, str]:
        """A checked run: (text, the replay's result, the dump prefix)."""
        out, _, prefix = self.run_engine(
            "--budget", str(budget), "--sinks", str(sinks), "-n", str(n),
            "-p", text, *args)
        return ref.text_of(out), self.check(prefix), prefix

    def last_prefix(self) -> str:
        return os.path.join(gen.TMP.name, "%s-%d" % (self.name, self.runs))

    # -- the scenarios --

    def test_stories_window(self) -> None:
        # About 12 tokens of prompt and 300 generated at budget 32: every
        # step from the 32nd on evicts.
        out, res, prefix = self.story(32, 300, STORY[:51])
        self.assertEqual(res.widest, 33)  # the budget, and the token
        events, _ = ref.load_dump(prefix)
        self.assertGreater(len(sequence(events)), 300)
        gone = sum(len(ev["positions"]) for ev in events
                   if ev["op"] == "remove")
        self.assertGreater(gone, 250)

    def test_stories_sinks(self) -> None:
        out, res, _ = self.story(32, 300, STORY[:51], sinks=4)
        self.assertEqual(res.widest, 33)

    def test_stories_sinks_cache(self) -> None:
        # Cache positions with sinks: a gap above the sinks, every key
        # above it moved down by llama.cpp's K-shift each step. The same
        # record checked as original positions, or with the keys left
        # where they were computed, is far off.
        out, res, prefix = self.story(32, 300, STORY[:51], *CACHE, sinks=4)
        self.assertEqual(res.widest, 33)
        notes = []
        for rope in ("original", "stale"):
            bad = self.verify(prefix, rope=rope)
            self.assertGreater(bad.max_diff, 100 * TOL, bad.summary())
            notes.append("%s %.3g" % (rope, bad.max_diff))
        gen.RESULTS[self.name] += " (checked as %s)" % ", ".join(notes)

    def prefill_chunks(self, prefix: str) -> int:
        events, _ = ref.load_dump(prefix)
        return sum(1 for ev in events
                   if ev["op"] == "step" and len(ev["positions"]) > 1)

    def test_stories_chunked_prefill(self) -> None:
        # The whole story (about 120 tokens) in chunks of 16 at budget 48:
        # the chunks past the budget evict while the prompt goes in.
        out, res, prefix = self.story(48, 60, STORY, "--lookahead", "16")
        self.assertGreaterEqual(self.prefill_chunks(prefix), 6)
        self.assertEqual(res.widest, 48 + 16)

    def test_stories_chunked_prefill_cache(self) -> None:
        out, res, prefix = self.story(48, 60, STORY, "--lookahead", "16",
                                      *CACHE, sinks=4)
        self.assertGreaterEqual(self.prefill_chunks(prefix), 6)
        self.assertEqual(res.widest, 48 + 16)

    def fork(self, *extra: str) -> ref.Result:
        args = ["--budget", "32", "-n", "150", "-p", STORY[:51],
                "--parallel", "4", "--temp", "0.8", "--seed", "7"] + list(
                    extra)
        out, _, prefix = self.run_engine(*args)
        res = self.check(prefix)
        samples = out.split(b"--- sample ")[1:]
        self.assertEqual(len(samples), 4)
        self.assertGreater(len(set(samples)), 1)
        self.assertEqual(res.widest, 33)
        again, _, _ = self.run_engine(*args, dump=False)
        self.assertEqual(again, out)  # the same seed, the same samples
        return res

    def test_stories_fork(self) -> None:
        self.fork()

    def test_stories_fork_sinks_cache(self) -> None:
        self.fork("--sinks", "4", *CACHE)

    def speculate(self, *extra: str) -> None:
        """Drafts from the model's first four layers: some accepted, some
        rejected, both caches replayed; every token is the target's own
        greedy choice given its cache."""
        out, err, prefix = self.run_engine(
            "--budget", "32", "-n", "200", "-p", STORY[:51], "--lookahead",
            "5", "--draft", DRAFT_GGUF, "--draft-n", "4", *extra)
        self.check(prefix)
        events, rows = ref.load_dump(prefix)
        self.assertTrue(any(ev["op"] == "pass" and ev["model"] == "draft"
                            for ev in events))
        accepted = [line for line in err.splitlines() if "accepted" in line]
        self.assertTrue(accepted, err)
        drafts = [int(w) for w in accepted[0].split() if w.isdigit()]
        self.assertGreater(drafts[0], 0, accepted[0])
        self.assertLess(drafts[0], drafts[1], accepted[0])
        # The prompt's last position: the last plain step's, before the
        # first tentative one. The 200 tokens after it were generated (the
        # last one sampled, never computed); positions computed past them
        # were drafts the end cut off.
        steps = [ev for ev in events if ev["op"] == "step"]
        first = max(steps[min(i for i, ev in enumerate(steps)
                              if ev["tentative"]) - 1]["positions"])
        toks = sequence(events)[:first + 200]
        checked, bad = ref.greedy_mismatches(events, rows, toks, first)
        self.assertFalse(bad, bad[:5])
        self.assertGreater(checked, 100)
        gen.RESULTS[self.name] += " (%s)" % accepted[0].split(": ", 1)[1]

    def test_stories_speculative(self) -> None:
        self.speculate()

    def test_stories_speculative_sinks_cache(self) -> None:
        # Both caches in cache mode, with a gap above the sinks: the
        # target's rejected drafts leave the top, the victims shift keys.
        self.speculate("--sinks", "4", *CACHE)

    def test_stories_rewind(self) -> None:
        # After 100 tokens take 20 back and go on with the runner-up: the
        # first 80 generated tokens are plain greedy decoding's, the 81st
        # is not.
        args = ("--budget", "32", "-n", "200", "-p", STORY[:51])
        out, _, prefix = self.run_engine(*args, "--rewind", "100:20")
        self.check(prefix)
        _, _, plain = self.run_engine(*args)
        a = sequence(ref.load_dump(prefix)[0])
        b = sequence(ref.load_dump(plain)[0])
        first = len(b) - 199  # the first generated token's position
        self.assertEqual(a[:first + 80], b[:first + 80])
        self.assertNotEqual(a[first + 80], b[first + 80])

    def test_stories_negative_control(self) -> None:
        # A run at budget 33 checks as budget 33. Checked against budget
        # 32 (an engine whose window is one wider than meant), the rows
        # and the logits must be far off; and a record whose removals say
        # the engine evicted one position late must fail too.
        out, _, prefix = self.run_engine("--budget", "33", "-n", "200", "-p",
                                         STORY[:51])
        self.check(prefix)
        res = self.verify(prefix, budget=32)
        self.assertTrue(res.row_mismatches)
        self.assertTrue(res.removal_mismatches)
        self.assertGreater(res.max_diff, 100 * TOL, res.summary())
        events, rows = ref.load_dump(prefix)
        removes = [ev for ev in events if ev["op"] == "remove"]
        self.assertGreater(len(removes), 100)
        removes[50]["positions"] = [p + 1 for p in removes[50]["positions"]]
        late = ref.replay(events, rows, MODEL, DRAFT)
        self.assertTrue(late.removal_mismatches)
        self.assertTrue(late.row_mismatches)
        gen.RESULTS[self.name] = (
            "budget 33 checked as 32: %d row, %d removal mismatches, max "
            "diff %.3g (%.0f x TOL); a removal moved one up: %d row, %d "
            "removal mismatches" % (
                len(res.row_mismatches), len(res.removal_mismatches),
                res.max_diff, res.max_diff / TOL, len(late.row_mismatches),
                len(late.removal_mismatches)))

    # -- the model and its tokenizer --

    def full_attention(self, model_file: Optional[str] = None,
                       n: int = 200) -> Tuple[bytes, str]:
        """Greedy from BOS with nothing evicted: (text, dump prefix)."""
        args = ["--budget", "4096", "-n", str(n)]
        if model_file:
            args += ["-m", model_file]
        out, _, prefix = self.run_engine(*args)
        return ref.text_of(out), prefix

    def plain_diff(self, model, prefix: str) -> float:
        """The largest difference between llama.cpp's logits of a
        full-attention run and the model's plain causal forward pass."""
        events, rows = ref.load_dump(prefix)
        toks = sequence(events)
        with torch.no_grad():
            want = model(torch.tensor(toks)).numpy()
        return float(np.max(np.abs(rows - want) / np.maximum(1.0,
                                                               np.abs(want))))

    def test_stories_greedy_text(self) -> None:
        # The README's text, which also takes llama.cpp's detokenizer: the
        # printed text is the pieces of the tokens the dump holds (and of
        # the last, sampled from the last row).
        out, prefix = self.full_attention()
        self.assertTrue(out.startswith(GREEDY), out[:200])
        events, rows = ref.load_dump(prefix)
        toks = sequence(events) + [int(np.argmax(rows[-1]))]
        self.assertEqual(spell(toks), out)
        self.check(prefix)

    def test_stories_tokens(self) -> None:
        # llama.cpp's tokenizer on a prompt with words, punctuation and
        # characters the vocabulary has only as bytes: the tokens spell
        # the prompt, after the space SentencePiece puts in front, with
        # merged pieces and byte tokens both among them.
        text = ("Lily ate a cr\u00e8me br\u00fbl\u00e9e \u2603 at the "
                "caf\u00e9!")
        out, res, prefix = self.story(64, 40, text)
        toks = sequence(ref.load_dump(prefix)[0])
        prompt = toks[1:len(toks) - 39]
        self.assertEqual(toks[0], 1)  # BOS
        self.assertEqual(spell(prompt), (" " + text).encode("utf-8"))
        self.assertTrue(any(KINDS[t] == BYTE_TOKEN for t in prompt))
        self.assertTrue(any(len(PIECES[t]) > 2 for t in prompt))
        self.assertTrue(out.startswith(spell(toks[len(toks) - 39:])))

    def test_stories_reference_layout(self) -> None:
        # Full attention: llama.cpp's logits are the reference model's
        # plain forward pass. Read any other way (Q and K permuted as
        # Hugging Face conversions are, or back; each KV head serving the
        # query heads h, h + 4 rather than 2h, 2h + 1), the weights give
        # logits far off: the layout is what the comparison found.
        _, prefix = self.full_attention(n=100)
        right = self.plain_diff(MODEL, prefix)
        self.assertLessEqual(right, TOL)
        notes = []
        for how in ("permuted", "unpermuted", "tiled"):
            wrong = self.plain_diff(misread(MODEL, how), prefix)
            self.assertGreater(wrong, 100 * TOL, how)
            notes.append("%s %.3g" % (how, wrong))
        gen.RESULTS[self.name] = ("full attention, 100 rows: max diff %.2e; "
                                  "misread %s" % (right, ", ".join(notes)))

    def test_stories_metadata(self) -> None:
        # A copy of the file with another RoPE base and RMSNorm eps: the
        # reference reads them (its logits agree with llama.cpp's on the
        # copy), and they matter (the original's are far off).
        path = os.path.join(gen.TMP.name, "stories-meta.gguf")
        gguf_lm.derive(GGUF, path, gen.gguf_py_dir(), rope__freq_base=500.0,
                       attention__layer_norm_rms_epsilon=1e-2)
        other = gguf_lm.load(path, gen.gguf_py_dir())
        self.assertEqual((other.cfg.rope_base, round(other.cfg.norm_eps, 6)),
                         (500.0, 0.01))
        _, prefix = self.full_attention(path, n=100)
        right = self.plain_diff(other, prefix)
        wrong = self.plain_diff(MODEL, prefix)
        self.assertLessEqual(right, TOL)
        self.assertGreater(wrong, 100 * TOL)
        gen.RESULTS[self.name] = ("rope base 500, eps 1e-2: max diff %.2e; "
                                  "with the original's %.3g" % (right, wrong))


class TiledBlock(gguf_lm.GQABlock):
    """The wrong grouping: query head j reads KV head j % n_heads_kv."""

    def qkv_of(self, x, tables):
        c = self.cfg
        b, t, _ = x.shape
        n = self.attn_norm(x)
        group = c.n_heads // c.n_heads_kv
        q = self.wq(n).view(b, t, c.n_heads, c.head_dim)
        k = self.wk(n).view(b, t, c.n_heads_kv, c.head_dim)
        v = self.wv(n).view(b, t, c.n_heads_kv, c.head_dim)
        return (gguf_lm.rope(q, tables),
                gguf_lm.rope(k, tables).repeat(1, 1, group, 1),
                v.repeat(1, 1, group, 1))


def misread(model, how: str):
    """A copy of the model read the wrong way (test_stories_reference_
    layout): Q and K rows permuted as llama.cpp's Hugging Face converter
    permutes them ("permuted") or its inverse ("unpermuted"), or the KV
    heads tiled ("tiled")."""
    m = copy.deepcopy(model)
    c = m.cfg
    for blk in m.blocks:
        if how == "tiled":
            blk.__class__ = TiledBlock
            continue
        for lin, heads in ((blk.wq, c.n_heads), (blk.wk, c.n_heads_kv)):
            w = lin.weight
            half = w.shape[0] // heads // 2
            if how == "permuted":
                w = w.reshape(heads, 2, half, -1).transpose(1, 2)
            else:
                w = w.reshape(heads, half, 2, -1).transpose(1, 2)
            lin.weight.copy_(w.reshape(lin.weight.shape))
    return m


if __name__ == "__main__":
    unittest.main()
