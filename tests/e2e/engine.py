"""A small model server that decodes through evictd, and its reference.

The engine keeps each sequence's KV cache per layer, asks evictd (one batch
request per decode iteration for all sequences, through the project's
Python client) where each new token goes, writes the token's key and value
there and attends over the entries the window holds for it. Two stores:

* ``RingStore``: per sequence and layer, budget + lookahead slots (a
  llama.cpp-like cell engine). Slots come from evictd's ``slots``; a
  multi-token request runs as evictd's sub-steps, in order, since a later
  sub-step reuses the slots of the earlier one's victims.
* ``PagedStore``: a block pool shared by all sequences (vLLM-like), blocks
  of ``page_size`` entries, a block table per sequence indexed by page
  ``p // page_size``. The engine follows the answer's three lists blindly:
  blocks are taken for ``pages_new`` and ``pages_transient`` (pages the
  request writes and also empties) before the pass and returned for
  ``pages_freed`` and ``pages_transient`` after it; it computes no page set
  of its own. It checks that this never leaks a block (after each request
  a sequence has a block for exactly the pages its held positions are on,
  and the pool's free list and block tables partition the pool) and never
  frees one still in use (a freed page holds no held position; every entry
  a pass writes or reads has a block). A whole request is one pass.

The engine follows each answer as evictd applies it (the commit: dropped
drafts, then victims down to the budget; then each sub-step: its
placements, then, unless tentative, victims down to the budget) and refuses
a write into a slot (or block entry) a held position still occupies. The
mask of a token p is what the window would hold just before p had the
positions been stepped one at a time, plus p (deploy/ENGINES.md): the
pinned positions held below p (slots below ``sinks``), the newest
``budget - pinned`` other held positions below p, and p. Nothing here
recomputes the policy: which positions are held, pinned and evicted comes
from evictd's answers alone.

``WindowRef`` is the independent reference of the policy over positions
(never consulting evictd), and ``reference_logits`` the independent
computation: the model's full forward over the whole sequence, every
position's key kept (nothing evicted), with an explicit mask over positions
built from ``WindowRef``.
"""

import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Set, Tuple

import torch

import model as lm
from evictd_client import (ConnectionFailed, EvictdError, StepBatch,
                           StepResult)


class Violation(AssertionError):
    """evictd's answers would make the engine read or write the wrong KV
    entries (or the engine's own books disagree with the daemon's)."""


class PoolExhausted(Violation):
    """The paged engine needed a block and the pool had none."""


# ---- the mask rule and the reference policy ----------------------------------


def visible(held: Dict[int, int], p: int, budget: int, sinks: int
            ) -> List[int]:
    """The positions token p attends to, given the positions held (position
    -> ring slot) when p is computed: pinned ones (slot < sinks) below p,
    the newest budget - pinned others below p, and p."""
    below = sorted(q for q in held if q < p)
    pinned = [q for q in below if held[q] < sinks]
    rest = [q for q in below if held[q] >= sinks]
    room = budget - len(pinned)
    keep = rest[len(rest) - room:] if 0 < room < len(rest) else (
        rest if room > 0 else [])
    return pinned + keep + [p]


class WindowRef:
    """The sliding window over positions, one position at a time, written
    from the README's policy and nothing else: the first `sinks` positions
    appended while fewer are pinned are pinned; after each append the
    oldest unpinned positions go until at most `budget` remain; truncation
    removes every position from P on. Starts holding position 0."""

    def __init__(self, budget: int, sinks: int = 0) -> None:
        self.budget, self.sinks = budget, sinks
        self.held: List[int] = []
        self.pinned: Set[int] = set()
        self.seen: Dict[int, Tuple[int, ...]] = {}
        self._append(0, record=True)

    def _append(self, p: int, record: bool) -> None:
        if record:
            self.seen[p] = tuple(self.held) + (p,)
        self.held.append(p)
        if len(self.pinned) < self.sinks:
            self.pinned.add(p)
        while len(self.held) > self.budget:
            victim = next(q for q in self.held if q not in self.pinned)
            self.held.remove(victim)

    def append(self, p: int) -> Tuple[int, ...]:
        """Steps p; returns what p attends to (the held before, and p)."""
        if self.held and p <= self.held[-1]:
            raise ValueError("positions must increase")
        self._append(p, record=True)
        return self.seen[p]

    def truncate(self, frm: int) -> None:
        self.held = [q for q in self.held if q < frm]
        self.pinned = {q for q in self.pinned if q < frm}
        for q in [q for q in self.seen if q >= frm]:
            del self.seen[q]


