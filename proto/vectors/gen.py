#!/usr/bin/env python3
"""Reference model for the sliding-window policy and its engine workflows
(lookahead, drafts, commit, truncate, fork, pages: the issue-9 wire
contract; adopt and expect_newest: issue 26), and the generator of the
larger test vectors in this folder and in rehome/.

The model is deliberately naive (a plain list of held positions, each with
its slot, pinned and tentative flags; slots handed out by looking at the
list) so that it shares no arithmetic with the C ring buffer.

  gen.py --check    replays every vector in this folder and in rehome/
                    against the model,
                    runs a small randomized self-check of the model's own
                    invariants and compares its freed pages with vLLM's
                    sliding-window freeing;
  gen.py --write    regenerates the generated vectors (the hand-written ones
                    are never touched), then checks;
  gen.py --fuzz N   runs the randomized self-check over N sequences.
"""
import copy
import json
import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REHOME = os.path.join(HERE, "rehome")     # adopt and expect_newest
MAX_POS = 2**32 - 1

# The keys of a vector op that describe its request; the others are the
# answer (the same list the C and Python replayers use).
REQUEST_KEYS = ("session", "step", "tentative", "commit", "evict", "truncate",
                "fork", "check", "error", "adopt", "expect_newest")
# The fields of an adopt op's request body ("adopt": {...}).
ADOPT_KEYS = ("budget", "sinks", "lookahead", "page_size", "kept", "newest",
              "slots", "pages", "replace")
# The keys a check op may compare against the session view.
VIEW_KEYS = ("kept", "slots", "tentative", "pages", "size", "newest",
             "budget", "sinks", "lookahead", "page_size")


def is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def is_pos(v):
    return is_int(v) and 0 <= v <= MAX_POS


class Held:
    """One held position."""
    __slots__ = ("pos", "slot", "pinned", "tentative")

    def __init__(self, pos, slot, pinned, tentative):
        self.pos, self.slot = pos, slot
        self.pinned, self.tentative = pinned, tentative


