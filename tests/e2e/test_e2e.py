#!/usr/bin/python3
"""A real transformer decoding through evictd, checked against the same
model computed independently.

Every test starts from the real daemon ($EVICTD_BIN, else build/evictd) on
an ephemeral loopback port, decodes with the model of deploy/model (the
committed weights; nothing is trained here) through engine.Engine, one
batch request per decode iteration for all sequences, and compares every
logit the engine computed with engine.reference_logits: the model over the
whole sequence, nothing evicted, under an explicit window mask built by
engine.WindowRef, which never consults evictd. The positions each token
attended to are compared too, exactly. Every sequence starts with BOS at
position 0, which a new session holds from its creation; the text's bytes
start at position 1 (prompt()).

Tolerance (TOL): both sides run the same float32 operations on the same
numbers, but not in the same order or shape: the reference multiplies
[T, d] matrices where the engine multiplies a few rows at a time (BLAS
blocks them differently), and sums attention over positions in position
order where the engine sums over ring slots or pool blocks in storage
order, masked terms contributing exact zeros in both. So each dot product
(length 32 to 344), softmax sum (up to 150 terms) and RMSNorm may differ
by some units in the last place (float32 epsilon 1.2e-7, relative), and
four layers carry that to the logits. We allow |a - b| <= TOL * max(1, |b|)
with TOL = 1e-4, about 840 ulps of a logit of size 1: the largest
difference measured over the ~6,200 positions compared is 2.0e-5
(test_parallel_sampling: a window of 24 with 4 sinks, 4 samples at
temperature 1), 5x below TOL; the other float32 tests measure 6.9e-6 to 1.9e-5.
A real error costs far more (test_window_and_sinks checks that a window
one position wider, or with the other sinks, moves some logit by over
100 x TOL: 0.094 measured). test_float64 runs the same engine and
reference in float64 and finds them equal within 1e-12 (2.5e-14
measured), which shows the float32 differences are rounding and nothing
else. (tests/e2e/test_formulas.py, which make e2e runs first, checks the
model itself against Llama's formulas written out by hand.)

Run: `make e2e`, or `EVICTD_BIN=$PWD/build/evictd /usr/bin/python3
tests/e2e/test_e2e.py -v [Class.test_name]`. E2E_VERBOSE=1 prints every
iteration; E2E_THREADS sets torch's threads (default 1); E2E_WEIGHTS and
E2E_DRAFT_WEIGHTS load other weights (e.g. from train.py --out DIR).
"""

import os
import random
import sys
import time
import unittest
from typing import Dict, List, Optional

# The model is small: one BLAS thread, one torch thread is fastest for its
# few-row products (and keeps the daemon's core free).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import torch  # noqa: E402

import engine as eng  # noqa: E402
from engine import (Engine, PagedStore, RingStore, Seq, Stats,  # noqa: E402
                    WindowRef, Work, reference_logits)
from support.daemon import Daemon, Scratch  # noqa: E402
import model as lm  # noqa: E402
from evictd_client import ConnectionFailed, EvictdClient  # noqa: E402

TOL = 1e-4
TEXT_PATH = lm.HELD_OUT_TEXT  # held out of training

# The committed weights (E2E_WEIGHTS, E2E_DRAFT_WEIGHTS: others, e.g. a
# fresh train.py --out DIR).
WEIGHTS = os.environ.get("E2E_WEIGHTS") or lm.WEIGHTS
DRAFT_WEIGHTS = os.environ.get("E2E_DRAFT_WEIGHTS") or lm.DRAFT_WEIGHTS

TMP: Optional[Scratch] = None
MAIN: Optional[Daemon] = None
MODEL: Optional[lm.ByteLM] = None
DRAFT: Optional[lm.ByteLM] = None
STATS = Stats()
RESULTS: Dict[str, str] = {}