def window_mask(rows: Dict[int, Sequence[int]], length: int) -> torch.Tensor:
    """A [length, length] mask: row p allows the positions rows[p] (rows
    not given allow only themselves)."""
    m = torch.eye(length, dtype=torch.bool)
    for p, vis in rows.items():
        m[p, list(vis)] = True
    return m


def reference_logits(model: lm.ByteLM, tokens: Sequence[int],
                     rows: Dict[int, Sequence[int]]) -> torch.Tensor:
    """The model over the whole sequence at once (every position's key and
    value computed and kept) with the window mask over positions:
    logits [len(tokens), model.VOCAB]."""
    t = torch.tensor(list(tokens), dtype=torch.long)
    with torch.no_grad():
        return model(t, mask=window_mask(rows, len(tokens)))


# ---- timing ----------------------------------------------------------------


@dataclass
class Iteration:
    test: str
    phase: str
    sequences: int
    tokens: int
    evictd: float    # seconds: the batch request's round trip
    forward: float   # seconds: model.step calls
    engine: float    # seconds: the engine's own bookkeeping (masks, books)


class Stats:
    """Per-iteration figures of every engine, printed as a summary."""

    def __init__(self) -> None:
        self.rows: List[Iteration] = []
        self.verbose = bool(os.environ.get("E2E_VERBOSE"))

    def add(self, row: Iteration) -> None:
        self.rows.append(row)
        if self.verbose:
            print("  %-14s %-8s seqs %2d tokens %4d  evictd %7.3f ms  "
                  "forward %7.3f ms  engine %7.3f ms"
                  % (row.test, row.phase, row.sequences, row.tokens,
                     row.evictd * 1e3, row.forward * 1e3, row.engine * 1e3),
                  file=sys.stderr)

    def summary(self, rows: Optional[List[Iteration]] = None,
                by: Callable[[Iteration], str] = lambda r: r.phase) -> str:
        rows = self.rows if rows is None else rows
        groups: Dict[str, List[Iteration]] = {}
        for r in rows:
            groups.setdefault(by(r), []).append(r)
        out = ["%-22s %6s %6s %6s | %17s | %17s | %17s | %6s" % (
            "", "iters", "seqs", "tokens", "forward ms",
            "evictd rtt ms", "engine ms", "evictd")]
        out.append("%-22s %6s %6s %6s | %8s %8s | %8s %8s | %8s %8s | %6s"
                   % ("", "", "mean", "mean", "mean", "median", "mean",
                      "median", "mean", "median", "share"))
        for name in sorted(groups):
            g = groups[name]
            f = [r.forward * 1e3 for r in g]
            e = [r.evictd * 1e3 for r in g]
            b = [r.engine * 1e3 for r in g]
            share = sum(e) / (sum(e) + sum(f) + sum(b))
            out.append("%-22s %6d %6.1f %6.1f | %8.3f %8.3f | %8.3f %8.3f "
                       "| %8.3f %8.3f | %5.1f%%"
                       % (name, len(g),
                          statistics.mean(r.sequences for r in g),
                          statistics.mean(r.tokens for r in g),
                          statistics.mean(f), statistics.median(f),
                          statistics.mean(e), statistics.median(e),
                          statistics.mean(b), statistics.median(b),
                          100 * share))
        return "\n".join(out)


# ---- sequences and stores ----------------------------------------------------


