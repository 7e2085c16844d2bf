#!/usr/bin/env python3
"""An example inference frontend driving evictd: it decodes N sequences with
simulated tokens against a simulated KV buffer of budget + lookahead slots
each, sends one batch request per decode iteration, writes every new token
into the slot evictd returns, and checks that the buffer never overflows,
never overwrites a slot still held, and ends holding the sliding window.
With --speculative K each iteration is a speculative-decoding step: per
sequence one batch item commits what the target model accepted of the
positions sent last time (the first, the target's own token, and a random
number of the drafts after it; the rest are dropped) and sends K new
tentative positions (the target's next token and K - 1 drafts). Exits 1 on
any violation, 2 on an error.

    python3 example_frontend.py --url http://127.0.0.1:8090 \\
        --sequences 8 --steps 2000 --budget 64 [--sinks 4] \\
        [--lookahead 16] [--speculative 4]
"""

import argparse
import os
import random
import sys
import time
from typing import Dict, List, Optional, Sequence, Set, Tuple

from evictd_client import (EvictdClient, EvictdError, StepBatch, StepResult)


class Violation(Exception):
    """The daemon's answers would corrupt the KV buffer."""


def token_of(seq: int, pos: int) -> int:
    """The simulated token at a position: any value that differs between
    neighbours, so that an entry written to the wrong slot is noticed."""
    return (seq * 1000003 + pos * 7919) % 50257


