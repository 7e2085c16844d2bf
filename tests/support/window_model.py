"""A naive model of a session's window, and the answers evictd must give:
the durability and fault suites' oracle (support.durability drives it).

The model is deliberately the dumbest thing that can work (a list of
(position, slot) pairs, every rule recomputed from it), so that it cannot
share a bug with the ring buffer of server/window.c. It follows the issue 9
wire contract (spec9.md; proto/openapi.yaml): lookahead sub-steps,
page-granular answers, drafts (tentative steps) and commits, truncate, fork,
and the replay records of steps, commits and truncates; and issue 26's:
adopt (a session made in a given state) and the precondition expect_newest.
Standard library only.
"""
import random


class Win:
    """A window kept as a plain list of (position, slot) pairs, ascending,
    read the way the issue 9 contract (spec9.md) words it: the first `sinks`
    positions held are pinned, pinned position k in slot k; every other
    position takes the slot after the newest unpinned one held (wrapping
    from budget + lookahead - 1 to sinks), or slot `sinks` when none is;
    eviction removes the oldest unpinned position. Drafts are the positions
    held above `committed`. Every rule is recomputed from the list each
    time, so that the model keeps no cursor that could share a bug with
    server/window.c."""

    __slots__ = ("budget", "sinks", "lookahead", "page_size", "held",
                 "newest", "committed")

    def __init__(self, budget, sinks, lookahead=1, page_size=0):
        self.budget, self.sinks = budget, sinks
        self.lookahead, self.page_size = lookahead, page_size
        self.held = [(0, 0)]
        self.newest = self.committed = 0

    def copy(self):
        w = Win.__new__(Win)
        for k in Win.__slots__:
            setattr(w, k, getattr(self, k))
        w.held = list(self.held)
        return w

    @staticmethod
    def adopted(cfg, kept, newest, slots=None):
        """The window adopt makes of kept (ascending), newest and slots
        (None: the canonical layout): pinned position k in slot k; the
        oldest unpinned one, u, in slot sinks + (u - p - 1) mod (budget +
        lookahead - sinks), p the newest pinned position (-1 without
        sinks), the others after it round the ring."""
        w = Win(*cfg)
        if slots is None:
            np_ = min(len(kept), w.sinks)
            region = w.budget + w.lookahead - w.sinks
            slots = list(range(np_))
            if len(kept) > np_:
                p = kept[np_ - 1] if np_ else -1
                s = w.sinks + (kept[np_] - p - 1) % region
                for _ in kept[np_:]:
                    slots.append(s)
                    s = w.sinks if s == w.budget + w.lookahead - 1 else s + 1
        w.held = list(zip(kept, slots))
        w.newest = w.committed = newest
        return w

    def config(self):
        return (self.budget, self.sinks, self.lookahead, self.page_size)

    def state(self):
        """Everything a fork copies (and a resent fork compares)."""
        return (self.config(), tuple(self.held), self.newest, self.committed)

    def drafts(self):
        return [p for p, _ in self.held if p > self.committed]

    def pages(self):
        if not self.page_size:
            return []
        return sorted({p // self.page_size for p, _ in self.held})

    def _append(self, p):
        assert p > self.newest, (p, self.newest)
        pinned = sum(1 for _, s in self.held if s < self.sinks)
        if pinned < self.sinks:
            slot = pinned
        else:
            run = [s for _, s in self.held if s >= self.sinks]
            ring = self.budget + self.lookahead
            slot = (self.sinks if not run or run[-1] == ring - 1
                    else run[-1] + 1)
        assert all(s != slot for _, s in self.held), "model: slot taken"
        self.held.append((p, slot))
        self.newest = p
        return slot

    def _drop_to(self, budget):
        victims = []
        while len(self.held) > budget:
            i = next(k for k, (_, s) in enumerate(self.held)
                     if s >= self.sinks)
            victims.append(self.held.pop(i)[0])
        return victims

    def commit(self, p):
        """Keeps the drafts <= p, drops the others, evicts to the budget.
        Returns (victims, dropped); p >= committed is the caller's check."""
        c = self.committed
        dropped = [q for q, _ in self.held if q > c and q > p]
        self.held = [(q, s) for q, s in self.held if q <= c or q <= p]
        kept = [q for q, _ in self.held if q > c]
        self.newest = self.committed = kept[-1] if kept else c
        return self._drop_to(self.budget), dropped

    def steps(self, positions, tentative):
        """Returns (slots, victims)."""
        slots, victims = [], []
        if tentative:
            for p in positions:
                slots.append(self._append(p))
            return slots, victims
        n = self.lookahead
        for i in range(0, len(positions), n):
            for p in positions[i:i + n]:
                slots.append(self._append(p))
            victims += self._drop_to(self.budget)
        self.committed = self.newest
        return slots, victims

    def truncate(self, p):
        removed = [q for q, _ in self.held if q >= p]
        self.held = [(q, s) for q, s in self.held if q < p]
        if p <= self.newest:
            self.newest = p - 1
            self.committed = min(self.committed, p - 1)
            if not self.drafts():  # with none left, committed is newest
                self.committed = self.newest
        return removed

    def evict(self, budget):
        return self._drop_to(budget)

    def view(self, sid):
        v = {"id": sid, "budget": self.budget, "sinks": self.sinks}
        if self.lookahead != 1:
            v["lookahead"] = self.lookahead
        if self.page_size:
            v["page_size"] = self.page_size
        v.update(size=len(self.held), newest=self.newest,
                 kept=[p for p, _ in self.held],
                 slots=[s for _, s in self.held])
        drafts = self.drafts()
        if drafts:
            v["tentative"] = drafts
        if self.page_size:
            v["pages"] = self.pages()
        return v


class Sess:
    """What one session is: absent, or a window and the replay record: the
    key of its last applied step, commit or truncate request (what makes a
    request "the same") and the answer it got (what a retry gets again)."""

    __slots__ = ("win", "last")

    def __init__(self, win=None, last=None):
        self.win = win
        self.last = last  # (key, answer); key: see step_key & co.

    def copy(self):
        return Sess(self.win.copy() if self.win is not None else None,
                    self.last)

    def view(self, sid):
        return None if self.win is None else self.win.view(sid)


def step_key(positions, tentative=False, commit=None):
    return ("step", tuple(positions), bool(tentative), commit)


def error(status, code, **extra):
    """(status, body) of a refused request; a batch item adds "status"."""
    e = {"code": code, "message": ""}
    e.update(extra)
    return status, {"error": e}


def as_item(status, body):
    """The result of a batch item that alone would have been answered
    (status, body)."""
    if status == 200:
        return body
    return {"error": dict(body["error"], status=status)}


def _with_pages(ans, w, before, added=(), created=False):
    """New, freed and transient pages: transient are the pages of the
    positions added (and page 0 of a session the request created) held
    neither before nor after."""
    if w.page_size:
        after = set(w.pages())
        within = {p // w.page_size for p in added} | ({0} if created else set())
        ans["pages_new"] = sorted(after - before)
        ans["pages_freed"] = sorted(before - after)
        ans["pages_transient"] = sorted(within - before - after)
    return ans


def _replay(sess, key):
    if sess.last is not None and sess.last[0] == key:
        return 200, dict(sess.last[1], replayed=True)
    return None


def diverged_error(sess, sid, expect_newest):
    """The refusal of a change expecting a newest the session does not have
    (None when it has it, or nothing is expected)."""
    if expect_newest is None or sess.win.newest == expect_newest:
        return None
    return error(409, "diverged", newest=sess.win.newest,
                 view=sess.win.view(sid))


CONFIG_FIELDS = ("budget", "sinks", "lookahead", "page_size")


def do_step(sess, positions, tentative=False, commit=None, create=None,
            given=None, expect_newest=None, sid=None):
    """A step request (single or batch item) on sess (session sid), changed
    only when it applies. create: the (budget, sinks, lookahead,
    page_size) a request that creates the session gives it; given: the
    configuration fields the request names (an existing session's must
    equal them); expect_newest: the newest the request expects."""
    key = step_key(positions, tentative, commit)
    if sess.win is not None and given:
        have = dict(zip(CONFIG_FIELDS, sess.win.config()))
        if any(have[k] != v for k, v in given.items()):
            return error(409, "session_exists")
    if sess.win is None:
        if expect_newest:  # past 0: a fresh window is another cache
            return error(404, "unknown_session")
        if positions and positions[0] == 0:
            return error(409, "stale_position", newest=0)
        w, before = Win(*create), set()
    else:
        r = _replay(sess, key) or diverged_error(sess, sid, expect_newest)
        if r:
            return r
        w, before = sess.win.copy(), set(sess.win.pages())
    newest0 = w.newest
    victims, dropped, slots = [], None, []
    if commit is not None:
        if commit < w.committed:
            return error(400, "invalid_position")
        victims, dropped = w.commit(commit)
    if positions:
        drafts = len(w.drafts())
        if not tentative and drafts:
            return error(409, "tentative_pending")
        if positions[0] <= w.newest:
            return error(409, "stale_position", newest=newest0)
        if tentative and len(positions) + drafts > w.lookahead:
            return error(400, "too_many_positions")
        slots, v = w.steps(positions, tentative)
        victims += v
    ans = {"victims": victims, "slots": slots, "size": len(w.held),
           "newest": w.newest}
    if commit is not None:
        ans["dropped"] = dropped
    _with_pages(ans, w, before, positions or (), sess.win is None)
    sess.win, sess.last = w, (key, ans)
    return 200, ans


def do_commit(sess, p, expect_newest=None, sid=None):
    if sess.win is None:
        return error(404, "unknown_session")
    key = ("commit", p)
    r = _replay(sess, key) or diverged_error(sess, sid, expect_newest)
    if r:
        return r
    if p < sess.win.committed:
        return error(400, "invalid_position")
    w, before = sess.win.copy(), set(sess.win.pages())
    victims, dropped = w.commit(p)
    ans = _with_pages({"victims": victims, "dropped": dropped,
                       "size": len(w.held), "newest": w.newest}, w, before)
    sess.win, sess.last = w, (key, ans)
    return 200, ans


def do_truncate(sess, p, expect_newest=None, sid=None):
    if sess.win is None:
        return error(404, "unknown_session")
    key = ("truncate", p)
    r = _replay(sess, key) or diverged_error(sess, sid, expect_newest)
    if r:
        return r
    w, before = sess.win.copy(), set(sess.win.pages())
    removed = w.truncate(p)
    ans = _with_pages({"removed": removed, "size": len(w.held),
                       "newest": w.newest}, w, before)
    sess.win, sess.last = w, (key, ans)
    return 200, ans


def do_evict(sess, budget, expect_newest=None, sid=None):
    """Evict never replaces the replay record."""
    if sess.win is None:
        return error(404, "unknown_session")
    r = diverged_error(sess, sid, expect_newest)
    if r:
        return r
    if sess.win.drafts():
        return error(409, "tentative_pending")
    w, before = sess.win.copy(), set(sess.win.pages())
    victims = w.evict(budget)
    sess.win = w
    return 200, _with_pages({"victims": victims, "size": len(w.held)}, w,
                            before)


def do_fork(sessions, parent, child, expect_newest=None):
    """sessions maps ids to Sess (both parent and child)."""
    if parent == child:  # refused before anything is looked up
        return error(400, "invalid_field")
    p = sessions[parent]
    if p.win is None:
        return error(404, "unknown_session")
    c = sessions[child]
    if c.win is not None and c.win.state() == p.win.state():
        return 200, c.win.view(child)  # a resend, whatever it expects
    r = diverged_error(p, parent, expect_newest)
    if r:
        return r
    if c.win is not None:
        return error(409, "session_exists")
    sessions[child] = Sess(p.win.copy(), None)
    return 201, sessions[child].win.view(child)


def adopt_body(cfg, kept, newest, slots=None, pages=None, replace=None):
    """The body of an adoption."""
    body = dict(zip(CONFIG_FIELDS, cfg), kept=list(kept), newest=newest)
    if slots is not None:
        body["slots"] = list(slots)
    if pages is not None:
        body["pages"] = list(pages)
    if replace is not None:
        body["replace"] = replace
    return body


def do_adopt(sess, sid, cfg, kept, newest, slots=None, replace=False):
    """An adoption of a state the rules accept (the caller's to know):
    found as it is (a resend: nothing changes, the replay record stays),
    refused for another state without replace, else made (or replaced,
    with no replay record)."""
    w = sess.win
    if (w is not None and w.config() == tuple(cfg) and not w.drafts()
            and [p for p, _ in w.held] == list(kept) and w.newest == newest
            and (slots is None or [s for _, s in w.held] == list(slots))):
        return 200, w.view(sid)
    if w is not None and not replace:
        return error(409, "session_exists")
    sess.win, sess.last = Win.adopted(cfg, kept, newest, slots), None
    return (200 if w is not None else 201), sess.win.view(sid)


def do_put(sess, sid, cfg):
    if sess.win is None:
        sess.win, sess.last = Win(*cfg), None
        return 201, sess.win.view(sid)
    if sess.win.config() != tuple(cfg):
        return error(409, "session_exists")
    return 200, sess.win.view(sid)


def request_of(sid, key, rng=None):
    """(method, path, body) of the request whose replay key is `key`, in
    one of the forms that mean it (pos or positions, tentative false
    spelled out or not)."""
    rng = rng or random
    if key[0] == "commit":
        return "POST", f"/session/{sid}/commit", {"newest": key[1]}
    if key[0] == "truncate":
        return "POST", f"/session/{sid}/truncate", {"from": key[1]}
    _, positions, tentative, commit = key
    body = {}
    if len(positions) == 1 and rng.random() < 0.5:
        body["pos"] = positions[0]
    elif positions:
        body["positions"] = list(positions)
    if tentative or rng.random() < 0.1:
        body["tentative"] = tentative
    if commit is not None:
        body["commit"] = commit
    return "POST", f"/session/{sid}/step", body


def apply_request(sessions, sid, method, path, body):
    """Applies to the model the request (method, path, body) on session
    sid, as do_* do; returns (status, answer). Only the requests
    request_of makes."""
    sess = sessions[sid]
    if path.endswith("/commit"):
        return do_commit(sess, body["newest"], body.get("expect_newest"),
                         sid)
    if path.endswith("/truncate"):
        return do_truncate(sess, body["from"], body.get("expect_newest"),
                           sid)
    positions = body.get("positions", [body["pos"]] if "pos" in body else [])
    return do_step(sess, positions, body.get("tentative", False),
                   body.get("commit"),
                   given={k: body[k] for k in CONFIG_FIELDS if k in body},
                   expect_newest=body.get("expect_newest"), sid=sid)


def same_answer(got, want):
    """Answers compare exactly, except the wording of error messages."""
    if isinstance(want, dict) and isinstance(got, dict):
        if set(got) != set(want):
            return False
        return all(k == "message" and isinstance(got[k], str)
                   or same_answer(got[k], want[k]) for k in want)
    if isinstance(want, list) and isinstance(got, list):
        return len(got) == len(want) and all(
            same_answer(g, w) for g, w in zip(got, want))
    return type(got) is type(want) and got == want