class Model:
    """One session. Every request method returns (error, answer): error is
    None or a list of the error codes whose conditions hold (a refused
    request changes nothing); answer is the 200 answer's fields, in the
    order the API writes them."""

    def __init__(self, budget, sinks, lookahead=1, page_size=0):
        if not (is_int(budget) and budget >= 1 and is_int(sinks)
                and 0 <= sinks < budget):
            raise ValueError("invalid budget/sinks")
        if not (is_int(lookahead) and lookahead >= 1):
            raise ValueError("invalid lookahead")
        if not (is_int(page_size) and 0 <= page_size <= 65536):
            raise ValueError("invalid page_size")
        self.budget, self.sinks = budget, sinks
        self.lookahead, self.page_size = lookahead, page_size
        self.nslots = budget + lookahead      # ring slots 0..nslots-1
        self.held = []                        # Held, ascending positions
        self.newest = 0
        self.committed = 0                    # C of the contract
        # The last applied step/commit/truncate request (the daemon answers
        # an identical request as a replay), and the last one that changed
        # the state: vectors avoid both.
        self.record = None
        self.record_changed = None
        self._append(0, False)

    # -- bookkeeping ---------------------------------------------------

    def pinned_count(self):
        return len([h for h in self.held if h.pinned])

    def pending(self):
        return [h.pos for h in self.held if h.tentative]

    def _append(self, pos, tentative):
        """Appends `pos` (above everything held) and returns its slot."""
        npinned = self.pinned_count()
        if npinned < self.sinks:
            # Pinned position number k sits in slot k.
            slot, pinned = npinned, True
        else:
            pinned = False
            unpinned = [h for h in self.held if not h.pinned]
            if not unpinned:
                slot = self.sinks
            else:
                slot = unpinned[-1].slot + 1
                if slot == self.nslots:
                    slot = self.sinks
        if slot in [h.slot for h in self.held]:
            raise AssertionError(f"slot {slot} handed out twice")
        self.held.append(Held(pos, slot, pinned, tentative))
        self.newest = pos
        return slot

    def _evict_to(self, limit):
        """Removes the oldest unpinned positions until at most `limit`
        remain; returns them, oldest first."""
        victims = []
        while len(self.held) > limit:
            unpinned = [h for h in self.held if not h.pinned]
            if not unpinned:
                raise AssertionError("only pinned positions left to evict")
            if unpinned[0].tentative:
                raise AssertionError("evicting a tentative position")
            self.held.remove(unpinned[0])
            victims.append(unpinned[0].pos)
        return victims

    def _commit(self, p):
        """Accepts the drafts <= p, drops the others, evicts to the budget.
        Returns (victims, dropped)."""
        accepted = [h for h in self.held if h.tentative and h.pos <= p]
        dropped = [h for h in self.held if h.tentative and h.pos > p]
        for h in dropped:
            self.held.remove(h)
        for h in accepted:
            h.tentative = False
        self.newest = accepted[-1].pos if accepted else self.committed
        self.committed = self.newest
        return self._evict_to(self.budget), [h.pos for h in dropped]

    def page_set(self):
        if not self.page_size:
            return set()
        return {h.pos // self.page_size for h in self.held}

    def _with_pages(self, answer, before, added=()):
        """Adds the pages of a request: new and freed are the difference
        of the page sets after and before it; transient are the pages of the
        positions it added held at neither end."""
        if self.page_size:
            after = self.page_set()
            within = {p // self.page_size for p in added}
            answer["pages_new"] = sorted(after - before)
            answer["pages_freed"] = sorted(before - after)
            answer["pages_transient"] = sorted(within - before - after)
        return answer

    def irregular(self):
        """True when newest is neither the committed newest nor a pending
        draft: only a truncate into a gap between drafts (or between the
        committed newest and the first draft) gets here. A commit from such
        a state sets newest to C or the last accepted draft, below the
        newest the client was told; the contract's text says so, but the
        vectors stay away from it."""
        return self.newest != max([self.committed] + self.pending())

    # -- requests ------------------------------------------------------

    def step_errors(self, positions, tentative=False, commit=None):
        if not isinstance(positions, list) or not isinstance(tentative, bool):
            return ["invalid_field"]
        if not positions and commit is None:
            return ["invalid_field"]      # neither pos nor positions
        for i, p in enumerate(positions):
            if not is_pos(p) or (i > 0 and p <= positions[i - 1]):
                return ["invalid_position"]
        if commit is not None and not is_pos(commit):
            return ["invalid_position"]
        errs = []
        pending = self.pending()
        if commit is not None:
            if commit < self.committed:
                errs.append("invalid_position")
            accepted = [p for p in pending if p <= commit]
            newest_after = accepted[-1] if accepted else self.committed
            pending_after = 0
        else:
            newest_after, pending_after = self.newest, len(pending)
        if positions and positions[0] <= newest_after:
            errs.append("stale_position")
        if pending and not tentative and commit is None:
            errs.append("tentative_pending")
        if tentative and pending_after + len(positions) > self.lookahead:
            errs.append("too_many_positions")
        return errs

    def step(self, positions, tentative=False, commit=None):
        errs = self.step_errors(positions, tentative, commit)
        if errs:
            return errs, None
        before = self.page_set()
        victims, dropped, slots = [], [], []
        if commit is not None:
            victims, dropped = self._commit(commit)
        if tentative:
            for p in positions:
                slots.append(self._append(p, True))
        else:
            for i in range(0, len(positions), self.lookahead):
                for p in positions[i:i + self.lookahead]:
                    slots.append(self._append(p, False))
                victims += self._evict_to(self.budget)
                self.committed = self.newest
        answer = {"victims": victims, "slots": slots, "size": len(self.held),
                  "newest": self.newest}
        if commit is not None:
            answer["dropped"] = dropped
        return None, self._with_pages(answer, before, positions)

    def commit(self, p):
        if not is_pos(p) or p < self.committed:
            return ["invalid_position"], None
        before = self.page_set()
        victims, dropped = self._commit(p)
        return None, self._with_pages(
            {"victims": victims, "dropped": dropped, "size": len(self.held),
             "newest": self.newest}, before)

    def truncate(self, p):
        if not is_pos(p) or p < 1:
            return ["invalid_position"], None
        before = self.page_set()
        removed = [h for h in self.held if h.pos >= p]
        for h in removed:
            self.held.remove(h)
        if p <= self.newest:
            self.newest = p - 1
            self.committed = min(self.committed, p - 1)
            if not self.pending():  # with no draft left, C is the newest
                self.committed = self.newest
        return None, self._with_pages(
            {"removed": [h.pos for h in removed], "size": len(self.held),
             "newest": self.newest}, before)

    def evict(self, budget):
        errs = []
        if not is_int(budget) or budget < 1 or budget <= self.sinks:
            errs.append("invalid_budget")
        if self.pending():
            errs.append("tentative_pending")
        if errs:
            return errs, None
        before = self.page_set()
        victims = self._evict_to(budget)
        return None, self._with_pages(
            {"victims": victims, "size": len(self.held)}, before)

    def fork(self):
        child = copy.deepcopy(self)
        child.record = child.record_changed = None
        return child

    def diverges(self, expect):
        """The error of a request carrying expect_newest (None: absent)."""
        if expect is None:
            return []
        if not is_pos(expect):
            return ["invalid_position"]
        return ["diverged"] if expect != self.newest else []

    def is_state(self, kept, newest, slots):
        """True when the session is in this state: no drafts, these
        positions held (in these slots, when given) and this newest."""
        v = self.view()
        return (not v["tentative"] and v["kept"] == kept
                and v["newest"] == newest
                and (slots is None or v["slots"] == slots))

    def config(self):
        return (self.budget, self.sinks, self.lookahead, self.page_size)

    def size(self):
        return len(self.held)

    def view(self):
        out = {"kept": [h.pos for h in self.held],
               "slots": [h.slot for h in self.held],
               "tentative": self.pending(), "size": len(self.held),
               "newest": self.newest, "budget": self.budget,
               "sinks": self.sinks, "lookahead": self.lookahead,
               "page_size": self.page_size}
        out["pages"] = sorted(self.page_set())
        return out

    def state(self):
        """Everything a request may change (for 'refused changes nothing')."""
        return ([(h.pos, h.slot, h.pinned, h.tentative) for h in self.held],
                self.newest, self.committed)

    # -- the model's own invariants ---------------------------------------

    def check_invariants(self):
        held = self.held
        pos = [h.pos for h in held]
        slots = [h.slot for h in held]
        assert pos == sorted(set(pos)), f"kept not strictly ascending: {pos}"
        assert len(held) <= self.budget + self.lookahead, "over budget + L"
        assert len(set(slots)) == len(slots), f"a slot held twice: {slots}"
        assert all(0 <= s < self.nslots for s in slots), f"slot range {slots}"
        committed = [h for h in held if not h.tentative]
        assert len(committed) <= self.budget, "committed part over budget"
        assert len(self.pending()) <= self.lookahead, "drafts over L"
        pinned = [h for h in held if h.pinned]
        assert len(pinned) <= self.sinks
        assert [h.slot for h in pinned] == list(range(len(pinned))), \
            "pinned position k not in slot k"
        assert held[:len(pinned)] == pinned, "a pinned position after an " \
            "unpinned one"
        unpinned = held[len(pinned):]
        if unpinned:
            assert len(pinned) == self.sinks, "unpinned held below sinks"
        for a, b in zip(unpinned, unpinned[1:]):
            want = a.slot + 1 if a.slot + 1 < self.nslots else self.sinks
            assert b.slot == want, f"unpinned run not contiguous: {slots}"
        assert all(self.sinks <= h.slot for h in unpinned)
        assert all(p <= self.newest for p in pos), "held above newest"
        assert self.committed <= self.newest
        assert all(p > self.committed for p in self.pending()), \
            "a draft at or below the committed newest"
        tent = [h.tentative for h in held]
        assert tent == sorted(tent), "a draft below a committed position"


# ---- adoption (issue 26) -------------------------------------------------

# Positions a state may need stepped to find its layout; the vectors stay
# far below.
ADOPT_SIM_LIMIT = 100000


def pins_and_run(budget, sinks, lookahead, kept):
    """Where a state's positions can sit, found by stepping a model: a
    fresh session stepped through the pinned positions of `kept` (its first
    `sinks`), with nothing else held (a window empties its run when a
    truncation takes every unpinned position, and its ring then starts
    again at slot `sinks`); from there t of the positions between the last
    pin and the oldest unpinned one u stepped (and evicted) before u, for
    every t from 0 to all of them. Returns (the pins' slots, the slots u
    can be in, the slot u takes when all are stepped: the canonical
    layout)."""
    np = min(len(kept), sinks)
    lastpin = kept[np - 1] if np else -1
    base = Model(budget, sinks, lookahead)
    if sinks == 0:
        base.held = []          # the run empty: position 0 not held
        base.newest = base.committed = -1
    for p in kept[1 if sinks else 0:np]:
        assert base.step([p])[0] is None
    pin_slots = [h.slot for h in base.held]
    if np == len(kept):
        return pin_slots, set(), None
    u = kept[np]
    room = u - lastpin - 1
    if room > ADOPT_SIM_LIMIT:
        raise Refused(f"adopting {u} would step {room} positions")
    heads, m = {}, copy.deepcopy(base)
    for t in range(room + 1):
        # t positions stepped between the last pin and u, then u.
        trial = copy.deepcopy(m)
        trial.step([u])
        heads[t] = trial.held[-1].slot
        if t < room:
            m.step([lastpin + 1 + t])
    return pin_slots, set(heads.values()), heads[room]


def adopt_errors(cfg, body):
    """The error codes whose conditions an adopt body meets (the session
    table aside), restated from issue 26 and checked by stepping a model:
    (errors, state) with state = (kept, newest, slots or None, pages)."""
    budget, sinks, lookahead, page_size = cfg
    kept, newest = body.get("kept"), body.get("newest")
    slots, pages = body.get("slots"), body.get("pages")
    if not isinstance(kept, list) or not all(is_int(p) for p in kept):
        return ["invalid_field"], None
    if not all(is_pos(p) for p in kept) or not is_pos(newest):
        return ["invalid_position"], None
    errs = []
    n = len(kept)
    if n == 0 or any(b <= a for a, b in zip(kept, kept[1:])):
        errs.append("invalid_state")            # empty, repeated, order
    elif n > budget:
        errs.append("invalid_state")            # more than the budget
    elif sinks and kept[0] != 0:
        errs.append("invalid_state")            # position 0 is pinned
    elif newest < kept[-1] or (newest > kept[-1] and newest == MAX_POS):
        errs.append("invalid_state")            # newest below / past max
    elif slots is not None:
        pin_slots, heads, _ = pins_and_run(budget, sinks, lookahead, kept)
        np = min(n, sinks)
        if (not isinstance(slots, list) or len(slots) != n
                or not all(is_int(x) and 0 <= x < budget + lookahead
                           for x in slots)
                or slots[:np] != pin_slots):
            errs.append("invalid_state")
        elif np < n:
            run = [slots[np]]
            for _ in range(n - np - 1):
                nxt = run[-1] + 1
                run.append(sinks if nxt == budget + lookahead else nxt)
            if slots[np:] != run or slots[np] not in heads:
                errs.append("invalid_state")
    if pages is not None and not errs:
        want = sorted({p // page_size for p in kept}) if page_size else []
        if pages != want:
            errs.append("invalid_state")
    return errs, (kept, newest, slots)


def adopted(cfg, kept, newest, slots):
    """The session an accepted adoption makes."""
    budget, sinks, lookahead, page_size = cfg
    m = Model(budget, sinks, lookahead, page_size)
    np = min(len(kept), sinks)
    if slots is None:
        pin_slots, _, head = pins_and_run(budget, sinks, lookahead, kept)
        slots = list(pin_slots)
        for i in range(np, len(kept)):
            slots.append(head)
            head = head + 1 if head + 1 < m.nslots else sinks
    m.held = [Held(p, x, i < np, False)
              for i, (p, x) in enumerate(zip(kept, slots))]
    m.newest = m.committed = newest
    return m


def adopt_config(body, default=None):
    """The configuration an adopt body gives (the vectors always give all
    four fields; `default` fills them otherwise)."""
    d = default or (None, None, 1, 0)
    return tuple(body.get(k, d[i]) for i, k in enumerate(
        ("budget", "sinks", "lookahead", "page_size")))


def adopt_answer(m):
    """An adoption's answer: the session view without its id, in the API's
    order."""
    v = m.view()
    out = {"budget": v["budget"], "sinks": v["sinks"]}
    if m.lookahead != 1:
        out["lookahead"] = m.lookahead
    if m.page_size:
        out["page_size"] = m.page_size
    out.update(size=v["size"], newest=v["newest"], kept=v["kept"],
               slots=v["slots"])
    if m.page_size:
        out["pages"] = v["pages"]
    return out


def adopt(sessions, name, body):
    """Runs an adopt of session `name` on `sessions` (name -> Model):
    (errors, answer, status); on success sessions[name] is the adopted or
    unchanged session."""
    if not isinstance(body, dict) or set(body) - set(ADOPT_KEYS):
        return ["invalid_field"], None, None
    cfg = adopt_config(body)
    try:
        Model(*cfg)
    except (ValueError, TypeError):
        raise Refused(f"adopt with configuration {cfg}") from None
    replace = body.get("replace", False)
    if not isinstance(replace, bool):
        return ["invalid_field"], None, None
    errs, state = adopt_errors(cfg, body)
    old = sessions.get(name)
    if state is not None and old is not None:
        same = old.config() == cfg and old.is_state(*state)
        if not same and not replace:
            errs.append("session_exists")
        elif same and not errs:
            return None, adopt_answer(old), 200
    if errs:
        return errs, None, None
    sessions[name] = adopted(cfg, *state)
    return None, adopt_answer(sessions[name]), 200 if old else 201


# ---- requests as vector ops -------------------------------------------

def request_key(req):
    """The replay record of a step/commit/truncate request, else None."""
    if "step" in req:
        return ("step", tuple(req["step"]), bool(req.get("tentative", False)),
                req.get("commit"))
    if "commit" in req:
        return ("commit", req["commit"])
    if "truncate" in req:
        return ("truncate", req["truncate"])
    return None


def apply_request(m, req):
    """Runs one request op (its request keys only) on model `m`; returns
    (errors, answer) like the Model methods. An expect_newest other than
    the session's newest adds diverged to the conditions that hold."""
    diverged = m.diverges(req.get("expect_newest"))
    if diverged:
        errs, _ = apply_request(m.fork(), {k: v for k, v in req.items()
                                           if k != "expect_newest"})
        return (errs or []) + diverged, None
    if "step" in req:
        return m.step(req["step"], req.get("tentative", False),
                      req.get("commit"))
    if "commit" in req:
        return m.commit(req["commit"])
    if "truncate" in req:
        return m.truncate(req["truncate"])
    if "evict" in req:
        return m.evict(req["evict"])
    raise ValueError(f"not a request op: {req!r}")


class Refused(Exception):
    """A request a vector must not contain (see Recorder.do)."""


class Recorder:
    """Runs requests through the model and records them as vector ops.

    A request is refused (Refused, nothing changed) when its outcome would
    not pin the contract down: it repeats the session's replay record, it
    meets more than one error condition (the contract gives no order), or it
    commits from an irregular state (see Model.irregular)."""

    def __init__(self, budget, sinks, lookahead=1, page_size=0,
                 full_checks=True, drafts=None):
        self.sessions = {None: Model(budget, sinks, lookahead, page_size)}
        self.ops = []
        self.full_checks = full_checks
        self.drafts = drafts   # checks list "tentative" (None: when pending)

    def model(self, req):
        name = req.get("session")
        if name not in self.sessions:
            raise Refused(f"unknown session {name!r}")
        return self.sessions[name]

    def check_view(self, m):
        v = m.view()
        if not self.full_checks:
            return {"kept": v["kept"], "slots": v["slots"]}
        out = {"kept": v["kept"], "slots": v["slots"]}
        if self.drafts or (self.drafts is None and v["tentative"]):
            out["tentative"] = v["tentative"]
        if m.page_size:
            out["pages"] = v["pages"]
        out["size"], out["newest"] = v["size"], v["newest"]
        return out

    def do(self, req):
        """Records one op; `req` holds its request keys (a "check" op is
        {"check": True})."""
        head = {"session": req["session"]} if "session" in req else {}
        if "adopt" in req:
            errs, answer, _ = adopt(self.sessions, req.get("session"),
                                    req["adopt"])
            op = {**head, "adopt": req["adopt"]}
            if errs:
                if len(errs) > 1:
                    raise Refused(f"ambiguous error {errs}")
                op["error"] = errs[0]
            else:
                op.update(answer)
            self.ops.append(op)
            return op
        m = self.model(req)
        if "check" in req:
            op = {**head, "check": self.check_view(m)}
            self.ops.append(op)
            return op
        if "fork" in req:
            name = req["fork"]
            if not isinstance(name, str) or name in self.sessions:
                raise Refused(f"fork into {name!r}")
            op = {**head, "fork": name}
            if "expect_newest" in req:
                op["expect_newest"] = req["expect_newest"]
            errs = m.diverges(req.get("expect_newest"))
            if errs:
                op["error"] = errs[0]
            else:
                self.sessions[name] = m.fork()
            self.ops.append(op)
            return op
        key = request_key(req)
        if key is not None and key in (m.record, m.record_changed):
            raise Refused(f"repeats the replay record {key}")
        if (("commit" in req and req["commit"] is not None) and m.irregular()
                and is_pos(req["commit"])):
            raise Refused("commit from an irregular state")
        before = m.state()
        errs, answer = apply_request(m, req)
        op = {**head}
        for k in ("step", "tentative", "commit", "evict", "truncate",
                  "expect_newest"):
            if k in req:
                op[k] = req[k]
        if errs:
            if len(errs) > 1:
                raise Refused(f"ambiguous error {errs}")
            op["error"] = errs[0]
        else:
            if key is not None:
                m.record = key
                if m.state() != before:
                    m.record_changed = key
            op.update(answer)
        self.ops.append(op)
        return op


def record(name, description, budget, sinks, requests):
    """Builds an old-format vector (lookahead 1, no pages) by running
    `requests` (("step", [..]) or ("evict", B) or ("check",)) through the
    model and recording its answers."""
    r = Recorder(budget, sinks, full_checks=False)
    for req in requests:
        if req[0] == "step":
            r.do({"step": req[1]})
        elif req[0] == "evict":
            r.do({"evict": req[1]})
        else:
            r.do({"check": True})
    return {"name": name, "description": description, "budget": budget,
            "sinks": sinks, "ops": r.ops}


def record_ext(name, description, budget, sinks, requests, lookahead=1,
               page_size=0, drafts=None):
    """Builds a vector in the extended format from request dicts."""
    r = Recorder(budget, sinks, lookahead, page_size, drafts=drafts)
    for req in requests:
        r.do(req)
    vec = {"name": name, "description": description, "budget": budget,
           "sinks": sinks}
    if lookahead != 1:
        vec["lookahead"] = lookahead
    if page_size != 0:
        vec["page_size"] = page_size
    vec["ops"] = r.ops
    vec["_style"] = "lines"
    return vec


# ---- replaying a vector -----------------------------------------------

def replay(vec):
    """Replays one vector against the model; returns a list of mismatches."""
    bad = []
    try:
        m0 = Model(vec["budget"], vec.get("sinks", 0), vec.get("lookahead", 1),
                   vec.get("page_size", 0))
    except ValueError as e:
        return [f"configuration: {e}"]
    sessions = {None: m0}
    for i, op in enumerate(vec["ops"]):
        unknown = [k for k in op if k not in REQUEST_KEYS and k not in (
            "victims", "slots", "size", "newest", "dropped", "removed",
            "pages_new", "pages_freed", "pages_transient") and not (
            "adopt" in op and k in VIEW_KEYS)]
        if unknown:
            bad.append(f"op {i}: unknown keys {unknown}")
            continue
        name = op.get("session")
        if "adopt" in op:
            bad += [f"op {i}: {b}" for b in replay_adopt(sessions, name, op)]
            continue
        if name not in sessions:
            bad.append(f"op {i}: session {name!r} was never forked")
            continue
        m = sessions[name]
        kinds = [k for k in ("step", "evict", "truncate", "fork", "check")
                 if k in op]
        if not kinds and "commit" in op:
            kinds = ["commit"]
        if len(kinds) != 1:
            bad.append(f"op {i}: not one operation: {op!r}")
            continue
        kind = kinds[0]
        if "tentative" in op and (kind != "step" or op["tentative"] is not True):
            bad.append(f"op {i}: \"tentative\" is only true, on a step")
        if kind == "check":
            view = m.view()
            for k, want in op["check"].items():
                if k not in VIEW_KEYS:
                    bad.append(f"op {i}: check of unknown field {k!r}")
                elif view[k] != want:
                    bad.append(f"op {i}: view's {k} is {view[k]}, vector "
                               f"says {want}")
            continue
        if kind == "fork":
            child = op["fork"]
            errs = m.diverges(op.get("expect_newest"))
            if not isinstance(child, str) or child in sessions:
                bad.append(f"op {i}: fork into {child!r}")
            elif set(op) - {"fork", "session", "expect_newest", "error"}:
                bad.append(f"op {i}: a fork has no expected fields")
            elif errs != ([op["error"]] if "error" in op else []):
                bad.append(f"op {i}: fork errors {errs}, vector says "
                           f"{op.get('error')!r}")
            elif not errs:
                sessions[child] = m.fork()
            continue
        key = request_key(op)
        if key is not None and key in (m.record, m.record_changed):
            bad.append(f"op {i}: repeats the session's last request {key}: "
                       "the daemon would answer it as a replay")
            continue
        if kind in ("step", "commit") and op.get("commit") is not None \
                and m.irregular():
            bad.append(f"op {i}: commits from an irregular state")
        before = m.state()
        errs, got = apply_request(m, op)
        answer = {k: v for k, v in op.items() if k not in REQUEST_KEYS}
        if errs or "error" in op:
            if errs and len(errs) > 1:
                bad.append(f"op {i}: ambiguous, conditions of {errs} hold")
            elif errs != ([op["error"]] if "error" in op else None):
                bad.append(f"op {i}: error {errs}, vector says "
                           f"{op.get('error')!r}")
            if answer:
                bad.append(f"op {i}: an error op with answer fields")
            if m.state() != before:
                bad.append(f"op {i}: model changed on an error")
            continue
        if key is not None:
            m.record = key
            if m.state() != before:
                m.record_changed = key
        if answer != got:
            bad.append(f"op {i}: model gives {got}, vector says {answer}")
    return bad


def replay_adopt(sessions, name, op):
    """Replays an adopt op; returns its mismatches."""
    if set(op) - set(REQUEST_KEYS) - set(VIEW_KEYS) or \
            set(op) & set(REQUEST_KEYS) - {"adopt", "session", "error"}:
        return [f"an adopt op with other keys: {op!r}"]
    body = op["adopt"]
    if not isinstance(body, dict) or any(
            k not in body for k in ("budget", "sinks", "lookahead",
                                    "page_size", "kept", "newest")):
        return ["an adopt op gives the configuration, kept and newest"]
    before = {k: m.state() for k, m in sessions.items()}
    try:
        errs, got, _ = adopt(sessions, name, body)
    except Refused as e:
        return [f"adopt refused by the model: {e}"]
    answer = {k: v for k, v in op.items() if k not in REQUEST_KEYS}
    if errs or "error" in op:
        out = []
        if errs and len(errs) > 1:
            out.append(f"ambiguous, conditions of {errs} hold")
        elif errs != ([op["error"]] if "error" in op else None):
            out.append(f"error {errs}, vector says {op.get('error')!r}")
        if answer:
            out.append("an error op with answer fields")
        if {k: m.state() for k, m in sessions.items()} != before:
            out.append("model changed on an error")
        return out
    if answer != got:
        return [f"model gives {got}, vector says {answer}"]
    return []


# ---- the generated vectors -----------------------------------------------

def S(positions, **kw):
    """A step request."""
    return {"step": list(positions), **kw}


CHECK = {"check": True}


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
    out += generated_engine()
    return out


def generated_engine():
    """The vectors of the engine workflows (issue 9)."""
    out = []

    # -- lookahead ------------------------------------------------------
    out.append(record_ext(
        "lookahead-chunk-16",
        "Budget 8, lookahead 16 (a ring of 24 slots): the prefill chunk 1..16 "
        "is one sub-step, all 16 land in slots 1..16 before 0..8 are "
        "evicted; later chunks wrap the ring from slot 23 to slot 0, single "
        "steps and a 3-position step follow, an evict shrinks the window and "
        "the next chunk refills it.",
        8, 0, [S(range(1, 17)), CHECK, S([17]), S([18, 19, 20]), CHECK,
               S(range(21, 37)), CHECK, {"evict": 3}, S(range(37, 53)),
               S([53]), CHECK], lookahead=16))
    chunk = [S(range(1, 17)), CHECK, S([17]), S(range(18, 24)), CHECK]
    out.append(record_ext(
        "substeps-lookahead-1",
        "The chunk 1..16 at budget 8 with lookahead 1: sixteen sub-steps of "
        "one position, each evicting once the window is full; a ring of 9 "
        "slots. Compare substeps-lookahead-4: victims, size and newest are "
        "identical at any lookahead (eviction always takes the oldest), only "
        "the slots differ, because the ring has budget + lookahead slots.",
        8, 0, chunk, lookahead=1))
    out.append(record_ext(
        "substeps-lookahead-4",
        "The chunk 1..16 at budget 8 with lookahead 4: four sub-steps of four "
        "positions (append four, then evict to 8); a ring of 12 slots. "
        "Victims, size and newest equal substeps-lookahead-1's; the slots "
        "differ (1..11, then 0..4 after the wrap from 11).",
        8, 0, chunk, lookahead=4))

    # -- drafts and commit ----------------------------------------------
    spec = [
        S(range(1, 9)),
        S([9, 10, 11, 12], tentative=True), CHECK,
        {"commit": 10},                          # accept 9, 10; drop 11, 12
        CHECK,
        S([11, 12, 13, 14], tentative=True, commit=10),   # nothing pending
        S([13, 14, 15, 16], tentative=True, commit=12),   # accept 11, 12
        S([16, 17, 18, 19], tentative=True, commit=15),   # accept 13..15
        CHECK,
        S([19, 20, 21], tentative=True, commit=18),        # accept all
        S([], commit=19),                        # commit-only: accept 19
        S([20, 21], tentative=True),
        S([22, 23], tentative=True),             # 4 pending = lookahead
        CHECK,
        {"commit": 100},                         # above newest: accept all
        S([24], tentative=True),
        S([24, 25], commit=23),                  # drop 24, step it for good
        CHECK,
    ]
    out.append(record_ext(
        "speculative-drafts",
        "Speculative decoding at budget 8, lookahead 4: 4 drafts (tentative, "
        "nothing evicted, size up to 12), a commit op accepting 2 and "
        "dropping 2 (dropped slots are reused), then iterations that commit "
        "the previous drafts and send the next ones in one step request "
        "(victims: the commit's eviction), a commit-only step (\"step\":[]), "
        "drafts sent in two requests up to lookahead, a commit above newest "
        "(accepts every draft), and a step with commit whose plain positions "
        "re-step a dropped draft for good.",
        8, 0, spec, lookahead=4, drafts=True))
    out.append(record_ext(
        "speculative-drafts-sinks",
        "The speculative-drafts requests with 4 sinks: positions 0..3 stay "
        "in slots 0..3 through drafts and commits, the drafts and the ring "
        "turn over slots 4..11 (budget 8 + lookahead 4).",
        8, 4, spec, lookahead=4, drafts=True))
    out.append(record_ext(
        "speculative-errors",
        "Refusals around drafts (budget 5, lookahead 3), each leaving the "
        "session unchanged: a plain step and an evict while drafts are "
        "pending (tentative_pending), more drafts than lookahead in one "
        "request or together with the pending ones (too_many_positions), a "
        "commit below the committed newest, as an op and as a step field "
        "(invalid_position), a draft at or below the newest draft "
        "(stale_position, also at the newest the request's commit leaves), a "
        "step with commit that drops the drafts and steps their positions "
        "for good, and a commit op with nothing pending (valid, empty "
        "lists).",
        5, 0, [
            S(range(1, 7)),
            S([7, 8], tentative=True),
            S([9]),                                      # tentative_pending
            {"evict": 3},                                # tentative_pending
            S([9, 10], tentative=True),                  # 2 + 2 > 3
            S([8], tentative=True),                      # stale: newest 8
            {"commit": 5},                               # below C = 6
            S([9], tentative=True, commit=5),            # below C = 6
            S([7], commit=6),                  # after commit 6 newest is 6: ok
            S([8, 9, 10], tentative=True),
            S([11, 12, 13, 14], tentative=True, commit=10),   # over 3
            S([8], tentative=True, commit=8),            # stale after commit
            S([9, 10, 11], commit=8),            # drops 9, 10, re-steps them
            CHECK,
            {"commit": 11},                              # nothing pending
            {"commit": 10},                              # below C = 11
            S([12, 13, 14, 15], tentative=True),         # over lookahead
            {"evict": 2},
            CHECK,
        ], lookahead=3, drafts=True))

    # -- truncate ---------------------------------------------------------
    out.append(record_ext(
        "truncate-window",
        "Truncate at budget 5, sinks 0: into the unpinned run (the next "
        "position takes the slot after the newest one left), above newest "
        "(nothing changes, not an error), from 1 (everything goes, size 0; "
        "the next position takes slot 0), and from 0 (invalid_position).",
        5, 0, [
            S(range(1, 10)), CHECK,
            {"truncate": 8}, CHECK,
            S([8, 9]),
            {"truncate": 50},
            {"truncate": 10},                             # above newest 9
            {"truncate": 0},
            {"truncate": 1}, CHECK,
            {"evict": 2},
            S([1, 2, 3]), CHECK,
            S(range(4, 12)), CHECK,
        ], drafts=False))
    out.append(record_ext(
        "truncate-sinks",
        "Truncate into the sinks (budget 6, sinks 4): from 2 removes pinned "
        "2, 3 and every unpinned position, newest 1; the next positions are "
        "pinned again in slots 2, 3 and the ring restarts at slot 4. Then "
        "a truncate of the whole ring only, and one from 1 (position 0 "
        "always stays). Last, a draft appended while a sink is free is "
        "pinned (slot 2) like any appended position; the commit dropping it "
        "frees the pinned slot and the next step pins 2 there again.",
        6, 4, [
            S(range(1, 12)), CHECK,
            {"truncate": 2}, CHECK,
            S([2, 3, 4, 5]), CHECK,
            S(range(6, 10)), CHECK,
            {"truncate": 4}, CHECK,
            S([4, 5]),
            {"truncate": 1}, CHECK,
            S(range(1, 8)), CHECK,
            {"truncate": 2}, S([2], tentative=True), CHECK,
            {"commit": 1}, CHECK,
            S([2, 3, 4]), CHECK,
        ], drafts=None))
    out.append(record_ext(
        "truncate-drafts",
        "Truncate while drafts are pending (budget 5, lookahead 4): from "
        "inside the drafts (the ones below stay tentative, newest is the "
        "last kept draft, the committed newest stays), new drafts and a "
        "commit, then from below the committed newest (committed positions "
        "and every draft go; newest and the committed newest become P - 1, "
        "so commit 7 is valid and empty), with 1 sink; then drafts above a "
        "gap, all removed by a truncate from inside the gap: with no draft "
        "left the committed newest is the new newest, P - 1, so a commit "
        "below it is invalid_position.",
        5, 1, [
            S(range(1, 8)),
            S([8, 9, 10, 11], tentative=True), CHECK,
            {"truncate": 10}, CHECK,
            S([10, 11], tentative=True), CHECK,
            {"commit": 10}, CHECK,
            S([11, 12, 13], tentative=True),
            {"truncate": 8}, CHECK,
            {"commit": 7},
            S([8, 9], tentative=True, commit=7), CHECK,
            {"commit": 9},
            S([20, 21], tentative=True),
            {"truncate": 15}, CHECK,
            {"commit": 10},
            {"commit": 14},
        ], lookahead=4, drafts=True))

    # -- fork -------------------------------------------------------------
    out.append(record_ext(
        "fork-divergent",
        "A fork copies the window (budget 4, sinks 1, lookahead 2); then "
        "the parent and the child step, evict and truncate differently and "
        "each view shows only its own requests. A fork of the child "
        "(grandchild) copies the child's state.",
        4, 1, [
            S(range(1, 7)),
            {"fork": "child"},
            {"session": "child", "check": True},
            S([7, 8]),
            {"session": "child", "step": [10]},
            CHECK, {"session": "child", "check": True},
            {"session": "child", "evict": 2},
            {"truncate": 7},
            S([7, 8, 9, 10, 11]),
            {"session": "child", "step": [11, 12, 13]},
            {"session": "child", "fork": "grandchild"},
            {"session": "grandchild", "truncate": 12},
            CHECK, {"session": "child", "check": True},
            {"session": "grandchild", "check": True},
            {"session": "grandchild", "step": [12]},
            {"session": "grandchild", "check": True},
        ], lookahead=2, drafts=False))
    out.append(record_ext(
        "fork-drafts",
        "A fork of a session with drafts pending (budget 4, lookahead 3, "
        "pages of 4): the child holds the same drafts and committed newest; "
        "the parent accepts all, the child accepts one; both keep going. "
        "A fork has no replay record: after the parent's commit 9 and a new "
        "fork, commit 9 on that child is a new request (nothing pending, "
        "empty lists) and not the parent's answer replayed.",
        4, 0, [
            S(range(1, 7)),
            S([7, 8, 9], tentative=True),
            {"fork": "child"},
            {"session": "child", "check": True},
            {"commit": 9},
            {"session": "child", "commit": 7},
            CHECK, {"session": "child", "check": True},
            {"session": "child", "step": [8, 9]},
            {"session": "child", "evict": 2},
            {"fork": "late"},
            {"session": "late", "commit": 9},
            {"session": "late", "step": [10, 11, 12], "tentative": True},
            S([10, 11, 12]),
            CHECK, {"session": "child", "check": True},
            {"session": "late", "check": True},
        ], lookahead=3, page_size=4, drafts=True))

    # -- pages ------------------------------------------------------------
    out.append(record_ext(
        "pages-window",
        "Pages of 4 at budget 4, lookahead 8, sinks 0 (pages_new / "
        "pages_freed are the net difference over each request): steps "
        "entering pages, a chunk 7..18 that enters and leaves page 2 in one "
        "request (pages_transient) while it enters 3, 4 and frees 0, 1, an "
        "evict freeing a page, drafts opening a page and the commit dropping "
        "them freeing it again (with the page its eviction empties), a "
        "commit+step request, truncates freeing every page (size 0, newest "
        "P - 1 even below positions once held).",
        4, 0, [
            S([1, 2, 3]), S([4]), S([5, 6]), CHECK,
            S(range(7, 19)), CHECK,
            {"evict": 1}, CHECK,
            S([19, 20, 21, 22]),
            S([23, 24, 25], tentative=True), CHECK,
            {"commit": 23}, CHECK,
            S([24, 25, 26], tentative=True, commit=23),
            S([27, 28], commit=26),
            {"truncate": 22}, CHECK,
            S([40]),
            {"truncate": 30}, CHECK,
        ], lookahead=8, page_size=4, drafts=True))
    out.append(record_ext(
        "pages-sinks",
        "Pages of 16 with 4 sinks (budget 20, lookahead 16): page 0 stays "
        "held through the pinned positions 0..3 while the ring moves on; "
        "chunks of 16 enter one page and free another; a chunk 49..99 "
        "entering and leaving page 4 in one request (transient); an evict freeing a "
        "page; 16 drafts opening page 7 and a commit dropping 14 of them "
        "freeing it; a truncate freeing a page; a truncate into the sinks "
        "(from 2) freeing every page but 0; refilling from 2.",
        20, 4, [
            S(range(1, 17)), S(range(17, 33)), CHECK,
            S(range(33, 49)), CHECK,
            S(range(49, 100)), CHECK,
            {"evict": 5}, CHECK,
            S(range(100, 116), tentative=True), CHECK,
            {"commit": 101}, CHECK,
            S([110, 111], commit=101),
            {"truncate": 96}, CHECK,
            S(range(96, 140)), CHECK,
            {"truncate": 2}, CHECK,
            S(range(2, 40)), CHECK,
        ], lookahead=16, page_size=16, drafts=True))

    out.append(record_ext(
        "pages-transient",
        "Pages of 2 at budget 3, lookahead 4, sinks 0: requests stepping "
        "more positions than the budget write pages they also empty "
        "(pages_transient: allocate for the pass, free after it). The "
        "issue's example 1..7 (page 0 freed, page 1 transient, 2 and 3 "
        "new); a chunk 8..16 (pages 4..6 transient); positions with gaps "
        "(victims not a run, so the record is kept as arrays: pages 10..12 "
        "transient); drafts (nothing evicted, nothing transient) then a "
        "commit+step past the budget (page 18 transient).",
        3, 0, [
            S(range(1, 8)), CHECK,
            S(range(8, 17)), CHECK,
            S([20, 23, 24, 29, 31, 33]), CHECK,
            S([34, 35], tentative=True), CHECK,
            S([36, 37, 38, 39, 40], commit=35), CHECK,
        ], lookahead=4, page_size=2, drafts=True))
    out.append(record_ext(
        "pages-transient-sinks",
        "Pages of 4 with 2 sinks at budget 5 (lookahead 2): page 0 keeps "
        "the sinks, so the first victim's page is not transient though "
        "positions 2 and 3 are written and evicted in one request (page 1 "
        "is); 11, 12 evict 8, 9 while 10 keeps their page (the last "
        "victim's page, not transient); a long chunk; an evict (never "
        "transient pages); a step.",
        5, 2, [
            S(range(1, 11)), CHECK,
            S(range(11, 13)), CHECK,
            S(range(13, 40)), CHECK,
            {"evict": 3}, CHECK,
            S(range(40, 44)), CHECK,
        ], lookahead=2, page_size=4, drafts=True))

    out.append(record_ext(
        "pages-transient-1",
        "Pages of 1 at budget 2 (lookahead 4): every position its own page, "
        "so a step of n positions past the budget makes n - 2 of them "
        "transient; and a step of exactly the budget makes none.",
        2, 0, [
            S(range(1, 7)), CHECK,
            S([7, 8]), CHECK,
            S([10, 12, 14, 16, 18]), CHECK,
        ], lookahead=4, page_size=1))

    # -- everything, randomized ---------------------------------------------
    out.append(random_vector(
        "mixed-random",
        "300 operations drawn from a fixed seed (random.Random(9)) at budget "
        "7, sinks 2, lookahead 3, pages of 5: plain and multi-position "
        "steps with gaps, drafts (once pinned), commits (op, step field, "
        "commit-only step), truncates (into the sinks too), evicts, forks "
        "(ops on forks carry \"session\"), checks, and refused requests: "
        "stale_position, tentative_pending (step and evict), "
        "too_many_positions, invalid_position (commit, truncate), "
        "invalid_budget.",
        9, 300, 7, 2, 3, 5))
    return out


def A(kept, newest, cfg, **kw):
    """An adopt request: configuration (budget, sinks, lookahead,
    page_size), positions held, newest, and slots, pages, replace."""
    body = dict(zip(("budget", "sinks", "lookahead", "page_size"), cfg))
    body.update(kept=list(kept), newest=newest)
    for k in ("slots", "pages", "replace"):
        if k in kw:
            body[k] = kw.pop(k)
    return {"adopt": body, **kw}


def generated_rehome():
    """The vectors of re-homing (issue 26): adopt and expect_newest, in
    rehome/ (replayers that predate them read only this folder's files)."""
    out = []
    cfg = (4, 0, 1, 0)
    out.append(record_ext(
        "adopt-window",
        "Budget 4, no sinks: the window after steps 1..6 adopted under "
        "another name with its slots (201) answers the next step as the "
        "original does; the same adoption again is a resend (200); without "
        "slots the canonical layout (every position stepped one at a time: "
        "3 in slot 3); a held set with a gap and a newest truncated to; "
        "another state over an existing session is session_exists unless "
        "replace; states no window can be in are invalid_state: empty, "
        "repeated, descending, over the budget, newest below a held "
        "position, a slot out of range, slots not one run round the ring, "
        "the ring turned further than the positions below allow (position "
        "1 in slot 2), a newest of 4294967295 not held (no truncation "
        "leaves it); a position out of range is invalid_position; the last "
        "position is adopted.",
        4, 0, [
            S(range(1, 7)), CHECK,
            A([3, 4, 5, 6], 6, cfg, slots=[3, 4, 0, 1], session="b"),
            A([3, 4, 5, 6], 6, cfg, slots=[3, 4, 0, 1], session="b"),
            A([3, 4, 5, 6], 6, cfg, session="b"),
            S([7]), S([7], session="b"), CHECK, {"check": True,
                                                 "session": "b"},
            A([3, 4, 5, 6], 6, cfg, session="c"),
            A([3, 4, 5, 6], 6, cfg, slots=[0, 1, 2, 3], session="d"),
            A([2, 5], 9, cfg, session="e"),
            S([10], session="e"), {"check": True, "session": "e"},
            A([7, 8], 8, cfg, session="c"),
            A([7, 8], 8, cfg, session="c", replace=True),
            {"check": True, "session": "c"},
            A([], 0, cfg, session="x"),
            A([1, 1], 1, cfg, session="x"),
            A([2, 1], 2, cfg, session="x"),
            A([1, 2, 3, 4, 5], 5, cfg, session="x"),
            A([1, 2], 1, cfg, session="x"),
            A([1, 2], 2, cfg, slots=[4, 5], session="x"),
            A([1, 2], 2, cfg, slots=[1, 3], session="x"),
            A([1, 2], 2, cfg, slots=[2, 3], session="x"),
            A([1, 2], 2, cfg, slots=[1], session="x"),
            A([1, 4294967296], 4294967296, cfg, session="x"),
            A([0, 4294967294], 4294967295, cfg, session="x"),
            A([0, 4294967295], 4294967295, cfg, session="m"),
            {"check": True, "session": "m"},
        ], drafts=False))
    cfg = (6, 2, 2, 4)
    out.append(record_ext(
        "adopt-sinks-pages",
        "Budget 6, 2 sinks, lookahead 2, pages of 4: states with pins "
        "adopted with and without slots and pages; pins take slots 0 and 1 "
        "in order, the others one run round slots 2..7 turned at most once "
        "per position between the last pin and the oldest other one; "
        "position 0 is pinned and cannot be missing; pages must be exactly "
        "those of the positions held, and a session without pages takes "
        "none; an adopted session with pins goes on stepping and evicting "
        "as a stepped one does (b, in the main session's layout); g holds "
        "the same positions in another layout the ring can be in.",
        6, 2, [
            S(range(1, 11)), CHECK,
            A([0, 1, 7, 8, 9, 10], 10, cfg, slots=[0, 1, 7, 2, 3, 4],
              pages=[0, 1, 2], session="b"),
            A([0, 1, 7, 8, 9, 10], 10, cfg, slots=[0, 1, 5, 6, 7, 2],
              session="g"),
            S([11, 12]), S([11, 12], session="b"),
            S([11, 12], session="g"),
            {"check": True, "session": "b"}, CHECK,
            A([0, 5, 9], 12, cfg, session="c"),
            A([0, 5, 9], 12, cfg, slots=[0, 1, 5], session="d"),
            S([13, 14, 15, 16, 17], session="c"),
            {"check": True, "session": "c"},
            A([0, 3], 3, cfg, pages=[0], session="e"),
            S([4, 5], session="e"), {"check": True, "session": "e"},
            A([1, 2], 2, cfg, session="x"),
            A([0, 1, 2], 2, cfg, slots=[1, 0, 2], session="x"),
            A([0, 1, 2], 2, cfg, slots=[0, 1, 1], session="x"),
            A([0, 1, 2], 2, cfg, slots=[0, 1, 3], session="x"),
            A([0, 1, 3], 3, cfg, slots=[0, 1, 4], session="x"),
            A([0, 5], 5, cfg, pages=[0, 1, 2], session="x"),
            A([0, 5], 5, cfg, pages=[1], session="x"),
            A([0, 5], 5, (6, 2, 2, 0), pages=[0, 1], session="x"),
            A([0, 5], 5, (6, 2, 2, 0), pages=[], session="f"),
        ], lookahead=2, page_size=4, drafts=False))
    out.append(record_ext(
        "expect-newest",
        "Budget 5, 1 sink, lookahead 3: every change carrying the newest "
        "the engine believes the session has (steps, drafts, a step with "
        "commit, commit, truncate, evict, fork: the parent's); a different "
        "one is diverged and changes nothing, a fork expecting the wrong "
        "newest makes no child. A replacement drops the session's replay "
        "record: the step sent before it is new again afterwards.",
        5, 1, [
            S([1, 2, 3], expect_newest=0), S([4], expect_newest=3),
            S([5], expect_newest=3), S([5], expect_newest=5),
            S([5], expect_newest=4),
            S([6, 7], tentative=True, expect_newest=5),
            S([8], tentative=True, expect_newest=5),
            {"commit": 6, "expect_newest": 8},
            {"commit": 6, "expect_newest": 7},
            S([7, 8], commit=6, tentative=True, expect_newest=6),
            S([9], commit=8, expect_newest=9),
            S([9], commit=8, expect_newest=8),
            {"truncate": 8, "expect_newest": 8},
            {"truncate": 8, "expect_newest": 9},
            {"evict": 2, "expect_newest": 9},
            {"evict": 2, "expect_newest": 7},
            {"fork": "f", "expect_newest": 6},
            {"fork": "f", "expect_newest": 7},
            {"check": True, "session": "f"},
            S([8], expect_newest=7, session="f"),
            S([8], expect_newest=7),
            CHECK,
            A([0, 6, 7], 7, (5, 1, 3, 0), replace=True),
            S([8], expect_newest=7),
            CHECK,
        ], lookahead=3, drafts=None))
    out.append(random_vector(
        "rehome-random",
        "300 operations drawn from a fixed seed (random.Random(26)) at "
        "budget 6, sinks 1, lookahead 2, pages of 3, as in mixed-random, "
        "half of the changes carrying expect_newest (a quarter of those "
        "another newest: diverged), and adoptions of the state of one of "
        "the sessions (as its engine holds it: drafts left out, with or "
        "without slots and pages, now and then moved off it or under "
        "another budget) into itself, another session or a new one, with "
        "or without replace: created, resent, replaced, session_exists and "
        "invalid_state.",
        26, 300, 6, 1, 2, 3, rehome=True))
    return out


# ---- random request sequences ------------------------------------------

def random_request(rng, m, names):
    """One random request on model `m` (valid or not); `names` are the
    session names in use (for forks)."""
    pending = m.pending()
    L = m.lookahead
    r = rng.random()

    def run(first, n, gaps=0.15):
        out, p = [], first
        for _ in range(n):
            out.append(p)
            p += 1 + (rng.randrange(1, 4) if rng.random() < gaps else 0)
        return out

    nxt = m.newest + 1 + (rng.randrange(1, 5) if rng.random() < 0.15 else 0)
    if pending and r < 0.22 and rng.random() < 0.8:
        r = 0.4       # mostly a step with commit instead of a refusal
    if pending and 0.71 <= r < 0.79 and rng.random() < 0.8:
        r = 0.6       # mostly a commit instead of a refused evict
    if r < 0.22:      # a plain step
        n = rng.choice([1, 1, 1, 2, 3, L, L + 1, 2 * L + 1])
        return {"step": run(nxt, n)}
    if r < 0.36:      # drafts
        n = rng.randrange(1, L + 1)
        if rng.random() < 0.85:
            n = max(1, min(n, L - len(pending)))
        return {"step": run(nxt, n), "tentative": True}
    if r < 0.52:      # a step with commit
        p = rng.choice(pending + [m.committed] * 2 + [m.newest + 3])
        acc = [q for q in pending if q <= p]
        base = acc[-1] if acc else m.committed
        first = base + 1 + (rng.randrange(1, 3) if rng.random() < 0.15 else 0)
        if rng.random() < 0.1:
            return {"step": [], "commit": p}
        if rng.random() < 0.6:
            return {"step": run(first, rng.randrange(1, L + 1)),
                    "tentative": True, "commit": p}
        return {"step": run(first, rng.randrange(1, 2 * L + 2)), "commit": p}
    if r < 0.62:      # a commit
        p = rng.choice(pending + pending + [m.committed, m.newest + 2])
        return {"commit": p}
    if r < 0.71:      # truncate
        if m.newest >= 1 and rng.random() < 0.8:
            lo = max(1, m.newest - m.budget - 2)
            p = rng.randrange(lo, m.newest + 1)
        else:
            p = rng.choice([1, 2, m.newest + 1, m.newest + 5])
        return {"truncate": p}
    if r < 0.79:      # evict
        return {"evict": rng.randrange(m.sinks + 1, m.budget + 2)}
    if r < 0.83:      # refusals of the other kinds
        k = rng.randrange(4)
        if k == 0:
            return {"step": run(max(0, m.newest - rng.randrange(0, 3)), 2)}
        if k == 1:
            return {"evict": rng.randrange(0, m.sinks + 1)}
        if k == 2:
            return {"truncate": 0}
        return {"commit": max(0, m.committed - rng.randrange(1, 4))}
    if r < 0.86 and len(names) < 8:
        return {"fork": f"f{len(names)}"}
    return {"check": True}


def with_expect(rng, m, req):
    """`req` carrying expect_newest, mostly the session's own newest."""
    if "check" in req or "adopt" in req:
        return req
    if rng.random() < 0.75:
        e = m.newest
    else:
        e = max(0, m.newest + rng.choice([-3, -2, -1, 1, 2, 5]))
    return {**req, "expect_newest": e}


def random_adopt(rng, sessions, new_name):
    """An adoption of the state of one of `sessions` (name -> Model), as its
    engine would send it, with or without slots and pages, now and then
    perturbed; into that session, another or a new one (`new_name`)."""
    src = sessions[rng.choice(list(sessions))]
    v = src.view()
    kept = [p for p in v["kept"] if p not in v["tentative"]]
    newest = src.committed if v["tentative"] else v["newest"]
    body = {"budget": src.budget, "sinks": src.sinks,
            "lookahead": src.lookahead, "page_size": src.page_size,
            "kept": kept, "newest": newest}
    if rng.random() < 0.5 and not v["tentative"]:
        body["slots"] = v["slots"]
    if src.page_size and rng.random() < 0.4:
        body["pages"] = sorted({p // src.page_size for p in kept})
    k = rng.random()
    if k < 0.08 and kept:                 # a position too many or missing
        body["kept"] = kept[1:] if rng.random() < 0.5 else kept + [newest + 1]
        body.pop("slots", None)
    elif k < 0.14 and "slots" in body:    # a slot elsewhere
        x = rng.randrange(len(kept))
        body["slots"] = list(body["slots"])
        body["slots"][x] = rng.randrange(src.budget + src.lookahead)
    elif k < 0.18:                        # the newest moved
        body["newest"] = max(0, newest + rng.choice([-2, -1, 1, 3]))
    elif k < 0.22 and "pages" in body:
        body["pages"] = body["pages"] + [body["pages"][-1] + 1] \
            if body["pages"] else [0]
    elif k < 0.30:                        # another budget
        body["budget"] = max(body["sinks"] + 1,
                             src.budget + rng.choice([-1, 1, 2]))
    if rng.random() < 0.4:
        body["replace"] = True
    r = rng.random()
    name = new_name if r < 0.3 and new_name else rng.choice(list(sessions))
    req = {"adopt": body}
    if name is not None:
        req["session"] = name
    return req


def random_vector(name, description, seed, nops, budget, sinks, lookahead,
                  page_size, rehome=False):
    rng = random.Random(seed)
    r = Recorder(budget, sinks, lookahead, page_size, drafts=True)
    while len(r.ops) < nops:
        names = list(r.sessions)
        if rehome and rng.random() < 0.2:
            req = random_adopt(rng, r.sessions, f"a{len(r.ops)}"
                               if len(names) < 9 else None)
        else:
            sess = None if rng.random() < 0.6 else rng.choice(names)
            req = random_request(rng, r.sessions[sess], names)
            if rehome and rng.random() < 0.5:
                req = with_expect(rng, r.sessions[sess], req)
            if sess is not None:
                req = {"session": sess, **req}
        try:
            r.do(req)
        except Refused:
            pass
    vec = {"name": name, "description": description, "budget": budget,
           "sinks": sinks, "lookahead": lookahead, "page_size": page_size,
           "ops": r.ops, "_style": "lines"}
    return vec


# ---- the model's self-check ----------------------------------------------

def fuzz(n, seed=1):
    """Runs `n` random request sequences on random configurations, every
    request applied as the contract's text says (ambiguous refusals and the
    irregular commits included), and asserts the model's invariants and the
    consistency of every answer with the views before and after."""
    rng = random.Random(seed)
    for it in range(n):
        budget = rng.randrange(1, 12)
        sinks = rng.randrange(0, budget)
        L = rng.choice([1, 1, 2, 3, 4, 8])
        B = rng.choice([0, 0, 1, 2, 3, 5])
        sessions = {None: Model(budget, sinks, L, B)}
        for k in range(rng.randrange(10, 80)):
            sess = rng.choice(list(sessions))
            m = sessions[sess]
            if rng.random() < 0.1:
                fuzz_adopt(rng, sessions, f"fuzz {it} op {k}")
                continue
            req = random_request(rng, m, list(sessions))
            if rng.random() < 0.2:
                req = with_expect(rng, m, req)
            where = f"fuzz {it} ({budget},{sinks},{L},{B}) op {k} {req}"
            if "check" in req:
                continue
            if "expect_newest" in req and req["expect_newest"] != m.newest:
                before = m.state()
                errs, ans = (m.diverges(req["expect_newest"]), None) \
                    if "fork" in req else apply_request(m, req)
                assert "diverged" in errs and ans is None, where
                assert m.state() == before, where
                continue
            if "fork" in req:
                sessions[req["fork"]] = m.fork()
                assert sessions[req["fork"]].state() == m.state(), where
                continue
            before, vbefore = m.state(), m.view()
            errs, ans = apply_request(m, req)
            try:
                m.check_invariants()
                if errs:
                    assert m.state() == before, "an error changed the state"
                    continue
                after = m.view()
                old, new = set(vbefore["kept"]), set(after["kept"])
                added = set(req.get("step", []))
                lists = [ans.get(k, []) for k in ("victims", "dropped",
                                                   "removed")]
                gone = set().union(*lists)
                assert len(new) == len(old) + len(added) - sum(map(len, lists)), \
                    "held count accounting"
                assert new <= old | added and old - new <= gone and \
                    added - new <= set(lists[0]), "held set accounting"
                assert not (added & (old - set(lists[1]))), \
                    "a new position was held"
                assert len(ans.get("slots", added)) == len(added)
                if "size" in ans:
                    assert ans["size"] == len(new)
                if "newest" in ans:
                    assert ans["newest"] == after["newest"]
                for v in ("victims", "dropped", "removed"):
                    if v in ans:
                        assert ans[v] == sorted(set(ans[v])), f"{v} order"
                if B:
                    po, pn = set(vbefore["pages"]), set(after["pages"])
                    assert ans["pages_new"] == sorted(pn - po)
                    assert ans["pages_freed"] == sorted(po - pn)
                    assert ans["pages_transient"] == sorted(
                        {p // B for p in added} - po - pn)
                    assert pn == {p // B for p in new}
                else:
                    assert "pages_new" not in ans and not after["pages"]
                assert ("dropped" in ans) == ("commit" in req)
            except AssertionError as e:
                raise AssertionError(f"{where}: {e}") from None


def fuzz_adopt(rng, sessions, where):
    """Self-check of adoption: the state of a session without drafts (as
    its engine holds it) is accepted, with or without its slots, and the
    adopted session equals it (with the slots given) and answers the same
    next requests; a state moved off it in one place is refused or, when
    accepted, is another reachable state that the model's invariants
    hold for."""
    name = rng.choice(list(sessions))
    m = sessions[name]
    if m.pending():
        return
    v = m.view()
    body = {"budget": m.budget, "sinks": m.sinks, "lookahead": m.lookahead,
            "page_size": m.page_size, "kept": v["kept"], "newest": v["newest"]}
    if not v["kept"]:
        errs, _ = adopt_errors(m.config(), body)
        assert errs == ["invalid_state"], f"{where}: empty window {errs}"
        return
    with_slots = rng.random() < 0.6
    if with_slots:
        body["slots"] = v["slots"]
    if m.page_size:
        body["pages"] = v["pages"]
    trial = {}
    errs, ans, st = adopt(trial, "x", body)
    assert errs is None and st == 201, f"{where}: {v} refused: {errs}"
    a = trial["x"]
    a.check_invariants()
    assert a.view()["kept"] == v["kept"] and a.newest == m.newest, where
    if with_slots:
        assert a.state() == m.state(), f"{where}: {a.state()} {m.state()}"
        twin = m.fork()
        for _ in range(5):
            req = random_request(rng, twin, [])
            if "fork" in req or "check" in req:
                continue
            assert apply_request(twin, req) == apply_request(a, req), \
                f"{where}: adopted and original answer {req} differently"
    # A perturbed state: refused, or reachable (the invariants hold).
    body = dict(body, kept=list(v["kept"]))
    k = rng.randrange(4)
    if k == 0 and "slots" in body:
        body["slots"] = list(body["slots"])
        body["slots"][rng.randrange(len(body["slots"]))] = \
            rng.randrange(m.nslots)
    elif k == 1:
        body["kept"].insert(0, rng.randrange(0, body["kept"][0] + 1))
        body.pop("slots", None)
        body.pop("pages", None)
    elif k == 2:
        body["newest"] = max(0, body["newest"] + rng.choice([-1, 1]))
    else:
        body["budget"] = m.budget - 1
        if body["budget"] <= m.sinks:
            return
    trial = {}
    errs, ans, st = adopt(trial, "x", body)
    if errs is None:
        trial["x"].check_invariants()
        assert len(trial["x"].held) <= body["budget"], where
    else:
        assert errs == ["invalid_state"], f"{where}: {errs}"


# ---- vLLM's sliding-window freeing -------------------------------------

def vllm_freed_blocks(n_computed, W, B):
    """The blocks vLLM's sliding-window manager has freed once n_computed
    tokens (positions 0..n_computed-1) are computed with window W and block
    size B: every block wholly below n_computed - W + 1, the first position
    the next token still attends to."""
    first_useful = n_computed - W + 1
    return {b for b in range(max(first_useful, 0)) if (b + 1) * B <= first_useful}


def check_vllm():
    """For sinks 0, the pages the model has reported freed (or transient)
    once positions up to n-1 are stepped are the blocks vLLM has freed when
    n tokens are computed, with W = budget + 1: one position per step, and
    chunks of several (a prefill, a verify pass), whose blocks vLLM
    allocates for the chunk and frees at its next schedule."""
    bad = []
    rng = random.Random(5)
    walks = [(budget, B, 1, lambda: 1) for budget in (8, 13, 32)
             for B in (1, 4, 16)]
    walks += [(budget, B, 64, lambda: rng.choice([1, 1, 2, 5, 17, 40]))
              for budget in (3, 8, 13) for B in (1, 2, 4, 16)]
    for budget, B, L, chunk in walks:
        m = Model(budget, 0, L, B)
        gone, n = set(), 1
        while n < 200:
            k = chunk()
            err, ans = m.step(list(range(n, n + k)))
            assert err is None
            n += k
            assert not set(ans["pages_new"]) & gone
            gone |= set(ans["pages_freed"]) | set(ans["pages_transient"])
            want = vllm_freed_blocks(n, budget + 1, B)
            if gone != want:
                bad.append(f"vllm budget {budget} B {B} chunks up to {L}, n "
                           f"{n}: model freed or transient {sorted(gone)}, "
                           f"vLLM {sorted(want)}")
                break
    return bad


# ---- files ----------------------------------------------------------------

def dump(vec):
    """The file text: old generated vectors on one line (as they always
    were), the others one op per line."""
    vec = dict(vec)
    style = vec.pop("_style", "compact")
    if style == "compact":
        return json.dumps(vec, separators=(",", ":")) + "\n"
    c = lambda v: json.dumps(v, separators=(",", ":"))
    head = [f'{c(k)}:{c(vec[k])}' for k in ("budget", "sinks", "lookahead",
                                              "page_size") if k in vec]
    ops = ",\n".join("  " + c(op) for op in vec["ops"])
    return (f'{{"name":{c(vec["name"])},\n'
            f' "description":{c(vec["description"])},\n'
            f' {",".join(head)},\n'
            f' "ops":[\n{ops}\n ]}}\n')


def main():
    args = sys.argv[1:]
    if "--fuzz" in args:
        n = int(args[args.index("--fuzz") + 1])
        fuzz(n)
        print(f"model self-check: {n} random sequences hold the invariants")
        return
    if "--write" in args:
        names = set()
        for folder, vecs in ((HERE, generated()), (REHOME, generated_rehome())):
            for vec in vecs:
                assert vec["name"] not in names
                names.add(vec["name"])
                with open(os.path.join(folder, vec["name"] + ".json"),
                          "w") as f:
                    f.write(dump(vec))
    failed = 0
    files = [os.path.join(HERE, n) for n in sorted(os.listdir(HERE))]
    files += [os.path.join(REHOME, n) for n in sorted(os.listdir(REHOME))]
    for path in files:
        name = os.path.relpath(path, HERE)
        if not name.endswith(".json"):
            continue
        with open(path) as f:
            vec = json.load(f)
        bad = replay(vec)
        if vec.get("name") + ".json" != os.path.basename(name):
            bad.append("the name is not the file's")
        for b in bad:
            print(f"{name}: {b}")
        failed += bool(bad)
    bad = check_vllm()
    for b in bad:
        print(b)
    failed += bool(bad)
    try:
        fuzz(150)
    except AssertionError as e:
        print(f"model self-check: {e}")
        failed += 1
    if failed:
        sys.exit(1)
    print("vectors agree with the reference model; the model holds its "
          "invariants and frees pages as vLLM does")


if __name__ == "__main__":
    main()