def setUpModule() -> None:
    global TMP, MAIN, MODEL, DRAFT
    torch.set_num_threads(int(os.environ.get("E2E_THREADS", "1")))
    if not os.path.isfile(TEXT_PATH):
        raise RuntimeError("%s is missing (Debian's base-files has it)"
                           % TEXT_PATH)
    MODEL = lm.load(WEIGHTS)
    DRAFT = lm.load(DRAFT_WEIGHTS)
    TMP = Scratch("evictd-e2e-")
    MAIN = TMP.daemon


def tearDownModule() -> None:
    if TMP is not None:
        TMP.close()
    if STATS.rows:
        print("\nper iteration, by test and phase (forward: model.step; "
              "evictd rtt: the batch request's round trip; engine: the "
              "loop's own bookkeeping):", file=sys.stderr)
        print(STATS.summary(by=lambda r: "%s/%s" % (r.test, r.phase)),
              file=sys.stderr)
        print("\nall tests, by phase:", file=sys.stderr)
        print(STATS.summary(), file=sys.stderr)
    for name, line in sorted(RESULTS.items()):
        print("%-24s %s" % (name, line), file=sys.stderr)


def prompt(i: int, n: int) -> List[int]:
    """n tokens: BOS (position 0, where every sequence starts), then n - 1
    bytes of the held-out text, a different place for each i."""
    with open(TEXT_PATH, "rb") as f:
        text = f.read()
    start = (i * 997) % (len(text) - n)
    return [lm.BOS] + list(text[start:start + n - 1])


def greedy(row, seq=None) -> int:
    return int(torch.argmax(row))


class Case(unittest.TestCase):
    """A client of the shared daemon, an engine per test, session ids
    unique to the test."""

    model: lm.ByteLM

    def setUp(self) -> None:
        self.client = EvictdClient(MAIN.url, timeout=30)
        self.addCleanup(self.client.close)
        self.name = self._testMethodName[len("test_"):]
        self.max_diff = 0.0
        self.compared = 0

    def sid(self, name: str) -> str:
        return "e2e.%s.%s" % (self.name, name)

    def engine(self, store=None, model=None, client=None, **kw) -> Engine:
        model = model or MODEL
        store = store or RingStore(model, model.embed.weight.dtype)
        return Engine(model, client or self.client, store, self.name, STATS,
                      **kw)

    # -- checks --

    def check(self, seq: Seq, ref: WindowRef,
              model: Optional[lm.ByteLM] = None, tol: float = TOL) -> None:
        """Every position the engine computed for seq: what it attended to
        equals the reference window's, and its logits equal the
        reference's within tol."""
        model = model or MODEL
        want = reference_logits(model, seq.tokens, ref.seen)
        self.assertEqual(sorted(seq.logits), list(range(len(seq.tokens))),
                         "%s: positions without logits" % seq.sid)
        for p in range(len(seq.tokens)):
            self.assertEqual(seq.seen[p], ref.seen[p],
                             "%s: position %d attended to %s, the window "
                             "holds %s" % (seq.sid, p, seq.seen[p],
                                           ref.seen[p]))
            a, b = seq.logits[p].double(), want[p].double()
            err = float(((a - b).abs() / b.abs().clamp(min=1)).max())
            self.max_diff = max(self.max_diff, err)
            self.compared += 1
            self.assertLessEqual(err, tol, "%s: logits at %d differ by %.3g"
                                 % (seq.sid, p, err))

    def report(self, extra: str = "") -> None:
        RESULTS[self.name] = ("%d positions compared, max diff %.2e%s"
                              % (self.compared, self.max_diff,
                                 ("; " + extra) if extra else ""))

    # -- drivers --

    def decode(self, e: Engine, seqs: List[Seq], prompts: List[List[int]],
               steps: int, chunk: Optional[int] = None,
               pick=greedy) -> None:
        """Prefills every sequence (in requests of `chunk` positions, one
        batch per iteration for all), then decodes `steps` tokens each,
        one batch per iteration. pick(row, seq) chooses the next token."""
        chunk = chunk or max(len(p) for p in prompts)
        done = [0] * len(seqs)
        last: Dict[str, torch.Tensor] = {}
        while any(d < len(p) for d, p in zip(done, prompts)):
            works = []
            for i, (s, p) in enumerate(zip(seqs, prompts)):
                if done[i] < len(p):
                    n = min(chunk, len(p) - done[i])
                    works.append(Work(s, list(range(done[i], done[i] + n)),
                                      p[done[i]:done[i] + n]))
                    done[i] += n
            out = e.iterate(works, "prefill")
            last.update({sid: lg[-1] for sid, lg in out.items()})
        for _ in range(steps):
            works = []
            for s in seqs:
                tok = pick(last[s.sid], s)
                works.append(Work(s, [len(s.tokens)], [tok]))
            out = e.iterate(works, "decode")
            last.update({sid: lg[-1] for sid, lg in out.items()})

    def ref_of(self, seq: Seq) -> WindowRef:
        """The reference window of a sequence decoded in position order."""
        ref = WindowRef(seq.budget, seq.sinks)
        for p in range(1, len(seq.tokens)):
            ref.append(p)
        return ref

    # -- the scenarios --


