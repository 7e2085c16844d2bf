#!/usr/bin/env python3
"""An example inference frontend driving evictd: it decodes N sequences with
simulated tokens against a simulated KV buffer of budget + 1 slots each,
sends one batch request per decode iteration, writes every new token into
the slot evictd returns, and checks that the buffer never overflows and
ends holding the sliding window. Exits 1 on any violation, 2 on an error.

    python3 example_frontend.py --url http://127.0.0.1:8090 \\
        --sequences 8 --steps 2000 --budget 64 [--sinks 4]
"""

import argparse
import os
import random
import sys
import time
from typing import Dict, List, Optional, Sequence, Tuple

from evictd_client import (EvictdClient, EvictdError, StepBatch, StepResult)


class Violation(Exception):
    """The daemon's answers would corrupt the KV buffer."""


def token_of(seq: int, pos: int) -> int:
    """The simulated token at a position: any value that differs between
    neighbours, so that an entry written to the wrong slot is noticed."""
    return (seq * 1000003 + pos * 7919) % 50257


class KVBuffer:
    """The KV cache of one sequence: budget + 1 slots, each holding the
    (position, token) written into it, or None when free."""

    def __init__(self, seq: int, budget: int) -> None:
        self.seq = seq
        self.budget = budget
        self.slots: List[Optional[Tuple[int, int]]] = [None] * (budget + 1)
        self.where: Dict[int, int] = {}  # live position -> its slot

    def live(self) -> int:
        """The number of entries held."""
        return len(self.where)

    def write(self, pos: int, slot: int) -> None:
        """Stores a new entry; the slot must be free."""
        if not 0 <= slot <= self.budget:
            raise Violation("seq %d: slot %d for position %d is outside the "
                            "buffer of %d slots"
                            % (self.seq, slot, pos, self.budget + 1))
        if self.slots[slot] is not None:
            raise Violation("seq %d: position %d written into slot %d, which "
                            "still holds live position %d"
                            % (self.seq, pos, slot, self.slots[slot][0]))
        if pos in self.where:
            raise Violation("seq %d: position %d written twice"
                            % (self.seq, pos))
        self.slots[slot] = (pos, token_of(self.seq, pos))
        self.where[pos] = slot
        if self.live() > self.budget + 1:  # unreachable with the checks above
            raise Violation("seq %d: %d live entries in %d slots"
                            % (self.seq, self.live(), self.budget + 1))

    def free(self, pos: int) -> None:
        """Drops an evicted entry; it must be live."""
        slot = self.where.pop(pos, None)
        if slot is None:
            raise Violation("seq %d: victim %d is not in the buffer"
                            % (self.seq, pos))
        self.slots[slot] = None

    def apply(self, result: StepResult) -> None:
        """Applies one step answer. Positions are written in order; a slot
        may be written only when free, or when it holds one of this answer's
        victims (the entry evicted just before, which is dropped first).
        Victims not displaced that way are dropped at the end."""
        if len(result.slots) != len(result.positions):
            raise Violation("seq %d: %d slots for %d positions"
                            % (self.seq, len(result.slots),
                               len(result.positions)))
        if result.victims != sorted(set(result.victims)):
            raise Violation("seq %d: victims not oldest first: %r"
                            % (self.seq, result.victims))
        pending = set(result.victims)
        for pos, slot in zip(result.positions, result.slots):
            held = self.slots[slot] if 0 <= slot <= self.budget else None
            if held is not None and held[0] in pending:
                pending.discard(held[0])
                self.free(held[0])
            self.write(pos, slot)
        for pos in sorted(pending):
            self.free(pos)
        if self.live() != result.size or result.size > self.budget:
            raise Violation("seq %d: buffer holds %d entries, daemon says "
                            "%d (budget %d)" % (self.seq, self.live(),
                                                result.size, self.budget))
        if result.newest != result.positions[-1]:
            raise Violation("seq %d: newest %d, last position sent %d"
                            % (self.seq, result.newest, result.positions[-1]))

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
        keep: bool = False, out=sys.stdout) -> None:
    """Decodes the sequences; raises Violation or EvictdError."""
    rng = random.Random(seed)
    ids = ["%s%d" % (prefix, i) for i in range(sequences)]
    buffers: List[KVBuffer] = []
    newest: List[int] = []
    for seq, sid in enumerate(ids):
        view = client.create(sid, budget=budget, sinks=sinks)
        if not view.created:
            raise Violation("session %s already existed" % sid)
        buf = KVBuffer(seq, budget)
        for pos, slot in zip(view.kept, view.slots):  # position 0 (BOS)
            buf.write(pos, slot)
        buffers.append(buf)
        newest.append(view.newest)

    # Each sequence starts with a prompt of its own length, stepped in one
    # go (prefill); every later iteration decodes one token per sequence.
    prompts = [rng.randint(0, prompt_max) for _ in ids]
    batch = StepBatch()
    requests = tokens = 0
    started = time.monotonic()
    for it in range(steps):
        batch.clear()
        for seq, sid in enumerate(ids):
            n = prompts[seq] + 1 if it == 0 else 1
            batch.add(sid, positions=range(newest[seq] + 1,
                                           newest[seq] + 1 + n))
        results = batch.results_by_session(client.batch(batch))
        requests += 1
        for seq, sid in enumerate(ids):
            result = results[sid]
            if isinstance(result, EvictdError):
                raise Violation("seq %d, iteration %d: %s" % (seq, it, result))
            buffers[seq].apply(result)
            newest[seq] = result.newest
            tokens += len(result.positions)
    elapsed = time.monotonic() - started

    for seq, sid in enumerate(ids):
        buf = buffers[seq]
        buf.check_tokens()
        view = client.get(sid)
        want = expected_window(newest[seq], budget, sinks)
        if view.kept != want:
            raise Violation("seq %d: daemon keeps %r..., the window is %r..."
                            % (seq, view.kept[:8], want[:8]))
        if sorted(buf.where) != want:
            raise Violation("seq %d: the buffer holds other positions than "
                            "the window" % seq)
        if view.slots != [buf.where[p] for p in view.kept]:
            raise Violation("seq %d: daemon's slots differ from the buffer's"
                            % seq)
        if not keep:
            client.delete(sid)
    print("ok: %d sequences, %d iterations, %d tokens in %d batch requests, "
          "%.2f s (%.0f tokens/s); budget %d, sinks %d"
          % (sequences, steps, tokens, requests, elapsed,
             tokens / elapsed if elapsed > 0 else 0.0, budget, sinks),
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
    prefix = args.prefix if args.prefix is not None else \
        "example-%d-" % os.getpid()
    prompt_max = args.budget if args.prompt_max is None else args.prompt_max
    try:
        with EvictdClient(args.url, timeout=args.timeout,
                          token_file=args.token_file) as client:
            run(client, args.sequences, args.steps, args.budget, args.sinks,
                prompt_max, prefix, args.seed, args.keep)
    except Violation as e:
        print("VIOLATION: %s" % e, file=sys.stderr)
        return 1
    except EvictdError as e:
        print("error: %s" % e, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
