"""The reference side of the llama.cpp end-to-end check: the sliding window
over positions written from the README's policy alone (never consulting
evictd), and a replay of evictd-llama's run record (--dump) that computes,
for every token llama.cpp computed, what it should have attended to and
what its logits should have been, with a PyTorch model of the weights:
deploy/model's, or gguf_lm's model of a llama-architecture GGUF (read with
gguf-py: grouped-query attention, an output head of its own, eps and RoPE
base from the file), such as stories260K.

What a token attends to, in llama.cpp: every position its sequence holds in
the KV cache when the pass runs, up to its own (llama.cpp's causal mask
over the cells). evictd-llama removes a step's victims after the pass that
computed the step, a commit's dropped drafts and victims before the next
pass, and what a truncation removed at once. So, by the policy, a token p
of a step attends to the positions held after the step's positions were
appended (and, for a commit carried by the step, after the commit) but
before the step evicted anything, that are <= p. For one position per step
this is the sliding window of the policy card (the budget positions held,
and p); for a chunk of L positions the chunk's later tokens also see the
oldest positions the chunk will evict (up to L - 1 more: the lookahead's
slack, as in an engine that reserves the window plus one micro-batch);
drafts see the committed window and the drafts before them.

Which RoPE positions (the run's --positions, the start event's
"positions"): "original", each token at its absolute position; "cache"
(streaming-llm), each key at its index among the positions the cache holds
when the query runs and the query at its own index, which is what
llama.cpp's K-shift after llama_memory_seq_add computes. The row of a token
p is every held position <= p and the cache holds no position between two
of the row's, so key q's index is its rank in p's row and p's is the row's
length - 1. A third, "stale", is the negative control of cache mode: every
key kept at the index it was computed at, i.e. an engine that gave new
tokens cache positions but never moved the old keys.
"""

import json
import math
import sys
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Set, Tuple

import numpy as np
import torch


def ggml_rope_tables(positions: torch.Tensor, dim: int, base: float,
                     dtype: torch.dtype) -> Tuple[torch.Tensor, torch.Tensor]:
    """model.rope_tables as llama.cpp computes the angles (ggml-cpu's
    ggml_rope_cache_init): in float32, theta_0 = p and theta_(i+1) =
    theta_i * s with s = powf(base, -2/dim), then cos and sin. The rotation
    is part of what llama.cpp computes for a position, and its float32
    angles drift from the exact ones as p grows (at p = 1345 the first pair's
    angle is good to about 6e-5 rad): on random weights that alone moved
    logits by 3.4e-4 at that position, against 1.9e-5 with these angles
    (on the trained model, over 1,540 positions: 4.0e-6 against 2.6e-6).
    So the reference takes llama.cpp's angles, and what it compares is the
    rest: the positions attended and the arithmetic over them."""
    half = dim // 2
    s = np.float32(np.power(np.float32(base), np.float32(-2.0 / dim)))
    theta = positions.numpy().astype(np.float32)
    cols = []
    for _ in range(half):
        cols.append(theta)
        theta = (theta * s).astype(np.float32)
    ang = torch.from_numpy(np.stack(cols, -1).astype(np.float64))
    return (torch.cos(ang).to(dtype).unsqueeze(-2),
            torch.sin(ang).to(dtype).unsqueeze(-2))