class WindowTest(Case):

    def test_window_and_sinks(self) -> None:
        """Four sequences in one batch per iteration: plain windows and 4
        sinks, lookahead 1, 2 and 4, prompts longer and shorter than the
        budget; then a negative control: a window one position wider (or
        without sinks) moves the logits far beyond TOL."""
        e = self.engine()
        seqs = [e.add(Seq(self.sid("w16"), 16)),
                e.add(Seq(self.sid("s16"), 16, sinks=4)),
                e.add(Seq(self.sid("s40"), 40, sinks=4, lookahead=4)),
                e.add(Seq(self.sid("w8"), 8, lookahead=2))]
        prompts = [prompt(i, n) for i, n in enumerate((30, 12, 50, 20))]
        self.decode(e, seqs, prompts, 100)
        refs = [self.ref_of(s) for s in seqs]
        for s, r in zip(seqs, refs):
            self.check(s, r)
        # Negative control: the tolerance tells a window off by one apart.
        gaps = []
        for s in seqs:
            for budget, sinks in ((s.budget + 1, s.sinks),
                                  (s.budget, 0 if s.sinks else 4)):
                wrong = WindowRef(budget, sinks)
                for p in range(1, len(s.tokens)):
                    wrong.append(p)
                lg = reference_logits(MODEL, s.tokens, wrong.seen)
                diff = max(float(((s.logits[p] - lg[p]).abs()
                                  / lg[p].abs().clamp(min=1)).max())
                           for p in range(len(s.tokens)))
                gaps.append(diff)
        self.assertGreater(min(gaps), 100 * TOL)
        self.report("a window one off or with other sinks differs by >= "
                    "%.3g" % min(gaps))

    def test_budget_one(self) -> None:
        """Budget 1: each token sees the one before it and itself."""
        e = self.engine()
        seqs = [e.add(Seq(self.sid("a"), 1)),
                e.add(Seq(self.sid("b"), 1, lookahead=3))]
        self.decode(e, seqs, [prompt(5, 10), prompt(6, 7)], 60)
        for s in seqs:
            self.check(s, self.ref_of(s))
            for p in range(1, len(s.tokens)):
                self.assertEqual(s.seen[p], (p - 1, p))
        self.report()

    def test_budget_above_length(self) -> None:
        """A budget larger than the sequence: nothing is evicted and the
        logits equal full causal attention's."""
        e = self.engine()
        seqs = [e.add(Seq(self.sid("a"), 1000, lookahead=8)),
                e.add(Seq(self.sid("b"), 1000, sinks=4))]
        self.decode(e, seqs, [prompt(7, 40), prompt(8, 25)], 110)
        for s in seqs:
            self.check(s, self.ref_of(s))
            full = MODEL(torch.tensor(s.tokens))  # causal mask
            for p in range(len(s.tokens)):
                self.assertEqual(s.seen[p], tuple(range(p + 1)))
                err = float(((s.logits[p] - full[p]).abs()
                             / full[p].abs().clamp(min=1)).max())
                self.assertLessEqual(err, TOL)
        view = self.client.get(seqs[0].sid)
        self.assertEqual(view.kept, list(range(len(seqs[0].tokens))))
        self.report()

    def test_chunked_prefill(self) -> None:
        """Prompts of 150 bytes, budget 24, lookahead 16, prefilled in
        requests of 64 positions: each request is 4 sub-steps (4 passes),
        evicts within itself, and reuses in a later sub-step the slots of
        an earlier one's victims."""
        e = self.engine()
        seqs = [e.add(Seq(self.sid("s4"), 24, sinks=4, lookahead=16)),
                e.add(Seq(self.sid("w"), 24, lookahead=16))]
        before = len(STATS.rows)
        self.decode(e, seqs, [prompt(9, 150), prompt(10, 150)], 40,
                    chunk=64)
        prefill = [r for r in STATS.rows[before:] if r.phase == "prefill"]
        self.assertEqual([r.tokens for r in prefill], [128, 128, 44])
        for s in seqs:
            self.check(s, self.ref_of(s))
        self.report("prefill requests of 64 positions = 4 passes of 16")

    def test_float64(self) -> None:
        """The engine and the reference in float64 agree to 1e-12: the
        float32 differences are rounding only."""
        model64 = lm.load(WEIGHTS).double()
        e = self.engine(model=model64)
        seqs = [e.add(Seq(self.sid("s"), 12, sinks=4, lookahead=4)),
                e.add(Seq(self.sid("w"), 20, lookahead=2))]
        self.decode(e, seqs, [prompt(11, 30), prompt(12, 25)], 40)
        for s in seqs:
            self.check(s, self.ref_of(s), model=model64, tol=1e-12)
        self.report()