class KVBuffer:
    """The KV cache of one sequence: budget + lookahead slots, each holding
    the (position, token) written into it, or None when free. It knows only
    the session's budget and lookahead, not the eviction policy: it follows
    an answer in the order the daemon applies it (the commit, then each
    sub-step of up to lookahead positions: appended, then evicted down to
    the budget) and refuses any write into a slot still held."""

    def __init__(self, seq: int, budget: int, lookahead: int = 1) -> None:
        self.seq = seq
        self.budget = budget
        self.lookahead = lookahead
        self.size = budget + lookahead
        self.slots: List[Optional[Tuple[int, int]]] = [None] * self.size
        self.where: Dict[int, int] = {}  # live position -> its slot
        self.drafts: Set[int] = set()    # live positions still tentative

    def live(self) -> int:
        """The number of entries held."""
        return len(self.where)

    def newest(self) -> int:
        """The newest position held."""
        return max(self.where)

    def write(self, pos: int, slot: int) -> None:
        """Stores a new entry; the slot must be free."""
        if not 0 <= slot < self.size:
            raise Violation("seq %d: slot %d for position %d is outside the "
                            "buffer of %d slots"
                            % (self.seq, slot, pos, self.size))
        if self.slots[slot] is not None:
            raise Violation("seq %d: position %d written into slot %d, which "
                            "still holds live position %d"
                            % (self.seq, pos, slot, self.slots[slot][0]))
        if pos in self.where:
            raise Violation("seq %d: position %d written twice"
                            % (self.seq, pos))
        self.slots[slot] = (pos, token_of(self.seq, pos))
        self.where[pos] = slot
        if self.live() > self.size:  # unreachable with the checks above
            raise Violation("seq %d: %d live entries in %d slots"
                            % (self.seq, self.live(), self.size))

    def free(self, pos: int) -> None:
        """Drops an evicted or rejected entry; it must be live."""
        slot = self.where.pop(pos, None)
        if slot is None:
            raise Violation("seq %d: victim %d is not in the buffer"
                            % (self.seq, pos))
        self.slots[slot] = None
        self.drafts.discard(pos)

    def _evict(self, victims: List[int], what: str) -> None:
        """Frees the victims of one eviction down to the budget: exactly as
        many as the committed entries exceed it, oldest first."""
        over = self.live() - len(self.drafts) - self.budget
        if over > len(victims):
            raise Violation("seq %d: %s leaves %d committed entries, budget "
                            "%d, but %d victims remain in the answer"
                            % (self.seq, what, self.live() - len(self.drafts),
                               self.budget, len(victims)))
        for pos in victims[:max(0, over)]:
            if pos in self.drafts:
                raise Violation("seq %d: draft %d evicted by %s"
                                % (self.seq, pos, what))
            self.free(pos)
        del victims[:max(0, over)]

    def apply(self, result: StepResult, repeat: bool = False) -> None:
        """Applies one step answer (``result.commit`` and
        ``result.tentative`` say what was asked). ``repeat`` says that the
        request equals the previous one of this sequence, which the daemon
        takes for a retry: see :meth:`apply_repeat`."""
        if len(result.slots) != len(result.positions):
            raise Violation("seq %d: %d slots for %d positions"
                            % (self.seq, len(result.slots),
                               len(result.positions)))
        if result.replayed:
            if not repeat:
                raise Violation("seq %d: a new request answered as a replay"
                                % self.seq)
            self.apply_repeat(result)
            return
        if result.victims != sorted(set(result.victims)):
            raise Violation("seq %d: victims not oldest first: %r"
                            % (self.seq, result.victims))
        victims = list(result.victims)
        if result.commit is not None:
            rejected = sorted(d for d in self.drafts if d > result.commit)
            if result.dropped != rejected:
                raise Violation("seq %d: commit %d dropped %r, the drafts "
                                "above it are %r" % (self.seq, result.commit,
                                                     result.dropped,
                                                     rejected))
            for pos in rejected:
                self.free(pos)
            self.drafts.clear()  # the others are accepted
            self._evict(victims, "the commit")
        elif result.dropped:
            raise Violation("seq %d: dropped %r without a commit"
                            % (self.seq, result.dropped))
        elif self.drafts and not result.tentative:
            raise Violation("seq %d: a plain step accepted while drafts %r "
                            "are pending" % (self.seq, sorted(self.drafts)))
        placed = list(zip(result.positions, result.slots))
        if result.tentative:
            if len(self.drafts) + len(placed) > self.lookahead:
                raise Violation("seq %d: %d drafts pending, lookahead %d"
                                % (self.seq, len(self.drafts) + len(placed),
                                   self.lookahead))
            for pos, slot in placed:
                self.write(pos, slot)
                self.drafts.add(pos)
        else:
            for i in range(0, len(placed), self.lookahead):
                for pos, slot in placed[i:i + self.lookahead]:
                    self.write(pos, slot)
                self._evict(victims, "sub-step %d" % (i // self.lookahead))
        if victims:
            raise Violation("seq %d: victims %r were never over the budget"
                            % (self.seq, victims))
        if self.live() != result.size:
            raise Violation("seq %d: buffer holds %d entries, daemon says "
                            "%d (budget %d)" % (self.seq, self.live(),
                                                result.size, self.budget))
        if self.where and result.newest != max(self.where):
            raise Violation("seq %d: newest %d, the newest entry is %d"
                            % (self.seq, result.newest, max(self.where)))

    def apply_repeat(self, result: StepResult) -> None:
        """A speculative iteration that rejects every draft and drafts the
        same positions again sends the very request it sent last time (the
        same commit, the same positions). The daemon answers such a request
        as a retry: the earlier answer again, ``replayed``, nothing changed.
        Nothing needs to: the session already is where the request would
        take it (the same drafts pending, in the same slots; the earlier
        victims and dropped drafts are gone already). The new drafts' entries
        go into the slots their positions already hold."""
        for pos, slot in zip(result.positions, result.slots):
            if self.where.get(pos) != slot or pos not in self.drafts:
                raise Violation("seq %d: replayed answer puts draft %d in "
                                "slot %d, it holds slot %r"
                                % (self.seq, pos, slot, self.where.get(pos)))
            self.slots[slot] = (pos, token_of(self.seq, pos))
        if self.live() != result.size or result.newest != max(self.where):
            raise Violation("seq %d: replayed answer says size %d, newest "
                            "%d; the buffer holds %d, newest %d"
                            % (self.seq, result.size, result.newest,
                               self.live(), max(self.where)))

    def check_tokens(self) -> None:
        """Every live entry still holds its own token."""
        for pos, slot in self.where.items():
            if self.slots[slot] != (pos, token_of(self.seq, pos)):
                raise Violation("seq %d: slot %d holds %r, expected "
                                "position %d" % (self.seq, slot,
                                                 self.slots[slot], pos))


def expected_window(newest: int, budget: int, sinks: int) -> List[int]:
    """What a sliding window with sinks keeps of positions 0..newest."""
    everything = list(range(newest + 1))
    if len(everything) <= budget:
        return everything
    return everything[:sinks] + everything[len(everything) - (budget - sinks):]


def run(client: EvictdClient, sequences: int, steps: int, budget: int,
        sinks: int, prompt_max: int, prefix: str, seed: int,
        keep: bool = False, out=sys.stdout, *, lookahead: Optional[int] = None,
        speculative: int = 0) -> None:
    """Decodes the sequences; raises Violation or EvictdError. With
    ``speculative`` K > 0 every iteration after the prefill commits what
    the target model accepted of the positions sent last time and sends K
    new tentative ones (the target model's token, then K - 1 drafts);
    ``lookahead`` (default K, at least 1) sizes the buffers and the
    prefill's sub-steps."""
    if lookahead is None:
        lookahead = max(1, speculative)
    if speculative > lookahead:
        raise ValueError("%d drafts per iteration need a lookahead of at "
                         "least %d" % (speculative, speculative))
    rng = random.Random(seed)
    ids = ["%s%d" % (prefix, i) for i in range(sequences)]
    buffers: List[KVBuffer] = []
    newest: List[int] = []
    for seq, sid in enumerate(ids):
        view = client.create(sid, budget=budget, sinks=sinks,
                             lookahead=lookahead)
        if not view.created:
            raise Violation("session %s already existed" % sid)
        if view.ring_size != budget + lookahead:
            raise Violation("session %s has %d slots, not %d"
                            % (sid, view.ring_size, budget + lookahead))
        buf = KVBuffer(seq, view.budget, view.lookahead)
        for pos, slot in zip(view.kept, view.slots):  # position 0 (BOS)
            buf.write(pos, slot)
        buffers.append(buf)
        newest.append(view.newest)

    # Each sequence starts with a prompt of its own length, stepped in one
    # go (prefill, in sub-steps of lookahead positions); every later
    # iteration decodes one token per sequence, or with speculative
    # decoding commits what the target model accepted of the last drafts
    # and sends the next drafts, in the same item.
    prompts = [rng.randint(0, prompt_max) for _ in ids]
    drafts: List[List[int]] = [[] for _ in ids]
    batch = StepBatch()
    requests = tokens = sent_drafts = accepted_drafts = repeats = 0

    last: Dict[str, Tuple[Tuple[int, ...], bool, Optional[int]]] = {}

    def accept(pending: int) -> int:
        """How many of the pending positions the target model accepts: the
        first, its own token, and a random number of the drafts after it."""
        return 1 + rng.randint(0, pending - 1)

    def send() -> None:
        nonlocal requests, tokens, accepted_drafts, repeats
        outcomes = client.batch(batch)
        requests += 1
        for seq, (sid, result) in enumerate(zip(batch.sessions(),
                                                outcomes)):
            if isinstance(result, EvictdError):
                raise Violation("seq %d, iteration %d: %s"
                                % (seq, requests - 1, result))
            sent = (tuple(result.positions), result.tentative, result.commit)
            buffers[seq].apply(result, repeat=last.get(sid) == sent)
            repeats += result.replayed
            last[sid] = sent
            committed = newest[seq] - len(drafts[seq])
            if result.commit is not None and drafts[seq]:
                accepted_drafts += result.commit - committed
                tokens += result.commit - committed
            if not result.tentative:
                tokens += len(result.positions)
            drafts[seq] = list(result.positions) if result.tentative else []
            newest[seq] = buffers[seq].newest()

    started = time.monotonic()
    for it in range(steps):
        batch.clear()
        for seq, sid in enumerate(ids):
            if it == 0 or not speculative:
                n = prompts[seq] + 1 if it == 0 else 1
                batch.add(sid, positions=range(newest[seq] + 1,
                                               newest[seq] + 1 + n))
                continue
            # The target model has verified the pending positions: the
            # first (its own token of the last iteration) and some of the
            # drafts after it are accepted. Commit those, then send the
            # target's next token and K - 1 new drafts after them.
            committed = newest[seq] - len(drafts[seq])
            commit = None
            if drafts[seq]:
                commit = committed + accept(len(drafts[seq]))
            base = committed if commit is None else commit
            batch.add(sid, positions=range(base + 1, base + 1 + speculative),
                      tentative=True, commit=commit)
            sent_drafts += speculative
        send()
    if speculative:  # the last positions verified: commit-only items
        batch.clear()
        for seq, sid in enumerate(ids):
            committed = newest[seq] - len(drafts[seq])
            batch.add(sid, commit=committed + accept(len(drafts[seq])))
        send()
    elapsed = time.monotonic() - started

    for seq, sid in enumerate(ids):
        buf = buffers[seq]
        buf.check_tokens()
        view = client.get(sid)
        want = expected_window(newest[seq], budget, sinks)
        if view.kept != want:
            raise Violation("seq %d: daemon keeps %r..., the window is %r..."
                            % (seq, view.kept[:8], want[:8]))
        if view.tentative or buf.drafts:
            raise Violation("seq %d: drafts left pending: %r"
                            % (seq, view.tentative))
        if sorted(buf.where) != want:
            raise Violation("seq %d: the buffer holds other positions than "
                            "the window" % seq)
        if view.slots != [buf.where[p] for p in view.kept]:
            raise Violation("seq %d: daemon's slots differ from the buffer's"
                            % seq)
        if not keep:
            client.delete(sid)
    mode = ("speculative, %d tentative per iteration, %d of %d accepted, %d "
            "repeated requests replayed; "
            % (speculative, accepted_drafts, sent_drafts, repeats)
            if speculative else "")
    print("ok: %d sequences, %d iterations, %d tokens in %d batch requests, "
          "%.2f s (%.0f tokens/s); %sbudget %d, sinks %d, lookahead %d"
          % (sequences, steps, tokens, requests, elapsed,
             tokens / elapsed if elapsed > 0 else 0.0, mode, budget, sinks,
             lookahead),
          file=out)


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", default="http://127.0.0.1:8090",
                    help="evictd address (http://host:port or unix:/path)")
    ap.add_argument("--sequences", type=int, default=8)
    ap.add_argument("--steps", type=int, default=2000,
                    help="decode iterations (one batch request each)")
    ap.add_argument("--budget", type=int, default=64)
    ap.add_argument("--sinks", type=int, default=0)
    ap.add_argument("--lookahead", type=int, default=None,
                    help="slots beyond the budget: the prefill's sub-step "
                         "and the most drafts pending (default: the "
                         "--speculative drafts, else 1)")
    ap.add_argument("--speculative", type=int, default=0, metavar="K",
                    help="speculative decoding: commit what was accepted of "
                         "the last K tentative positions and send K new "
                         "ones per iteration (default 0: off)")
    ap.add_argument("--prompt-max", type=int, default=None,
                    help="longest prompt, prefilled in the first iteration "
                         "(default: the budget)")
    ap.add_argument("--prefix", default=None,
                    help="session id prefix (default example-<pid>-)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--token-file", default=None)
    ap.add_argument("--timeout", type=float, default=10.0)
    ap.add_argument("--keep", action="store_true",
                    help="leave the sessions in the daemon")
    args = ap.parse_args(argv)
    if args.sequences < 1 or args.steps < 1 or args.budget < 1:
        ap.error("--sequences, --steps and --budget must be at least 1")
    if args.speculative < 0:
        ap.error("--speculative must be at least 0")
    lookahead = (max(1, args.speculative) if args.lookahead is None
                 else args.lookahead)
    if lookahead < 1:
        ap.error("--lookahead must be at least 1")
    if args.speculative > lookahead:
        ap.error("--speculative K needs --lookahead K or more")
    prefix = args.prefix if args.prefix is not None else \
        "example-%d-" % os.getpid()
    prompt_max = args.budget if args.prompt_max is None else args.prompt_max
    try:
        with EvictdClient(args.url, timeout=args.timeout,
                          token_file=args.token_file) as client:
            run(client, args.sequences, args.steps, args.budget, args.sinks,
                prompt_max, prefix, args.seed, args.keep,
                lookahead=lookahead, speculative=args.speculative)
    except Violation as e:
        print("VIOLATION: %s" % e, file=sys.stderr)
        return 1
    except EvictdError as e:
        print("error: %s" % e, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