class Window:
    """One sequence's window, from the README's policy: starts holding
    position 0; the first `sinks` positions appended while fewer are
    pinned are pinned; a step appends its positions, then (unless
    tentative) evicts the oldest unpinned positions until at most `budget`
    remain; a commit keeps the drafts <= P, drops the others, then evicts;
    a truncation removes every position >= P."""

    def __init__(self, budget: int, sinks: int, lookahead: int) -> None:
        self.budget, self.sinks, self.lookahead = budget, sinks, lookahead
        self.held: List[int] = []
        self.pinned: Set[int] = set()
        self.drafts: List[int] = []
        self._append([0])

    def copy(self) -> "Window":
        w = Window.__new__(Window)
        w.budget, w.sinks, w.lookahead = self.budget, self.sinks, \
            self.lookahead
        w.held, w.pinned, w.drafts = list(self.held), set(self.pinned), \
            list(self.drafts)
        return w

    def _append(self, positions: Sequence[int]) -> None:
        for p in positions:
            if self.held and p <= self.held[-1]:
                raise ValueError("position %d is not above %d"
                                 % (p, self.held[-1]))
            self.held.append(p)
            if len(self.pinned) < self.sinks:
                self.pinned.add(p)

    def _evict(self) -> List[int]:
        victims = []
        while len(self.held) > self.budget:
            v = next(q for q in self.held if q not in self.pinned)
            self.held.remove(v)
            victims.append(v)
        return victims

    def commit(self, newest: int) -> Tuple[List[int], List[int]]:
        """(dropped, victims)."""
        dropped = [q for q in self.drafts if q > newest]
        self.held = [q for q in self.held if q not in dropped]
        self.pinned -= set(dropped)
        self.drafts = []
        return dropped, self._evict()

    def step(self, positions: Sequence[int], tentative: bool
             ) -> Tuple[Dict[int, Tuple[int, ...]], List[int]]:
        """Appends one step's positions: (what each attends to, the
        victims, evicted after the pass)."""
        if len(positions) > self.lookahead:
            raise ValueError("a step of %d positions, lookahead %d"
                             % (len(positions), self.lookahead))
        if self.drafts and not tentative:
            raise ValueError("a plain step with drafts pending")
        self._append(positions)
        rows = {p: tuple(q for q in self.held if q <= p) for p in positions}
        if tentative:
            self.drafts += list(positions)
            return rows, []
        return rows, self._evict()

    def truncate(self, frm: int) -> List[int]:
        removed = [q for q in self.held if q >= frm]
        self.held = [q for q in self.held if q < frm]
        self.pinned = {q for q in self.pinned if q < frm}
        self.drafts = [q for q in self.drafts if q < frm]
        return removed


def forward_rows(model: torch.nn.Module, tokens: Sequence[int],
                 rows: Sequence[Sequence[int]], qpos: Sequence[int],
                 kpos: Sequence[Sequence[int]]) -> torch.Tensor:
    """The logits [T, vocab] of tokens 0..T-1 (float64), token i attending
    to the positions rows[i] (ascending, its own last) with its query
    rotated at qpos[i] and key rows[i][j] at kpos[i][j]: a position's key
    may sit at another RoPE position for each query (cache positions).
    With qpos = range(T) and kpos = rows it is model(tokens, mask=rows).
    A model of another architecture (support.arch_lm's) computes its own
    rows: its sliding-window and recurrent layers read them otherwise."""
    if hasattr(model, "forward_rows"):
        return model.forward_rows(tokens, rows, qpos, kpos)
    rope = sys.modules[type(model).__module__].rope
    cfg = model.cfg
    t, h, d = len(tokens), cfg.n_heads, cfg.head_dim
    w = max(len(r) for r in rows)
    idx = torch.zeros(t, w, dtype=torch.long)
    kp = torch.zeros(t, w, dtype=torch.long)
    valid = torch.zeros(t, w, dtype=torch.bool)
    for i, (r, k) in enumerate(zip(rows, kpos)):
        idx[i, :len(r)] = torch.tensor(list(r))
        kp[i, :len(r)] = torch.tensor(list(k))
        valid[i, :len(r)] = True
    qp = torch.tensor(list(qpos))
    top = int(max(int(kp.max()), int(qp.max()))) + 1
    cos, sin = model._tables(torch.arange(top), torch.float64)
    bias = torch.zeros(t, 1, w, dtype=torch.float64).masked_fill_(
        ~valid.unsqueeze(1), float("-inf"))
    x = model.embed(torch.tensor(list(tokens))).unsqueeze(0)
    for blk in model.blocks:
        n = blk.attn_norm(x)[0]
        q = rope(blk.wq(n).view(t, h, d), (cos[qp], sin[qp]))
        # Grouped-query attention: fewer KV heads than query heads, query
        # head j reading KV head j // group (gguf_lm.py says why).
        k = blk.wk(n).view(t, -1, d)
        group = h // k.shape[1]
        k = rope(k[idx], (cos[kp], sin[kp])).repeat_interleave(group, 2)
        v = blk.wv(n).view(t, -1, d)[idx].repeat_interleave(group, 2)
        scores = torch.einsum("thd,twhd->thw", q, k) / math.sqrt(d) + bias
        out = torch.einsum("thw,twhd->thd", torch.softmax(scores, -1), v)
        x = blk.finish(x, out.unsqueeze(0))
    return model._logits(x)[0]