class WorkflowTest(Case):

    def test_speculative(self) -> None:
        """Speculative decoding: drafts from the small draft model (4 per
        pass), verified by the target in one tentative pass (the target's
        own token first, then the drafts), partially accepted with the next
        pass's commit. The text equals plain greedy decoding's exactly and
        commits strictly increase."""
        k, steps = 4, 100
        e = self.engine()
        cfgs = [("a", 32, 4), ("b", 16, 0), ("c", 64, 0)]
        seqs = [e.add(Seq(self.sid(n), b, sinks=s, lookahead=k + 1))
                for n, b, s in cfgs]
        prompts = [prompt(13 + i, 40) for i in range(len(seqs))]
        self.decode(e, seqs, prompts, 0)
        target = {s.sid: len(p) + steps for s, p in zip(seqs, prompts)}
        nxt = {s.sid: greedy(s.logits[len(s.tokens) - 1]) for s in seqs}
        start = {s.sid: len(s.tokens) for s in seqs}  # next position
        commit: Dict[str, Optional[int]] = {s.sid: None for s in seqs}
        commits: Dict[str, List[int]] = {s.sid: [] for s in seqs}
        accepted = rejected = partial = passes = 0
        active, closing = list(seqs), []
        while active or closing:
            works = []
            if active:
                t0 = time.perf_counter()
                drafts = {s.sid: self.draft(s.tokens[:start[s.sid]]
                                            + [nxt[s.sid]], k)
                          for s in active}
                STATS.add(eng.Iteration(self.name, "draft", len(active),
                                        k * len(active), 0.0,
                                        time.perf_counter() - t0, 0.0))
            for s in active:
                p = start[s.sid]
                works.append(Work(s, list(range(p, p + k + 1)),
                                  [nxt[s.sid]] + drafts[s.sid],
                                  tentative=True, commit=commit[s.sid]))
            # A sequence whose last pass reached its length commits it with
            # the others' next pass (a commit-only item).
            works += [Work(s, [], [], commit=commit[s.sid]) for s in closing]
            closing = []
            out = e.iterate(works, "verify" if active else "commit")
            passes += bool(active)
            still = []
            for s in active:
                lg, p0 = out[s.sid], start[s.sid]
                m = 0
                while m < k and drafts[s.sid][m] == greedy(lg[m]):
                    m += 1
                accepted += m
                rejected += k - m
                partial += 0 < m < k
                c = p0 + m  # the target's token and m drafts accepted
                if commits[s.sid]:
                    self.assertGreater(c, commits[s.sid][-1])
                commits[s.sid].append(c)
                commit[s.sid], start[s.sid] = c, c + 1
                nxt[s.sid] = greedy(lg[m])
                (still if c + 1 < target[s.sid] else closing).append(s)
            active = still
        # Plain greedy decoding of the same prompts, one token per request.
        plain = [e.add(Seq(s.sid + ".plain", s.budget, sinks=s.sinks))
                 for s in seqs]
        self.decode(e, plain, prompts, steps + k)
        for s, g in zip(seqs, plain):
            n = len(s.tokens)
            self.assertEqual(s.tokens, g.tokens[:n],
                             "%s: speculative text differs from greedy"
                             % s.sid)
            view = self.client.get(s.sid)
            self.assertEqual(view.tentative, [])
            self.assertEqual(view.newest, n - 1)
            self.check(s, self.ref_of(s))
            self.check(g, self.ref_of(g))
        self.assertGreater(accepted, 0)
        self.assertGreater(rejected, 0)
        self.assertGreater(partial, 0)
        self.report("%d verify passes, %d drafts accepted, %d rejected, %d "
                    "passes partially accepted; text = greedy's"
                    % (passes, accepted, rejected, partial))

    def draft(self, tokens: List[int], k: int) -> List[int]:
        """k greedy tokens of the draft model after tokens (BOS and the
        last 127 others, recomputed each time: the draft model is tiny)."""
        ctx = list(tokens[:1]) + list(tokens[1:][-127:])
        out = []
        with torch.no_grad():
            for _ in range(k):
                lg = DRAFT(torch.tensor(ctx))
                t = greedy(lg[-1])
                out.append(t)
                ctx.append(t)
        return out

    def test_parallel_sampling(self) -> None:
        """Fork after the prompt into 4 samples (the parent and 3 children,
        each with a copy of the KV cache), sampled at temperature 1 with
        their own seeds: they diverge, and each agrees with its own
        reference."""
        e = self.engine()
        parent = e.add(Seq(self.sid("p"), 24, sinks=4, lookahead=8))
        self.decode(e, [parent], [prompt(20, 40)], 0)
        samples = [parent] + [e.fork(parent, self.sid("p~%d" % i),
                                     self.client) for i in (1, 2, 3)]
        gens = {s.sid: torch.Generator().manual_seed(i)
                for i, s in enumerate(samples)}
        last = {s.sid: s.logits[39] for s in samples}

        def sample(row, s):
            probs = torch.softmax(row.double(), -1)
            return int(torch.multinomial(probs, 1, generator=gens[s.sid]))

        for _ in range(80):
            works = [Work(s, [len(s.tokens)], [sample(last[s.sid], s)])
                     for s in samples]
            out = e.iterate(works, "decode")
            last = {sid: lg[-1] for sid, lg in out.items()}
        texts = [tuple(s.tokens[40:]) for s in samples]
        self.assertEqual(len(set(texts)), 4, "the samples did not diverge")
        for s in samples:
            self.assertEqual(s.tokens[:40], parent.tokens[:40])
            self.check(s, self.ref_of(s))
        self.report("4 distinct samples, first bytes %s"
                    % [lm.decode(t[:12]) for t in texts])

    def test_truncate(self) -> None:
        """Truncate and regenerate: within the window (the kept set shrinks
        to the sinks and 10 positions), below the window (only the sinks
        are left), and into the sinks (pinned positions removed, the next
        ones pinned again). The regenerated logits equal a fresh decode
        from that point with the kept set evictd reports."""
        e = self.engine()
        a = e.add(Seq(self.sid("a"), 20, sinks=4, lookahead=4))
        b = e.add(Seq(self.sid("b"), 12, sinks=4))
        ra, rb = WindowRef(20, 4), WindowRef(12, 4)
        seqs, refs = [a, b], {a.sid: ra, b.sid: rb}
        self.decode(e, seqs, [prompt(30, 30), prompt(31, 20)], 60)
        for s in seqs:
            for p in range(1, len(s.tokens)):
                refs[s.sid].append(p)
        kept, pending = [], {}
        for frm_a, frm_b in ((80, 76), (50, 2)):
            for s, frm in ((a, frm_a), (b, frm_b)):
                # The token at frm is replaced by the second-best guess.
                second = int(torch.topk(s.logits[frm - 1], 2).indices[1])
                e.truncate(s, frm, self.client)
                refs[s.sid].truncate(frm)
                view = self.client.get(s.sid)
                self.assertEqual(view.kept, refs[s.sid].held)
                self.assertEqual(view.newest, frm - 1)
                kept.append(view.kept)
                pending[s.sid] = second
            works = [Work(s, [len(s.tokens)], [pending[s.sid]])
                     for s in seqs]
            out = e.iterate(works, "decode")
            last = {sid: lg[-1] for sid, lg in out.items()}
            for _ in range(30):
                works = [Work(s, [len(s.tokens)], [greedy(last[s.sid])])
                         for s in seqs]
                out = e.iterate(works, "decode")
                last = {sid: lg[-1] for sid, lg in out.items()}
            for s in seqs:
                r = refs[s.sid]
                for p in range(frm_a if s is a else frm_b, len(s.tokens)):
                    r.append(p)
                self.check(s, r)
        self.assertEqual(kept[0], [0, 1, 2, 3] + list(range(74, 80)))
        self.assertEqual(kept[1], [0, 1, 2, 3] + list(range(72, 76)))
        self.assertEqual(kept[2], [0, 1, 2, 3])
        self.assertEqual(kept[3], [0, 1])
        self.report("kept after each truncation: %s" % "; ".join(
            str(k) for k in kept))

    def test_paged(self) -> None:
        """A paged cache: page size 16, one pool of 16 blocks for 24
        sequences of budget 48 (24 x 3 = 72 blocks' worth of window, 24 x
        about 10 = 240 without eviction). A sequence is admitted when the
        pool can hold its worst case beside the others' (continuous
        batching: prefills join the running decodes' iteration); blocks are
        taken on pages_new and pages_transient before a pass and returned
        on pages_freed and pages_transient after it, as the answers say
        (the engine checks, after every request, that no block leaked and
        none still in use was freed). The pool never overflows, ends
        empty, and every logit agrees. (These prompts are too short to
        empty a page within their request: test_paged_transient makes
        transient pages.)"""
        pool, page = 16, 16
        store = PagedStore(MODEL, torch.float32, pool, page)
        e = self.engine(store=store)
        rng = random.Random(5)
        waiting = []
        for i in range(24):
            sinks = 16 if i % 2 else 0
            s = Seq(self.sid("q%02d" % i), 48, sinks=sinks, page_size=page)
            waiting.append((s, prompt(40 + i, rng.randint(16, 64)),
                            rng.randint(60, 100)))

        def need(s: Seq, plen: int) -> int:
            def span(n: int) -> int:  # pages n consecutive positions span
                return -(-(n - 1) // page) + 1
            steady = s.sinks // page + span(s.budget - s.sinks + 1)
            return max(steady, -(-plen // page))

        running: List[tuple] = []
        finished = []
        last: Dict[str, torch.Tensor] = {}
        reserved = 0
        while waiting or running:
            works = []
            while waiting and reserved + need(waiting[0][0],
                                              len(waiting[0][1])) <= pool:
                s, p, n = waiting.pop(0)
                reserved += need(s, len(p))
                e.add(s)
                running.append((s, p, n))
                works.append(Work(s, list(range(len(p))), p))
            fresh = {w.seq.sid for w in works}
            for s, p, n in running:
                if s.sid not in fresh:
                    works.append(Work(s, [len(s.tokens)],
                                      [greedy(last[s.sid])]))
            out = e.iterate(works)
            last.update({sid: lg[-1] for sid, lg in out.items()})
            self.assertLessEqual(store.in_use, pool)
            for s, p, n in list(running):
                if len(s.tokens) >= len(p) + n:
                    view = self.client.get(s.sid)
                    self.assertEqual(view.pages, sorted(s.blocks))
                    e.finish(s, self.client)
                    reserved -= need(s, len(p))
                    running.remove((s, p, n))
                    finished.append(s)
        self.assertEqual(store.in_use, 0)
        store.audit()
        self.assertLessEqual(store.peak, pool)
        for s in finished:
            self.check(s, self.ref_of(s))
        self.report("pool of %d blocks, peak %d in use, %d allocations "
                    "(%d transient) for %d sequences"
                    % (pool, store.peak, store.allocations, store.transient,
                       len(finished)))

    def test_paged_transient(self) -> None:
        """Requests far longer than the budget on a paged cache: page size
        4, budgets of 6 (with 0 or 2 sinks, lookahead 1 or 3), prompts of
        30 to 45 positions sent in chunks of 16, then decoding. Each chunk
        writes pages it also evicts; evictd lists them in pages_transient
        and the engine, following the three lists blindly, allocates them
        for the pass and frees them after it. After every iteration each
        sequence has blocks for exactly the pages the daemon's view lists,
        the pool adds up (engine.PagedStore.audit), and at the end it is
        empty; the logits agree with the reference. Includes the issue's
        example: budget 3, page size 2, positions 0..7 in one request
        (pages 0 and 1 transient, 2 and 3 new)."""
        page = 4
        store = PagedStore(MODEL, torch.float32, 64, page)
        e = self.engine(store=store)
        seqs = [e.add(Seq(self.sid("t%d" % i), 6, sinks=sinks,
                          lookahead=look, page_size=page))
                for i, (sinks, look) in enumerate(((0, 1), (2, 1), (0, 3),
                                                   (2, 3)))]
        prompts = [prompt(70 + i, 30 + 5 * i) for i in range(len(seqs))]
        done = [0] * len(seqs)
        last: Dict[str, torch.Tensor] = {}
        counts = []
        while any(d < len(p) for d, p in zip(done, prompts)):
            works = []
            for i, (s, p) in enumerate(zip(seqs, prompts)):
                if done[i] < len(p):
                    n = min(16, len(p) - done[i])
                    works.append(Work(s, list(range(done[i], done[i] + n)),
                                      p[done[i]:done[i] + n]))
                    done[i] += n
            before = store.transient
            out = e.iterate(works, "prefill")
            counts.append(store.transient - before)
            last.update({sid: lg[-1] for sid, lg in out.items()})
            for s in seqs:
                self.assertEqual(self.client.get(s.sid).pages,
                                 sorted(s.blocks))
        for _ in range(20):
            works = [Work(s, [len(s.tokens)], [greedy(last[s.sid])])
                     for s in seqs]
            out = e.iterate(works, "decode")
            last.update({sid: lg[-1] for sid, lg in out.items()})
        for s in seqs:
            self.assertEqual(self.client.get(s.sid).pages, sorted(s.blocks))
        # Every prefill iteration has a chunk of 13 positions or more, over
        # twice the budget: it evicts whole pages of its own.
        self.assertTrue(all(c > 0 for c in counts), counts)
        # The example, through the engine: BOS at 0, then 1..7.
        store2 = PagedStore(MODEL, torch.float32, 8, 2)
        e2 = self.engine(store=store2)
        ex = e2.add(Seq(self.sid("example"), 3, page_size=2))
        e2.iterate([Work(ex, list(range(8)), prompt(90, 8))], "prefill")
        self.assertEqual(store2.transient, 2)
        self.assertEqual(sorted(ex.blocks), [2, 3])
        self.assertEqual(store2.in_use, 2)
        for s in seqs + [ex]:
            self.check(s, self.ref_of(s))
        for s in seqs:
            e.finish(s, self.client)
        e2.finish(ex, self.client)
        self.assertEqual((store.in_use, store2.in_use), (0, 0))
        store.audit()
        store2.audit()
        self.report("%d transient blocks over %d prefill iterations %s, "
                    "peak %d of %d blocks"
                    % (store.transient, len(counts), counts, store.peak,
                       store.blocks))


class KillTest(Case):

    def test_kill_and_restart(self) -> None:
        """evictd with --state-dir and --fsync always, SIGKILLed twice
        mid-generation and restarted on the same port and state directory:
        once right after it answered a batch whose answer the loop then
        loses (the loop resends it and gets "replayed": true and the same
        answers), once before a batch reaches it (the resend is applied
        afresh). Tokens and logits equal an uninterrupted run's exactly."""
        state = os.path.join(TMP.name, "state")
        d = Daemon.started(TMP.name, "--state-dir", state, "--fsync", "always")
        self.addCleanup(d.stop)
        client = EvictdClient(d.url, timeout=30)
        self.addCleanup(client.close)
        lost: Dict[int, list] = {}

        class Flaky:
            """Kills the daemon at two chosen requests."""
            calls = 0

            def batch(self, items):
                self.calls += 1
                if self.calls == 15:
                    results = client.batch(items)
                    d.kill()
                    lost[15] = results
                    raise ConnectionFailed("the answer was lost")
                if self.calls == 31:
                    d.kill()
                return client.batch(items)

        def run(e: Engine, tag: str) -> List[Seq]:
            seqs = [e.add(Seq(self.sid(tag + ".a"), 24, sinks=4,
                              lookahead=8)),
                    e.add(Seq(self.sid(tag + ".b"), 16, lookahead=8)),
                    e.add(Seq(self.sid(tag + ".c"), 40, sinks=4))]
            self.decode(e, seqs, [prompt(60, 50), prompt(61, 30),
                                  prompt(62, 45)], 60, chunk=16)
            return seqs

        calm = run(self.engine(client=client), "calm")
        restarts = []
        e = self.engine(client=Flaky(), on_failure=lambda: (
            restarts.append(time.monotonic()), d.restart()))
        hurt = run(e, "hurt")
        self.assertEqual(d.starts, 3)
        self.assertEqual(len(e.resent), 2)
        (items1, res1), (items2, res2) = e.resent
        self.assertTrue(all(r.replayed for r in res1))
        for a, b in zip(lost[15], res1):
            a.replayed = b.replayed = False
            self.assertEqual(a, b)
        self.assertFalse(any(r.replayed for r in res2))
        for a, b in zip(calm, hurt):
            self.assertEqual(a.tokens, b.tokens)
            self.assertEqual(sorted(a.logits), sorted(b.logits))
            for p in a.logits:
                self.assertTrue(torch.equal(a.logits[p], b.logits[p]))
            self.assertEqual(client.get(a.sid).kept, client.get(b.sid).kept)
            self.check(b, self.ref_of(b))
        self.report("2 kills; the lost answer replayed (%d items), the "
                    "unsent request applied on resend; output identical"
                    % len(res1))


if __name__ == "__main__":
    unittest.main()