class Seq:
    """One sequence: its session, tokens and the engine's books."""

    def __init__(self, sid: str, budget: int, sinks: int = 0,
                 lookahead: int = 1, page_size: int = 0) -> None:
        self.sid = sid
        self.budget, self.sinks = budget, sinks
        self.lookahead, self.page_size = lookahead, page_size
        self.tokens: List[int] = []        # by position (drafts included)
        self.held: Dict[int, int] = {}     # position -> ring slot
        self.drafts: Set[int] = set()
        self.created = False
        self.logits: Dict[int, torch.Tensor] = {}  # last computed, by pos
        self.seen: Dict[int, Tuple[int, ...]] = {}  # what each pos attended
        self.computed = 0                  # token computations
        # RingStore: this sequence's first entry; PagedStore: page -> block.
        self.base = -1
        self.blocks: Dict[int, int] = {}

    @property
    def ring(self) -> int:
        return self.budget + self.lookahead

    @property
    def newest(self) -> int:
        return max(self.held) if self.held else len(self.tokens) - 1

    def copy(self, sid: str) -> "Seq":
        c = Seq(sid, self.budget, self.sinks, self.lookahead, self.page_size)
        c.tokens = list(self.tokens)
        c.held = dict(self.held)
        c.drafts = set(self.drafts)
        c.created = self.created
        c.logits = dict(self.logits)
        c.seen = dict(self.seen)
        return c


class RingStore:
    """Per sequence and layer, K and V of budget + lookahead slots: one
    contiguous range of entries of a flat store per sequence."""

    paged = False

    def __init__(self, model: lm.ByteLM, dtype: torch.dtype) -> None:
        self.model, self.dtype = model, dtype
        self.cache = model.new_cache(0, dtype)
        self.used = 0

    def add(self, seq: Seq) -> None:
        seq.base = self.used
        self.used += seq.ring
        grown = self.model.new_cache(seq.ring, self.dtype)
        self.cache = [(torch.cat((k, gk)), torch.cat((v, gv)))
                      for (k, v), (gk, gv) in zip(self.cache, grown)]

    def fork(self, parent: Seq, child: Seq) -> None:
        """The child's ring starts as a copy of the parent's."""
        self.add(child)
        src = slice(parent.base, parent.base + parent.ring)
        dst = slice(child.base, child.base + child.ring)
        for k, v in self.cache:
            k[dst] = k[src]
            v[dst] = v[src]

    def entries(self, seq: Seq, slot_pos: List[int]
                ) -> Tuple[List[int], List[int]]:
        """Entry indices the sequence may read, and the position each
        holds (-1: not held)."""
        return ([seq.base + s for s in range(seq.ring)], list(slot_pos))

    def write_index(self, seq: Seq, pos: int, slot: int) -> int:
        return seq.base + slot

    def release(self, seq: Seq) -> None:
        pass