def rope_positions(rope: str, rows: Sequence[Tuple[int, ...]]
                   ) -> Tuple[List[int], List[List[int]]]:
    """(qpos, kpos) of forward_rows for the rows of positions 0..T-1 under
    a --positions mode (see the module's doc)."""
    if rope == "original":
        return list(range(len(rows))), [list(r) for r in rows]
    qpos = [len(r) - 1 for r in rows]
    if rope == "cache":
        return qpos, [list(range(len(r))) for r in rows]
    if rope == "stale":
        return qpos, [[qpos[q] for q in r] for r in rows]
    raise ValueError("no positions mode %r" % rope)


def load_dump(prefix: str) -> Tuple[List[dict], np.ndarray]:
    """The events of PREFIX.jsonl and the logit rows of PREFIX.f32."""
    with open(prefix + ".jsonl", encoding="utf-8") as f:
        events = [json.loads(line) for line in f]
    if not events or events[0].get("op") != "start":
        raise ValueError("%s.jsonl does not start with a start event"
                         % prefix)
    n_vocab = events[0]["n_vocab"]
    rows = np.fromfile(prefix + ".f32", dtype=np.float32)
    if rows.size % n_vocab:
        raise ValueError("%s.f32 is not whole rows of %d" % (prefix,
                                                               n_vocab))
    return events, rows.reshape(-1, n_vocab)


@dataclass
class Result:
    """What a replay found."""
    compared: int = 0            # logit rows compared
    max_diff: float = 0.0        # largest |a - b| / max(1, |b|)
    max_diff_at: str = ""
    row_mismatches: List[str] = field(default_factory=list)
    removal_mismatches: List[str] = field(default_factory=list)
    cache_mismatches: List[str] = field(default_factory=list)
    position_mismatches: List[str] = field(default_factory=list)
    cache_checks: int = 0        # passes whose llama.cpp span was checked
    passes: int = 0
    widest: int = 0              # most positions one token attended to

    def summary(self) -> str:
        return ("%d rows in %d passes, max diff %.2e (%s), widest row %d, "
                "%d row, %d removal, %d cache and %d position mismatches"
                % (self.compared, self.passes, self.max_diff,
                   self.max_diff_at, self.widest, len(self.row_mismatches),
                   len(self.removal_mismatches),
                   len(self.cache_mismatches),
                   len(self.position_mismatches)))


class _Track:
    """One model's sequences during a replay: the token and the row
    (positions attended) of every position as last computed, and the
    passes not yet compared."""

    def __init__(self, model: torch.nn.Module, label: str) -> None:
        self.model, self.label = model, label
        self.tokens: Dict[int, Dict[int, int]] = {}
        self.rows: Dict[int, Dict[int, Tuple[int, ...]]] = {}
        self.cache: Dict[int, Set[int]] = {}   # what llama.cpp holds
        self.pending: List[Tuple[int, int, int]] = []  # (seq, pos, row)

    def fork(self, seq: int, into: int) -> None:
        self.tokens[into] = dict(self.tokens.get(seq, {}))
        self.rows[into] = dict(self.rows.get(seq, {}))
        self.cache[into] = set(self.cache.get(seq, set()))

    def take(self, seq: int):
        """Forgets seq (serve gave its cells to another conversation),
        returning what it held, for put()."""
        return (self.tokens.pop(seq, {}), self.rows.pop(seq, {}),
                self.cache.pop(seq, set()))

    def put(self, seq: int, held) -> None:
        self.tokens[seq], self.rows[seq], self.cache[seq] = held

    def dirty(self, seq: int, pos: int, tok: int) -> bool:
        """Whether computing (pos, tok) rewrites a position a pending
        comparison depends on (so the pending ones are compared first)."""
        return pos in self.tokens.get(seq, {}) and any(
            s == seq for s, _, _ in self.pending)


