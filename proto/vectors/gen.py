#!/usr/bin/env python3
"""Reference model for the sliding-window policy, and the generator of the
larger test vectors in this folder.

The model is deliberately naive (a plain list, slots handed out by a
counter) so that it shares no arithmetic with the C ring buffer. Run with
--check to replay every vector in this folder against the model; run with
--write to regenerate the generated vectors (the hand-written ones are never
touched)."""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
MAX_POS = 2**32 - 1


class Model:
    def __init__(self, budget, sinks):
        if budget < 1 or sinks >= budget:
            raise ValueError("invalid budget/sinks")
        self.budget, self.sinks = budget, sinks
        self.pinned = []          # (pos, slot) of pinned positions
        self.ring = []            # (pos, slot) of the others, oldest first
        self.next_rr = 0          # next round-robin slot for unpinned
        self.newest = 0
        self._place(0)

    def _place(self, pos):
        if len(self.pinned) < self.sinks:
            slot = len(self.pinned)
            self.pinned.append((pos, slot))
        else:
            if self.next_rr < self.sinks:
                self.next_rr = self.sinks
            slot = self.next_rr
            self.next_rr = self.sinks if slot == self.budget else slot + 1
            self.ring.append((pos, slot))
        self.newest = pos
        return slot

    def size(self):
        return len(self.pinned) + len(self.ring)

    def evict(self, budget):
        if budget < 1 or budget <= self.sinks:
            return "invalid_budget", None
        victims = []
        while self.size() > budget:
            victims.append(self.ring.pop(0)[0])
        return None, victims

    def step(self, positions):
        prev = self.newest
        if not positions:
            return "invalid_position", None
        for i, p in enumerate(positions):
            if not isinstance(p, int) or p < 0 or p > MAX_POS:
                return "invalid_position", None
            if i > 0 and p <= positions[i - 1]:
                return "invalid_position", None
        if positions[0] <= prev:
            return "stale_position", None
        victims, slots = [], []
        for p in positions:
            slots.append(self._place(p))
            victims += self.evict(self.budget)[1]
        return None, {"victims": victims, "slots": slots,
                      "size": self.size(), "newest": self.newest}

    def view(self):
        kept = sorted(self.pinned + self.ring)
        return {"kept": [p for p, _ in kept], "slots": [s for _, s in kept]}


def replay(vec):
    """Replays one vector against the model; returns a list of mismatches."""
    bad = []
    m = Model(vec["budget"], vec.get("sinks", 0))
    for i, op in enumerate(vec["ops"]):
        if "step" in op:
            err, got = m.step(op["step"])
            if err or op.get("error"):
                if err != op.get("error"):
                    bad.append(f"op {i}: error {err!r}, vector says {op.get('error')!r}")
                continue
            want = {k: op[k] for k in ("victims", "slots", "size", "newest") if k in op}
            got = {k: got[k] for k in want}
        elif "evict" in op:
            err, victims = m.evict(op["evict"])
            if err or op.get("error"):
                if err != op.get("error"):
                    bad.append(f"op {i}: error {err!r}, vector says {op.get('error')!r}")
                continue
            want = {k: op[k] for k in ("victims", "size") if k in op}
            got = {"victims": victims, "size": m.size()}
            got = {k: got[k] for k in want}
        elif "check" in op:
            want, got = op["check"], m.view()
        else:
            bad.append(f"op {i}: unknown op {op!r}")
            continue
        if want != got:
            bad.append(f"op {i}: model gives {got}, vector says {want}")
    return bad


def record(name, description, budget, sinks, requests):
    """Builds a vector by running `requests` (("step", [..]) or ("evict", B)
    or ("check",)) through the model and recording its answers."""
    m = Model(budget, sinks)
    ops = []
    for req in requests:
        if req[0] == "step":
            err, got = m.step(req[1])
            ops.append({"step": req[1], "error": err} if err else {"step": req[1], **got})
        elif req[0] == "evict":
            err, victims = m.evict(req[1])
            ops.append({"evict": req[1], "error": err} if err else
                       {"evict": req[1], "victims": victims, "size": m.size()})
        else:
            ops.append({"check": m.view()})
    return {"name": name, "description": description, "budget": budget,
            "sinks": sinks, "ops": ops}


def generated():
    out = []
    reqs = [("step", [p]) for p in range(1, 2001)] + [("check",)]
    out.append(record(
        "default-512",
        "Default budget 512, positions 1..2000 one per request: position p "
        "evicts p - 512 from step 512 on, slots wrap every 513 steps.",
        512, 0, reqs))
    out.append(record(
        "streaming-512",
        "Budget 512 with 4 attention sinks over positions 1..2000: positions "
        "0..3 stay in slots 0..3, the ring turns over slots 4..512.",
        512, 4, reqs))
    reqs = [("step", list(range(1, 9))), ("step", list(range(9, 20))),
            ("check",), ("step", [20]), ("evict", 2), ("check",),
            ("step", list(range(21, 30))), ("check",)]
    out.append(record(
        "multi-position",
        "Several positions per request, more than the budget at once: a "
        "position stepped and evicted in the same request is a victim too.",
        6, 0, reqs))
    reqs = [("step", list(range(1, 9))), ("step", list(range(9, 20))),
            ("check",), ("evict", 5), ("step", [25, 26, 27]), ("check",)]
    out.append(record(
        "multi-position-sinks",
        "Several positions per request with 2 sinks, and an eviction to a "
        "budget just above the sinks.",
        6, 2, reqs))
    return out


def main():
    if "--write" in sys.argv:
        for vec in generated():
            with open(os.path.join(HERE, vec["name"] + ".json"), "w") as f:
                json.dump(vec, f, separators=(",", ":"))
                f.write("\n")
    failed = 0
    for name in sorted(os.listdir(HERE)):
        if not name.endswith(".json"):
            continue
        with open(os.path.join(HERE, name)) as f:
            vec = json.load(f)
        bad = replay(vec)
        for b in bad:
            print(f"{name}: {b}")
        failed += bool(bad)
    if failed:
        sys.exit(1)
    print("vectors agree with the reference model")


if __name__ == "__main__":
    main()