class PagedStore:
    """A pool of `blocks` blocks of `page_size` entries shared by every
    sequence, K and V per layer; per sequence a block table page -> block."""

    paged = True

    def __init__(self, model: lm.ByteLM, dtype: torch.dtype, blocks: int,
                 page_size: int) -> None:
        self.blocks, self.page_size = blocks, page_size
        self.cache = model.new_cache(blocks * page_size, dtype)
        self.free: List[int] = list(range(blocks - 1, -1, -1))
        self.peak = 0
        self.allocations = 0
        self.transient = 0  # blocks taken for pages_transient
        # Every sequence that has held a block, for audit().
        self.tables: Dict[str, Seq] = {}

    @property
    def in_use(self) -> int:
        return self.blocks - len(self.free)

    def alloc(self, seq: Seq, page: int) -> None:
        if page in seq.blocks:
            raise Violation("%s: page %d allocated twice" % (seq.sid, page))
        if not self.free:
            raise PoolExhausted("%s: no free block for page %d (pool of %d)"
                                % (seq.sid, page, self.blocks))
        seq.blocks[page] = self.free.pop()
        self.tables[seq.sid] = seq
        self.allocations += 1
        self.peak = max(self.peak, self.in_use)

    def release_page(self, seq: Seq, page: int) -> None:
        block = seq.blocks.pop(page, None)
        if block is None:
            raise Violation("%s: page %d freed but not held" % (seq.sid, page))
        self.free.append(block)

    def add(self, seq: Seq) -> None:
        # The session is created by its first step, whose pages_new or
        # pages_transient include page 0 (position 0's).
        pass

    def fork(self, parent: Seq, child: Seq) -> None:
        raise NotImplementedError("forks are tested with the ring store")

    def entries(self, seq: Seq, slot_pos: List[int]
                ) -> Tuple[List[int], List[int]]:
        idx, pos = [], []
        b = self.page_size
        for page in sorted(seq.blocks):
            base = seq.blocks[page] * b
            idx.extend(range(base, base + b))
            pos.extend(range(page * b, page * b + b))
        return idx, pos

    def write_index(self, seq: Seq, pos: int, slot: int) -> int:
        block = seq.blocks.get(pos // self.page_size)
        if block is None:
            raise Violation("%s: position %d on page %d, which has no block"
                            % (seq.sid, pos, pos // self.page_size))
        return block * self.page_size + pos % self.page_size

    def release(self, seq: Seq) -> None:
        for page in list(seq.blocks):
            self.release_page(seq, page)
        self.tables.pop(seq.sid, None)
        self.audit()

    def audit(self) -> None:
        """The free list and the sequences' block tables partition the
        pool: no block leaked (in neither), none in two places."""
        owner: Dict[int, str] = {}
        for b in self.free:
            if b in owner:
                raise Violation("block %d is free twice" % b)
            owner[b] = "the free list"
        for seq in self.tables.values():
            for page, b in seq.blocks.items():
                if b in owner:
                    raise Violation("block %d (%s page %d) is also in %s"
                                    % (b, seq.sid, page, owner[b]))
                owner[b] = "%s page %d" % (seq.sid, page)
        if len(owner) != self.blocks:
            raise Violation("%d blocks leaked: neither free nor in a block "
                            "table" % (self.blocks - len(owner)))


# ---- the engine ----------------------------------------------------------------


@dataclass
class Work:
    """What one sequence computes in one iteration: tokens at positions
    (for a session's first request, from position 0, where BOS goes: the
    session holds 0 already, the request steps the rest). ``tentative``:
    drafts; ``commit``: commit up to this position first. No positions and
    a commit: a commit-only item (nothing computed)."""
    seq: Seq
    positions: List[int]
    tokens: List[int]
    tentative: bool = False
    commit: Optional[int] = None


@dataclass
class _Sub:
    """One pass of one sequence: tokens, where they are written, what each
    may see."""
    seq: Seq
    positions: List[int]
    tokens: List[int]
    slots: List[int]
    slot_pos: List[int] = field(default_factory=list)  # ring, at the pass
    seen: List[Tuple[int, ...]] = field(default_factory=list)


class Engine:
    """Decodes sequences through evictd. ``transport`` is an EvictdClient
    (or anything with its ``batch`` method); ``on_failure`` is called when a
    batch request fails to get an answer, before it is sent again (None:
    the failure is raised)."""

    def __init__(self, model: lm.ByteLM, transport, store, test: str,
                 stats: Stats, on_failure: Optional[Callable[[], None]] = None
                 ) -> None:
        self.model, self.transport, self.store = model, transport, store
        self.test, self.stats = test, stats
        self.on_failure = on_failure
        self.resent: List[Tuple[List[dict], List[StepResult]]] = []
        self.requests = 0

    # -- evictd --

    def send(self, batch: StepBatch) -> Tuple[List[StepResult], float]:
        """One batch request (resent after a lost answer); the results and
        the round trip of the request that got the answer."""
        items = batch.items()
        resent = False
        for attempt in range(4):
            t0 = time.perf_counter()
            try:
                results = self.transport.batch(items)
            except ConnectionFailed:
                if self.on_failure is None or attempt == 3:
                    raise
                self.on_failure()
                resent = True
                continue
            rtt = time.perf_counter() - t0
            self.requests += 1
            for r in results:
                if isinstance(r, EvictdError):
                    raise r
                if r.replayed and not resent:
                    raise Violation("a new request answered as a replay")
            if resent:
                self.resent.append((items, results))
            return results, rtt
        raise AssertionError("unreachable")

    # -- applying answers --

    def _evict(self, seq: Seq, victims: List[int], what: str) -> None:
        committed = len(seq.held) - len(seq.drafts)
        over = max(0, committed - seq.budget)
        if over > len(victims):
            raise Violation("%s: %s leaves %d committed positions, budget "
                            "%d, only %d victims left in the answer"
                            % (seq.sid, what, committed, seq.budget,
                               len(victims)))
        for q in victims[:over]:
            if q not in seq.held or q in seq.drafts:
                raise Violation("%s: victim %d of %s is not a held committed "
                                "position" % (seq.sid, q, what))
            if seq.held[q] < seq.sinks:
                raise Violation("%s: pinned %d evicted" % (seq.sid, q))
            del seq.held[q]
        del victims[:over]

    def _plan(self, w: Work, r: StepResult) -> List[_Sub]:
        """Follows one answer; returns the sequence's passes."""
        seq = w.seq
        victims = list(r.victims)
        if w.commit is not None:
            for d in r.dropped:
                if d not in seq.drafts:
                    raise Violation("%s: dropped %d is not a draft"
                                    % (seq.sid, d))
                seq.drafts.discard(d)
                del seq.held[d]
            if any(d > w.commit for d in seq.drafts):
                raise Violation("%s: drafts above the commit not dropped"
                                % seq.sid)
            seq.drafts.clear()
            if r.dropped:
                # Rejected drafts: their tokens and logits go too.
                cut = min(r.dropped)
                del seq.tokens[cut:]
                for q in [q for q in seq.logits if q >= cut]:
                    del seq.logits[q]
                    seq.seen.pop(q, None)
            self._evict(seq, victims, "the commit")
        elif r.dropped:
            raise Violation("%s: dropped without a commit" % seq.sid)
        positions, tokens = list(w.positions), list(w.tokens)
        first: Optional[Tuple[int, int]] = None
        if not seq.created:
            # A new session holds position 0 in slot 0 already (where BOS
            # goes: every sequence starts with it); the engine computes it
            # with the first sub-step.
            seq.created = True
            seq.held[0] = 0
            first = (positions[0], tokens[0])
            positions, tokens = positions[1:], tokens[1:]
        if len(r.slots) != len(positions):
            raise Violation("%s: %d slots for %d positions"
                            % (seq.sid, len(r.slots), len(positions)))
        subs = []
        step = seq.lookahead
        for i in range(0, len(positions), step):
            ps, ts = positions[i:i + step], tokens[i:i + step]
            ss = r.slots[i:i + step]
            for p, s in zip(ps, ss):
                if not 0 <= s < seq.ring:
                    raise Violation("%s: slot %d outside the ring of %d"
                                    % (seq.sid, s, seq.ring))
                taken = [q for q, qs in seq.held.items() if qs == s]
                if taken:
                    raise Violation("%s: position %d placed in slot %d, "
                                    "which held position %d still holds"
                                    % (seq.sid, p, s, taken[0]))
                seq.held[p] = s
                if w.tentative:
                    seq.drafts.add(p)
            if i == 0 and first is not None:
                ps, ts, ss = [first[0]] + ps, [first[1]] + ts, [0] + ss
            sub = _Sub(seq, ps, ts, ss)
            slot_pos = [-1] * seq.ring
            for q, s in seq.held.items():
                slot_pos[s] = q
            sub.slot_pos = slot_pos
            sub.seen = [tuple(visible(seq.held, p, seq.budget, seq.sinks))
                        for p in ps]
            subs.append(sub)
            if not w.tentative:
                self._evict(seq, victims, "a sub-step")
        if victims:
            raise Violation("%s: victims %s left over" % (seq.sid, victims))
        if r.size != len(seq.held) or (seq.held and
                                       r.newest != max(seq.held)):
            raise Violation("%s: evictd says size %d newest %d, the engine "
                            "holds %d newest %s"
                            % (seq.sid, r.size, r.newest, len(seq.held),
                               max(seq.held, default=None)))
        for p, t in zip(w.positions, w.tokens):
            if p < len(seq.tokens):
                seq.tokens[p] = t
            elif p == len(seq.tokens):
                seq.tokens.append(t)
            else:
                raise Violation("%s: gap before %d" % (seq.sid, p))
        return subs

    def _pages_before(self, seq: Seq, r, positions: Sequence[int] = ()
                      ) -> None:
        """Paged store, before the request's pass: a block for each page of
        pages_new and pages_transient, as the answer says (alloc refuses a
        page the sequence has a block for already). Then every page the
        pass writes must have one: evictd named them all."""
        for page in list(r.pages_new) + list(r.pages_transient):
            self.store.alloc(seq, page)
            if page in r.pages_transient:
                self.store.transient += 1
        b = self.store.page_size
        missing = sorted({p // b for p in positions} - set(seq.blocks))
        if missing:
            raise Violation("%s: the pass writes pages %s, which are in "
                            "neither pages_new nor pages_transient and have "
                            "no block" % (seq.sid, missing))

    def _pages_after(self, seq: Seq, r) -> None:
        """Paged store, after the pass (seq.held is the answer applied):
        returns the blocks of pages_freed and pages_transient, as the answer
        says, refusing to free a page a held position is still on; then the
        sequence must have a block for exactly the pages its held positions
        are on (none leaked, none missing) and the pool must add up."""
        b = self.store.page_size
        want = {p // b for p in seq.held}
        for page in list(r.pages_freed) + list(r.pages_transient):
            if page in want:
                raise Violation("%s: page %d freed while it holds %s"
                                % (seq.sid, page,
                                   sorted(q for q in seq.held
                                          if q // b == page)))
            self.store.release_page(seq, page)
        if set(seq.blocks) != want:
            raise Violation("%s: after the request, blocks for pages %s "
                            "(leaked: %s), held positions on pages %s "
                            "(without a block: %s)"
                            % (seq.sid, sorted(seq.blocks),
                               sorted(set(seq.blocks) - want), sorted(want),
                               sorted(want - set(seq.blocks))))
        self.store.audit()

    # -- one iteration --

    def iterate(self, works: List[Work], phase: Optional[str] = None
                ) -> Dict[str, torch.Tensor]:
        """One decode iteration: one batch request for every work, then the
        forward passes. Returns, per session, the logits of its positions
        [n, model.VOCAB] (float32)."""
        t_start = time.perf_counter()
        batch = StepBatch()
        for w in works:
            seq = w.seq
            ps = w.positions if seq.created else w.positions[1:]
            if not seq.created and (w.positions[:1] != [0] or not ps):
                raise ValueError("a first request steps 0 and 1 or more")
            creation = {} if seq.created else {
                "budget": seq.budget, "sinks": seq.sinks,
                "lookahead": seq.lookahead,
                "page_size": seq.page_size or None}
            if ps:
                batch.add(seq.sid, positions=ps, tentative=w.tentative,
                          commit=w.commit, **creation)
            else:
                batch.add(seq.sid, commit=w.commit, **creation)
        t_send = time.perf_counter()
        results, rtt = self.send(batch)
        t_back = time.perf_counter()
        passes: List[List[_Sub]] = []
        for w, r in zip(works, results):
            if self.store.paged:
                self._pages_before(w.seq, r, w.positions)
            subs = self._plan(w, r)
            if self.store.paged and subs:
                merged = _Sub(w.seq, [], [], [])
                for s in subs:
                    merged.positions += s.positions
                    merged.tokens += s.tokens
                    merged.slots += s.slots
                    merged.seen += s.seen
                subs = [merged]
            passes.append(subs)
        out: Dict[str, List[torch.Tensor]] = {w.seq.sid: [] for w in works}
        forward = 0.0
        depth = max((len(s) for s in passes), default=0)
        for k in range(depth):
            group = [s[k] for s in passes if len(s) > k]
            logits, secs = self._forward(group)
            forward += secs
            for sub, lg in zip(group, logits):
                out[sub.seq.sid].append(lg)
        if self.store.paged:
            for w, r in zip(works, results):
                self._pages_after(w.seq, r)
        t_end = time.perf_counter()
        tokens = sum(len(w.positions) for w in works)
        if phase is None:
            phase = ("verify" if any(w.tentative for w in works) else
                     "prefill" if any(len(w.positions) > 1 for w in works)
                     else "decode")
        self.stats.add(Iteration(self.test, phase, len(works), tokens, rtt,
                                 forward, (t_end - t_start) - rtt - forward))
        return {sid: (torch.cat(v) if v else torch.zeros(0, lm.VOCAB))
                for sid, v in out.items()}

    def _forward(self, group: List[_Sub]
                 ) -> Tuple[List[torch.Tensor], float]:
        """One model.step over a sub-step of several sequences."""
        n = max(len(s.positions) for s in group)
        reads = [self.store.entries(s.seq, s.slot_pos) for s in group]
        width = max(len(idx) for idx, _ in reads)
        bsz = len(group)
        tokens = torch.zeros(bsz, n, dtype=torch.long)
        positions = torch.zeros(bsz, n, dtype=torch.long)
        write = torch.full((bsz, n), -1, dtype=torch.long)
        read = torch.full((bsz, width), -1, dtype=torch.long)
        mask = torch.zeros(bsz, n, width, dtype=torch.bool)
        for b, (sub, (idx, pos)) in enumerate(zip(group, reads)):
            m = len(sub.positions)
            tokens[b, :m] = torch.tensor(sub.tokens)
            positions[b, :m] = torch.tensor(sub.positions)
            write[b, :m] = torch.tensor(
                [self.store.write_index(sub.seq, p, s)
                 for p, s in zip(sub.positions, sub.slots)])
            read[b, :len(idx)] = torch.tensor(idx)
            where = {q: j for j, q in enumerate(pos) if q >= 0}
            if not self.store.paged:
                # In the ring, every position a token sees must be in a
                # slot at this pass (this sub-step's own ones included).
                for p, s in zip(sub.positions, sub.slots):
                    where[p] = s
            for i, (p, vis) in enumerate(zip(sub.positions, sub.seen)):
                cols = []
                for q in vis:
                    if q not in where:
                        raise Violation("%s: position %d needs %d, which no "
                                        "slot holds" % (sub.seq.sid, p, q))
                    cols.append(where[q])
                mask[b, i, cols] = True
                sub.seq.seen[p] = vis
            sub.seq.computed += m
        # Padding rows attend to their (unwritten) first entry to keep the
        # softmax finite; their logits are dropped.
        for b, sub in enumerate(group):
            m = len(sub.positions)
            if m < n:
                mask[b, m:, 0] = True
        t0 = time.perf_counter()
        with torch.no_grad():
            logits = self.model.step(tokens, positions, self.store.cache,
                                     write, read, mask)
        secs = time.perf_counter() - t0
        res = []
        for b, sub in enumerate(group):
            lg = logits[b, :len(sub.positions)]
            for p, row in zip(sub.positions, lg):
                sub.seq.logits[p] = row
            res.append(lg)
        return res, secs

    # -- other operations --

    def add(self, seq: Seq) -> Seq:
        self.store.add(seq)
        return seq

    def fork(self, parent: Seq, sid: str, client) -> Seq:
        """Forks the parent's session and copies its KV cache."""
        view = client.fork(parent.sid, sid)
        child = parent.copy(sid)
        if dict(zip(view.kept, view.slots)) != child.held:
            raise Violation("%s: fork view %s, engine %s"
                            % (sid, view.kept, sorted(child.held)))
        self.store.fork(parent, child)
        return child

    def truncate(self, seq: Seq, frm: int, client) -> List[int]:
        """Removes positions >= frm (and their tokens)."""
        r = client.truncate(seq.sid, frm)
        removed = sorted(q for q in seq.held if q >= frm)
        if r.removed != removed:
            raise Violation("%s: truncate removed %s, the engine held %s"
                            % (seq.sid, r.removed, removed))
        if self.store.paged:
            self._pages_before(seq, r)
        for q in removed:
            del seq.held[q]
            seq.drafts.discard(q)
        if self.store.paged:
            self._pages_after(seq, r)
        del seq.tokens[frm:]
        for q in [q for q in seq.logits if q >= frm]:
            del seq.logits[q]
            seq.seen.pop(q, None)
        return removed

    def finish(self, seq: Seq, client) -> None:
        """Deletes the session and returns its storage."""
        client.delete(seq.sid)
        self.store.release(seq)