def replay(events: List[dict], logits: np.ndarray, target: torch.nn.Module,
           draft: Optional[torch.nn.Module] = None,
           budget: Optional[int] = None, sinks: Optional[int] = None,
           rope: Optional[str] = None) -> Result:
    """Replays a run record: the target's rows against the policy (with
    `budget`/`sinks` overriding the run's, for the negative control), the
    draft's rows against what its cache held; every logit row against the
    reference model in float64 over exactly those positions, rotated as
    the run's positions mode says (or `rope`, for the negative control)."""
    start = events[0]
    mode = start.get("positions", "original")
    rope = mode if rope is None else rope
    budget = start["budget"] if budget is None else budget
    sinks = start["sinks"] if sinks is None else sinks
    lookahead = start["lookahead"]
    res = Result()
    windows: Dict[int, Window] = {0: Window(budget, sinks, lookahead)}
    # The target's removals the policy expects, per sequence, in order.
    expect: Dict[int, List[int]] = {0: []}
    tracks = {"target": _Track(target, "target")}
    if draft is not None:
        tracks["draft"] = _Track(draft, "draft")
    step_rows: Dict[int, Dict[int, Tuple[int, ...]]] = {}
    # serve's saved conversations, by key: window, expected removals, rows
    # and each model's tokens, rows and cells.
    stash: Dict[str, tuple] = {}
    # its checkpoints (a copy each, kept: any number of restores).
    kept: Dict[str, tuple] = {}

    def flush(track: _Track) -> None:
        by_seq: Dict[int, List[Tuple[int, int]]] = {}
        for seq, pos, row in track.pending:
            by_seq.setdefault(seq, []).append((pos, row))
        for seq, items in by_seq.items():
            toks, rows = track.tokens[seq], track.rows[seq]
            top = max(p for p, _ in items)
            if sorted(toks)[:top + 1] != list(range(top + 1)):
                raise ValueError("%s seq %d: positions 0..%d are not all "
                                 "computed" % (track.label, seq, top))
            t = torch.tensor([toks[p] for p in range(top + 1)])
            with torch.no_grad():
                if rope == "original" and not hasattr(track.model,
                                                      "forward_rows"):
                    mask = torch.zeros(top + 1, top + 1, dtype=torch.bool)
                    for p in range(top + 1):
                        mask[p, list(rows[p])] = True
                    want = track.model(t, mask=mask).double().numpy()
                else:
                    rws = [rows[p] for p in range(top + 1)]
                    qpos, kpos = rope_positions(rope, rws)
                    want = forward_rows(track.model, t.tolist(), rws, qpos,
                                        kpos).numpy()
            for pos, row in items:
                a = logits[row].astype(np.float64)
                b = want[pos]
                err = float(np.max(np.abs(a - b) / np.maximum(1.0,
                                                              np.abs(b))))
                res.compared += 1
                key = track.label
                if err > res.max_diff:
                    res.max_diff = err
                    res.max_diff_at = "%s seq %d pos %d" % (key, seq, pos)
        track.pending = []

    for ev in events[1:]:
        op = ev["op"]
        if op == "step":
            seq = ev["seq"]
            w = windows[seq]
            if "commit" in ev:
                dropped, victims = w.commit(ev["commit"])
                expect[seq] += dropped + victims
            rows, victims = w.step(ev["positions"], ev["tentative"])
            step_rows.setdefault(seq, {}).update(rows)
            expect[seq] += victims
        elif op == "commit":
            dropped, victims = windows[ev["seq"]].commit(ev["newest"])
            expect[ev["seq"]] += dropped + victims
        elif op == "truncate":
            expect[ev["seq"]] += windows[ev["seq"]].truncate(ev["from"])
        elif op == "open":
            # serve: a fresh session in sequence seq (its cells were
            # emptied): the window holds position 0 again.
            seq = ev["seq"]
            for tr in tracks.values():
                flush(tr)
                tr.take(seq)
            windows[seq] = Window(budget, sinks, lookahead)
            expect[seq] = []
            step_rows[seq] = {}
        elif op == "save":
            # serve: the conversation of seq goes to host memory (its
            # cells emptied), to come back under key into any sequence.
            seq = ev["seq"]
            for tr in tracks.values():
                flush(tr)
            stash[ev["key"]] = (windows.pop(seq), expect.pop(seq),
                                step_rows.pop(seq, {}),
                                {k: tr.take(seq) for k, tr in
                                 tracks.items()})
        elif op == "keep":
            # serve: a checkpoint, a copy of seq as it is (seq goes on),
            # to come back under key into any sequence, as often as
            # asked.
            seq = ev["seq"]
            for tr in tracks.values():
                flush(tr)
            held = {}
            for k, tr in tracks.items():
                held[k] = (dict(tr.tokens.get(seq, {})),
                           dict(tr.rows.get(seq, {})),
                           set(tr.cache.get(seq, set())))
            kept[ev["key"]] = (windows[seq].copy(), list(expect[seq]),
                               dict(step_rows.get(seq, {})), held)
        elif op == "restore":
            seq = ev["seq"]
            for tr in tracks.values():
                flush(tr)
                tr.take(seq)
            if ev["key"] in kept:
                # a checkpoint stays kept: a copy of it each time
                w, x, r, h = kept[ev["key"]]
                w, x, r = w.copy(), list(x), dict(r)
                h = {k: (dict(t), dict(rw), set(c))
                     for k, (t, rw, c) in h.items()}
                (windows[seq], expect[seq], step_rows[seq], held) = \
                    (w, x, r, h)
            else:
                (windows[seq], expect[seq], step_rows[seq],
                 held) = stash.pop(ev["key"])
            for k, tr in tracks.items():
                tr.put(seq, held[k])
        elif op == "fork":
            seq, into = ev["seq"], ev["into"]
            windows[into] = windows[seq].copy()
            expect[into] = list(expect[seq])
            step_rows[into] = dict(step_rows.get(seq, {}))
            for tr in tracks.values():
                tr.fork(seq, into)
        elif op == "remove":
            tr = tracks.get(ev["model"])
            if tr is None:
                continue
            seq, gone = ev["seq"], ev["positions"]
            held = tr.cache.setdefault(seq, set())
            missing = [q for q in gone if q not in held]
            # rejected drafts, and what serve's session held that its
            # cells never computed (a step sent ahead of a pass that never
            # came), are removed without being held
            if missing and ev["why"] not in ("rejected", "uncomputed"):
                res.removal_mismatches.append(
                    "%s seq %d removed %s it does not hold"
                    % (ev["model"], seq, missing))
            held -= set(gone)
            if ev["model"] == "target":
                want = expect[seq][:len(gone)]
                if want != gone:
                    res.removal_mismatches.append(
                        "seq %d: the engine removed %s, the policy %s"
                        % (seq, gone, expect[seq][:len(gone) + 2]))
                expect[seq] = expect[seq][len(gone):]
        elif op == "cache":
            # llama.cpp's own view of a sequence just before a pass: its
            # smallest and largest positions must be the books'.
            tr = tracks.get(ev["model"])
            if tr is None:
                continue
            held = tr.cache.get(ev["seq"], set())
            if mode == "cache":  # the held ones at 0..n-1
                books = (0, len(held) - 1) if held else (-1, -1)
            else:
                books = (min(held), max(held)) if held else (-1, -1)
            if (ev["min"], ev["max"]) != books:
                res.cache_mismatches.append(
                    "%s seq %d: llama.cpp holds %d..%d, the removals leave "
                    "%d..%d" % (ev["model"], ev["seq"], ev["min"], ev["max"],
                                books[0], books[1]))
            res.cache_checks += 1
        elif op == "pass":
            tr = tracks.get(ev["model"])
            if tr is None:
                continue
            res.passes += 1
            given = [tk[3] if len(tk) > 3 else None for tk in ev["tokens"]]
            toks = [tuple(tk[:3]) for tk in ev["tokens"]]
            if any(tr.dirty(s, p, t) for s, p, t in toks):
                flush(tr)
            # What the cache holds during the pass: what it held, and the
            # pass's own tokens.
            now: Dict[int, Set[int]] = {}
            for s, p, _ in toks:
                now.setdefault(s, set(tr.cache.get(s, set()))).add(p)
            for i, (s, p, t) in enumerate(toks):
                engine_row = tuple(sorted(q for q in now[s] if q <= p))
                # The position llama.cpp was given: p, or its index in
                # the cache (the rank of p among what it holds).
                want_at = len(engine_row) - 1 if mode == "cache" else None
                if given[i] != want_at:
                    res.position_mismatches.append(
                        "%s seq %d pos %d went to llama.cpp at %s, not %s"
                        % (ev["model"], s, p, given[i], want_at))
                if ev["model"] == "target":
                    if p == 0:
                        want_row = (0,)
                    else:
                        want_row = step_rows.get(s, {}).pop(p, None)
                    if want_row != engine_row:
                        res.row_mismatches.append(
                            "seq %d pos %d attended to %s, the window "
                            "holds %s" % (s, p, engine_row, want_row))
                        want_row = want_row or engine_row
                else:
                    want_row = engine_row
                res.widest = max(res.widest, len(want_row))
                tr.tokens.setdefault(s, {})[p] = t
                tr.rows.setdefault(s, {})[p] = want_row
                tr.pending.append((s, p, ev["row"] + i))
            for s in now:
                tr.cache[s] = now[s]
    for tr in tracks.values():
        flush(tr)
    for seq, w in windows.items():
        held = sorted(tracks["target"].cache.get(seq, set()))
        if held != w.held:
            res.removal_mismatches.append(
                "seq %d ends holding %s in llama.cpp's cache, the policy %s"
                % (seq, held[:8], w.held[:8]))
    return res


def text_of(stdout: bytes) -> bytes:
    """evictd-llama's generated text (it ends its output with a newline)."""
    return stdout[:-1] if stdout.endswith(b"\n") else stdout


def greedy_mismatches(events: List[dict], logits: np.ndarray,
                      tokens: Sequence[int], first: int, seq: int = 0,
                      margin: float = 1e-3) -> Tuple[int, List[str]]:
    """Whether each token from position `first` + 1 on is the target's
    greedy choice at the position before, as that position was last
    computed (the pass whose token stayed in the sequence). Positions
    whose two best logits are within `margin` are skipped as ties.
    Returns (positions checked, mismatches)."""
    last: Dict[int, int] = {}
    for ev in events:
        if ev["op"] == "pass" and ev["model"] == "target":
            for i, tk in enumerate(ev["tokens"]):
                if tk[0] == seq:
                    last[tk[1]] = ev["row"] + i
    checked, bad = 0, []
    for q in range(first, len(tokens) - 1):
        if q not in last:
            bad.append("position %d was never computed" % q)
            continue
        row = logits[last[q]]
        top2 = np.sort(row)[-2:]
        if top2[1] - top2[0] < margin:
            continue
        checked += 1
        if int(np.argmax(row)) != tokens[q + 1]:
            bad.append("position %d: token %d, the target's greedy choice "
                       "%d" % (q + 1, tokens[q + 1], int(np.argmax(row))))
    return checked, bad


def replayed(test, prefix: str, target: torch.nn.Module,
             tol: float) -> "Result":
    """The reference's verdict on serve's --dump at prefix, asserted in
    test (a unittest.TestCase): no row, removal, cache or position
    mismatch, more than 100 rows compared, every logit within tol."""
    events, rows = load_dump(prefix)
    res = replay(events, rows, target)
    for what in ("row", "removal", "cache", "position"):
        test.assertEqual(getattr(res, what + "_mismatches")[:5], [],
                         res.summary())
    test.assertGreater(res.compared, 100)
    test.assertLessEqual(res.max_diff, tol, res.summary())
    return res
