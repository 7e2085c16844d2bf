"""A client's sessions with the requests it may send and the answers it
must get (Fleet), each predicted by support.window_model; what a restart
test's workload must have exercised (COVERAGE). Standard library only.
"""
import json

from support.fail import expect
from support.window_model import (Sess, Win, diverged_error, adopt_body,
                                  apply_request, as_item, do_adopt,
                                  do_commit, do_evict, do_fork, do_put,
                                  do_step, do_truncate, error, request_of,
                                  same_answer)

DEFAULT_BUDGET = 8


class Transport(Exception):
    """No complete answer: the request may or may not have been applied."""


class Op:
    """One request, the answer the model predicts, and the states of the
    sessions it touches before and after (`after` is applied once the answer
    is in; at a crash either may be what the daemon recovers). `tags` name
    what the request exercises (see Fleet.count)."""

    def __init__(self, method, path, body, status, answer, before, after,
                 kind, tags=()):
        self.method, self.path, self.body = method, path, body
        self.status, self.answer = status, answer
        self.before, self.after, self.kind = before, after, kind
        self.tags = set(tags) | {kind}

    def describe(self):
        b = json.dumps(self.body, separators=(",", ":"))
        return f"{self.method} {self.path} {b[:300]}"



BUDGETS = (1, 2, 3, 5, 8, 13, 40, 300)
LOOKAHEADS = (2, 3, 4, 8)
PAGE_SIZES = (1, 2, 4, 16)
GAPS = (1, 1, 1, 1, 2, 3, 9, 1000)

# What a restart test's workload must have exercised (Fleet.count's tags).
COVERAGE = (
    "step", "multi", "longer-than-lookahead", "tentative", "commit-step",
    "commit-only", "commit", "commit-drafts", "truncate", "truncate-sinks",
    "truncate-above", "truncate-drafts", "fork", "fork-again", "fork-self",
    "fork-child",
    "resend-to-child", "retry-step", "retry-commit", "retry-truncate",
    "retry-batch", "batch", "evict", "put", "delete", "lookahead", "pages",
    "created-by-step", "error-tentative-pending", "error-stale-position",
    "error-invalid-position", "error-session-exists",
    "error-too-many-positions", "error-unknown-session",
    # the states sessions were found in by verify() (at restarts mostly)
    "held-drafts", "held-nothing", "held-lookahead", "held-pages",
    "held-fork-child", "record-step", "record-commit", "record-truncate",
    "record-commit-step", "record-commit-only", "record-none-after-fork",
    # issue 26: adopt and the precondition
    "adopt", "adopt-replace", "adopt-resend", "error-invalid-state",
    "expect", "error-diverged", "held-adopted")


class Fleet:
    """The sessions one client owns (nobody else touches them, so that the
    client alone decides their order of changes), with a generator of
    requests over them. `ids` may be any valid session ids; forks go into
    ids of the same fleet. `defaults` are the daemon's --budget, --sinks,
    --lookahead and --page-size (what a session created without them
    gets)."""

    def __init__(self, rng, ids, defaults=None):
        self.rng = rng
        self.ids = list(ids)
        self.s = {i: Sess() for i in self.ids}
        self.defaults = tuple(defaults or (DEFAULT_BUDGET, 0, 1, 0))
        self.last_fork = None  # (parent, child)
        self.children = set()  # sessions made by a fork, still alive
        # child -> the key of its parent's record when it was forked: a
        # record the child must not have (while it has none of its own)
        self.fork_origin = {}
        self.count = {}  # tag -> answered requests that exercised it
        self.sent = 0  # answered requests
        self.adopted = set()  # sessions as an adoption left them

    # -- helpers --
    def _positions(self, newest, n):
        p, out = newest, []
        for _ in range(n):
            p += self.rng.choice(GAPS)
            out.append(p)
        return out

    def _config(self):
        rng = self.rng
        b = rng.choice(BUDGETS)
        sinks = rng.randrange(0, min(4, b))
        la = 1 if rng.random() < 0.5 else rng.choice(LOOKAHEADS)
        ps = 0 if rng.random() < 0.5 else rng.choice(PAGE_SIZES)
        return (b, sinks, la, ps)

    def _config_body(self, cfg, body):
        """Writes cfg into body, leaving out (at random) what equals the
        daemon's default."""
        for name, v, d in zip(("budget", "sinks", "lookahead", "page_size"),
                              cfg, self.defaults):
            if v != d or self.rng.random() < 0.5:
                body[name] = v

    def _commit_arg(self, w):
        """A valid commit position for window w: with drafts pending, one
        that keeps none, some or all of them."""
        c, drafts, rng = w.committed, w.drafts(), self.rng
        if not drafts:
            return c + rng.choice((0, 0, 1, 7))
        k = rng.randrange(0, len(drafts) + 1)  # drafts kept
        if k == 0:
            return rng.randrange(c, drafts[0])
        if k == len(drafts):
            return drafts[-1] + rng.choice((0, 0, 1, 50))
        return rng.randrange(drafts[k - 1], drafts[k])

    def _step_fields(self, sess):
        """A step that applies to sess (state after any earlier item of the
        same request): (positions, tentative, commit, create, tags)."""
        rng, w, tags = self.rng, sess.win, set()
        create = None
        if w is None:
            create = self._config() if rng.random() < 0.8 else self.defaults
            w = Win(*create)
            tags.add("created-by-step")
        commit = None
        drafts = len(w.drafts())
        room = w.lookahead - drafts
        if drafts and (room == 0 or rng.random() < 0.6):
            commit = self._commit_arg(w)
        elif not drafts and rng.random() < 0.07:
            commit = self._commit_arg(w)
        if commit is not None:
            tags.add("commit-step")
            if drafts:
                tags.add("commit-drafts")
            w = w.copy()
            w.commit(commit)
            room = w.lookahead
        pending = len(w.drafts())
        tentative = bool(room) and (
            pending > 0 or rng.random() < (0.3 if w.lookahead > 1 else 0.06))
        if commit is not None and rng.random() < 0.15:
            n = 0
            tentative = False
            tags.add("commit-only")
        elif tentative:
            n = rng.randrange(1, room + 1)
            tags.add("tentative")
        elif rng.random() < 0.55:
            n = 1
        elif w.lookahead > 1 and rng.random() < 0.6:
            n = rng.randrange(w.lookahead + 1, 3 * w.lookahead + 2)
        else:
            n = rng.randrange(2, 12)
        if n > 1:
            tags.add("multi")
        if n > w.lookahead and not tentative:
            tags.add("longer-than-lookahead")
        return (self._positions(w.newest, n), tentative, commit, create,
                tags)

    def _step_body(self, fields, body, have=None):
        positions, tentative, commit, create, _ = fields
        rng = self.rng
        if len(positions) == 1 and rng.random() < 0.7:
            body["pos"] = positions[0]
        elif positions:
            body["positions"] = positions
        if tentative or rng.random() < 0.05:
            body["tentative"] = tentative
        if commit is not None:
            body["commit"] = commit
        if rng.random() < 0.1:
            body["attention"] = [0.5, {"any": "json"}]
        if create is not None:
            self._config_body(create, body)
        elif have is not None and rng.random() < 0.05:
            # Creation fields on an existing session: its own, accepted
            # (others are refused: op_bad_step).
            self._config_body(have, body)
        return body

    def _op(self, kind, method, path, body, sids, fn, tags=()):
        before = {s: self.s[s] for s in sids}
        after = {s: self.s[s].copy() for s in sids}
        status, ans = fn(after)
        tags = set(tags)
        if status >= 400:
            tags.add("error-" + ans["error"]["code"].replace("_", "-"))
        return Op(method, path, body, status, ans, before, after, kind, tags)

    @staticmethod
    def _win_tags(w):
        if w is None:
            return set()
        return ({"lookahead"} if w.lookahead > 1 else set()) | (
            {"pages"} if w.page_size else set())

    def _expect(self, w, body, tags, p=0.3):
        """Sometimes adds the newest the session has (0 for one a step
        creates) as "expect_newest": returns it, or None."""
        if self.rng.random() >= p:
            return None
        body["expect_newest"] = w.newest if w is not None else 0
        tags.add("expect")
        return body["expect_newest"]

    # -- requests --
    def op_step(self, sid):
        """A step that applies (drafts pending: it commits or adds
        drafts)."""
        fields = self._step_fields(self.s[sid])
        w = self.s[sid].win
        body = self._step_body(fields, {}, w.config() if w else None)
        positions, tentative, commit, create, tags = fields
        exp = self._expect(w, body, tags)
        op = self._op("step", "POST", f"/session/{sid}/step", body, [sid],
                      lambda a: do_step(a[sid], positions, tentative, commit,
                                        create, expect_newest=exp, sid=sid),
                      tags)
        assert op.status == 200, (op.describe(), op.answer)
        op.tags |= self._win_tags(op.after[sid].win)
        return op

    def op_bad_step(self, sid):
        """A step refused: stale (also after its own commit), not
        tentative while drafts are pending, a commit below the committed
        newest, or more drafts than the lookahead."""
        sess, rng = self.s[sid], self.rng
        w, r = sess.win, rng.random()
        positions, tentative, commit = [0], False, None
        if w is None or r < 0.2:
            # Position 0 is never a retry (no step request holds it), and
            # creates nothing on an unknown session.
            pass
        elif w.drafts() and r < 0.45:
            positions = [w.newest + 1]
        elif w.committed > 0 and r < 0.6:
            positions, commit = [w.newest + 5], rng.randrange(0, w.committed)
        elif r < 0.8:
            # Not above the newest that its own commit leaves; the error
            # names the newest before the request.
            commit = self._commit_arg(w)
            after = w.copy()
            after.commit(commit)
            positions = [rng.randrange(max(after.newest - 3, 0),
                                       after.newest + 1)]
            tentative = rng.random() < 0.5
        else:
            tentative = True
            commit = self._commit_arg(w) if rng.random() < 0.5 else None
            after = w.copy()
            if commit is not None:
                after.commit(commit)
            room = w.lookahead - len(after.drafts())
            positions = self._positions(after.newest, room + 1)
        body = {"positions": positions} if len(positions) > 1 or \
            rng.random() < 0.5 else {"pos": positions[0]}
        if tentative:
            body["tentative"] = True
        if commit is not None:
            body["commit"] = commit
        given = None
        if w is not None and rng.random() < 0.15:
            # Another configuration than the session's: 409 before
            # anything else is looked at.
            given = {"budget": w.budget + 1 if w.budget < 300
                     else w.budget - 1, "sinks": w.sinks}
            body.update(given)
        return self._op("bad-step", "POST", f"/session/{sid}/step", body,
                        [sid], lambda a: do_step(a[sid], positions, tentative,
                                                 commit, self.defaults,
                                                 given))

    def op_unknown(self, sid):
        """Commit, truncate, evict and fork of a session that does not
        exist: 404, and nothing is created (by a fork neither)."""
        rng = self.rng
        into = rng.choice([i for i in self.ids if i != sid] or [sid + "x"])
        method, path, body = rng.choice((
            ("POST", f"/session/{sid}/commit", {"newest": rng.randrange(9)}),
            ("POST", f"/session/{sid}/truncate",
             {"from": 1 + rng.randrange(9)}),
            ("POST", f"/session/{sid}/evict", None),
            ("POST", f"/session/{sid}/fork", {"into": into}),
            # A step expecting a newest past 0: not autocreated.
            ("POST", f"/session/{sid}/step",
             {"pos": 3 + rng.randrange(9), "expect_newest": 2})))
        return self._op("unknown", method, path, body, [sid, into],
                        lambda a: error(404, "unknown_session"))

    def op_batch(self):
        k = self.rng.randrange(1, 6)
        sids = [self.rng.choice(self.ids) for _ in range(k)]
        items, plan, tags = [], [], set()
        # Bodies are made against the state the earlier items leave.
        shadow = {sid: self.s[sid].copy() for sid in set(sids)}
        for sid in sids:
            sess, r = shadow[sid], self.rng.random()
            item = {"session": sid}
            exp = None
            if r < 0.07:
                # Stale: refused alone, the others still apply.
                item["pos"] = 0
                args = ([0], False, None, self.defaults)
            elif r < 0.1 and sess.win is not None:
                # Diverged: refused alone, with the session's view.
                exp = sess.win.newest + 1 + self.rng.randrange(3)
                item.update(pos=sess.win.newest + 1, expect_newest=exp)
                args = ([sess.win.newest + 1], False, None, None)
            elif (r < 0.14 and sess.last is not None
                  and sess.last[0][0] == "step"):
                _, _, body = request_of(sid, sess.last[0], self.rng)
                item.update(body)
                _, positions, tentative, commit = sess.last[0]
                args = (list(positions), tentative, commit, None)
                tags.add("retry-batch")
            elif r < 0.18 and sess.win is not None and sess.win.drafts():
                item["pos"] = sess.win.newest + 1
                args = ([sess.win.newest + 1], False, None, None)
            else:
                fields = self._step_fields(sess)
                self._step_body(fields, item,
                                sess.win.config() if sess.win else None)
                args = fields[:4]
                tags |= fields[4]
                exp = self._expect(sess.win, item, tags)
            do_step(sess, *args, expect_newest=exp, sid=sid)
            tags |= self._win_tags(sess.win)
            items.append(item)
            plan.append((sid, args, exp))

        def fn(after):
            results = []
            for sid, args, exp in plan:
                results.append(as_item(*do_step(after[sid], *args,
                                                expect_newest=exp, sid=sid)))
            return 200, {"results": results}
        op = self._op("batch", "POST", "/step", {"steps": items}, sids, fn,
                      tags)
        for res in op.answer["results"]:
            if "error" in res:
                op.tags.add("error-" + res["error"]["code"].replace("_", "-"))
        return op

    def op_evict(self, sid):
        w = self.s[sid].win
        body = None
        b = w.budget
        tags = set()
        if self.rng.random() < 0.7:
            b = self.rng.randrange(w.sinks + 1, w.budget + 2)
            body = {"budget": b}
            exp = self._expect(w, body, tags)
        else:
            exp = None
        return self._op("evict", "POST", f"/session/{sid}/evict", body, [sid],
                        lambda a: do_evict(a[sid], b, exp, sid), tags)

    def op_commit(self, sid):
        w, rng = self.s[sid].win, self.rng
        if w.committed > 0 and rng.random() < 0.05:
            p = rng.randrange(0, w.committed)
        else:
            p = self._commit_arg(w)
        tags = {"commit-drafts"} if w.drafts() else set()
        body = {"newest": p}
        exp = self._expect(w, body, tags)
        return self._op("commit", "POST", f"/session/{sid}/commit", body,
                        [sid], lambda a: do_commit(a[sid], p, exp, sid),
                        tags | self._win_tags(w))

    def op_truncate(self, sid):
        w, rng = self.s[sid].win, self.rng
        held = [q for q, _ in w.held if q >= 1]
        pinned = [q for q, s in w.held if q >= 1 and s < w.sinks]
        r = rng.random()
        tags = set()
        if pinned and r < 0.1:
            p = rng.choice(pinned)  # into the sinks
        elif r < 0.2 or not held:
            p = w.newest + rng.choice((1, 1, 2, 100))
        elif r < 0.35:
            p = rng.randrange(1, w.newest + 1)
        elif r < 0.5 and w.drafts():
            p = rng.choice(w.drafts())
        elif r < 0.6 and len(held) > 1:
            i = rng.randrange(1, len(held))  # between two held positions
            p = rng.randrange(held[i - 1] + 1, held[i] + 1)
        else:
            p = rng.choice(held)
        if p > w.newest:
            tags.add("truncate-above")
        if any(q >= p for q, s in w.held if s < w.sinks):
            tags.add("truncate-sinks")
        if any(q >= p for q in w.drafts()):
            tags.add("truncate-drafts")
        body = {"from": p}
        exp = self._expect(w, body, tags)
        return self._op("truncate", "POST", f"/session/{sid}/truncate",
                        body, [sid], lambda a: do_truncate(a[sid], p, exp,
                                                           sid),
                        tags | self._win_tags(w))

    def op_fork(self, sid):
        rng = self.rng
        free = [s for s in self.ids if self.s[s].win is None]
        tags = set()
        if (self.last_fork and self.last_fork[0] == sid
                and rng.random() < 0.4):
            into = self.last_fork[1]
            tags.add("fork-again")
        elif rng.random() < 0.05:
            into = sid
            tags.add("fork-self")
        elif free and rng.random() < 0.85:
            into = rng.choice(free)
        else:
            into = rng.choice(self.ids)
        if into != sid:
            self.last_fork = (sid, into)
        body = {"into": into}
        exp = self._expect(self.s[sid].win, body, tags)
        return self._op("fork", "POST", f"/session/{sid}/fork", body,
                        [sid, into], lambda a: do_fork(a, sid, into, exp),
                        tags | self._win_tags(self.s[sid].win))

    def op_diverged(self, sid):
        """A change expecting a newest the session does not have: 409 with
        its newest and view, nothing changed (not a resend of its record:
        that would be answered from it)."""
        sess, rng = self.s[sid], self.rng
        w = sess.win
        exp = rng.choice([w.newest + 1 + rng.randrange(5)] +
                         ([w.newest - 1] if w.newest > 0 else []))
        last = sess.last[0] if sess.last else None
        free = [s for s in self.ids if self.s[s].win is None and s != sid]
        r = rng.random()
        if r < 0.2 and ("commit", w.committed + 3) != last:
            path, body = "commit", {"newest": w.committed + 3}
        elif r < 0.4 and ("truncate", w.newest + 9) != last:
            path, body = "truncate", {"from": w.newest + 9}
        elif r < 0.55:
            path, body = "evict", {}
        elif r < 0.7 and free:
            path, body = "fork", {"into": rng.choice(free)}
        else:
            path, body = "step", {"pos": w.newest + 1}
        body["expect_newest"] = exp
        return self._op("diverged", "POST", f"/session/{sid}/{path}", body,
                        [sid] + ([body["into"]] if "into" in body else []),
                        lambda a: diverged_error(a[sid], sid, exp))

    def _adoptable(self):
        """A configuration and a window in a state steps, truncations and
        evictions leave (none pending, something held)."""
        rng = self.rng
        cfg = self._config()
        w = Win(*cfg)
        for _ in range(rng.randrange(0, 6)):
            r = rng.random()
            if r < 0.6:
                w.steps(self._positions(w.newest, rng.randrange(
                    1, 2 * w.lookahead + 2)), False)
            elif r < 0.8:
                w.truncate(rng.randrange(1, w.newest + 3))
            else:
                w.evict(rng.randrange(w.sinks + 1, w.budget + 1))
        if not w.held:  # a truncation emptied a window without sinks
            w.steps(self._positions(w.newest, 1), False)
        return cfg, w

    def op_adopt(self, sid):
        """An adoption: the session's own state again (a resend), another
        state (refused without replace, else replacing it), or a new
        session; with the slots or in the canonical layout, the pages now
        and then."""
        sess, rng = self.s[sid], self.rng
        tags = set()
        if sess.win is not None and not sess.win.drafts() and \
                sess.win.held and rng.random() < 0.3:
            cfg, w = sess.win.config(), sess.win
            tags.add("adopt-resend")
        else:
            cfg, w = self._adoptable()
        kept = [p for p, _ in w.held]
        slots = [s for _, s in w.held] if rng.random() < 0.5 else None
        pages = w.pages() if w.page_size and rng.random() < 0.5 else None
        replace = None
        if sess.win is not None:
            replace = rng.random() < 0.8
            if replace and "adopt-resend" not in tags:
                tags.add("adopt-replace")
        elif rng.random() < 0.2:
            replace = False
        if sess.win is None:
            tags.add("adopt")
        body = adopt_body(cfg, kept, w.newest, slots, pages, replace)
        return self._op("adopt", "POST", f"/session/{sid}/adopt", body,
                        [sid], lambda a: do_adopt(a[sid], sid, cfg, kept,
                                                  w.newest, slots,
                                                  bool(replace)), tags)

    def op_bad_adopt(self, sid):
        """An adoption of a state no session can be in (each rule in
        turn): 400 invalid_state, nothing changes."""
        rng = self.rng
        cfg, w = self._adoptable()
        kept = [p for p, _ in w.held]
        slots = [s for _, s in w.held]
        newest, pages = w.newest, None
        r = rng.random()
        if r < 0.15 and len(kept) > 1:
            kept[1] = kept[0]  # repeated
        elif r < 0.3 and len(kept) > 1:
            kept[0], kept[1] = kept[1], kept[0]  # out of order
        elif r < 0.45 and kept[-1] > 0:
            newest = kept[-1] - 1  # below a held position
        elif r < 0.55 and w.sinks > 0 and len(kept) > 1:
            kept, slots = kept[1:], slots[1:]  # position 0 missing
        elif r < 0.7:
            kept = list(range(w.budget + 1))  # past the budget
            newest, slots = w.budget, None
        elif r < 0.8 and w.page_size:
            pages = w.pages() + [w.pages()[-1] + 1]  # not their pages
        elif r < 0.9:
            slots[0] = w.budget + w.lookahead  # not a slot
        else:
            slots = slots[:-1]  # one slot short
        body = adopt_body(cfg, kept, newest, slots, pages,
                          rng.random() < 0.5)
        return self._op("bad-adopt", "POST", f"/session/{sid}/adopt", body,
                        [sid], lambda a: error(400, "invalid_state"))

    def op_resend_to_child(self):
        """The parent's last request sent to its fork child: the child has
        no replay record of its own, so it is not a replay there."""
        parent, child = self.last_fork
        method, path, body = request_of(child, self.s[parent].last[0],
                                        self.rng)
        return self._op("resend-to-child", method, path, body, [child],
                        lambda a: apply_request(a, child, method, path,
                                                body))

    def op_put(self, sid):
        w = self.s[sid].win
        if w is None:
            cfg = self._config()
        elif self.rng.random() < 0.1:
            cfg = self._config()  # most likely another one: 409
        else:
            cfg = w.config()
        body = {}
        self._config_body(cfg, body)
        return self._op("put", "PUT", f"/session/{sid}", body, [sid],
                        lambda a: do_put(a[sid], sid, cfg))

    def op_delete(self, sid):
        def fn(a):
            a[sid] = Sess()
            return 204, None
        return self._op("delete", "DELETE", f"/session/{sid}", None, [sid],
                        fn)

    def op_retry(self, sid):
        """The last step, commit or truncate request again: answered as
        before, plus "replayed", and nothing changes."""
        sess = self.s[sid]
        key, ans = sess.last
        method, path, body = request_of(sid, key, self.rng)
        if self.rng.random() < 0.2:
            # What a resend carries: the newest before the request, which
            # no longer matches; the record answers it all the same.
            body["expect_newest"] = self.rng.randrange(sess.win.newest + 2)
        return Op(method, path, body, 200, dict(ans, replayed=True),
                  {sid: sess}, {sid: sess}, "retry-" + key[0])

    def op_get(self, sid):
        sess = self.s[sid]
        if sess.win is None:
            return Op("GET", f"/session/{sid}", None, 404,
                      {"error": {"code": "unknown_session", "message": ""}},
                      {sid: sess}, {sid: sess}, "get")
        return Op("GET", f"/session/{sid}", None, 200, sess.win.view(sid),
                  {sid: sess}, {sid: sess}, "get")

    def next_op(self):
        """A random request over this fleet's sessions."""
        rng = self.rng
        sid = rng.choice(self.ids)
        sess = self.s[sid]
        r = rng.random()
        if sess.win is None:
            if r < 0.25:
                return self.op_put(sid)
            if r < 0.28:
                return self.op_adopt(sid)
            if r < 0.3:
                return self.op_get(sid)
            if r < 0.33:
                return self.op_bad_step(sid)
            if r < 0.36:
                return self.op_unknown(sid)
            if r < 0.55:
                return self.op_batch()
            return self.op_step(sid)
        if (self.last_fork and r < 0.03
                and self.s[self.last_fork[0]].last is not None
                and self.s[self.last_fork[1]].win is not None):
            return self.op_resend_to_child()
        drafts = bool(sess.win.drafts())
        if r < 0.38:
            return self.op_step(sid)
        if r < 0.52:
            return self.op_batch()
        if r < 0.58:
            return self.op_commit(sid)
        if r < 0.65:
            return self.op_truncate(sid)
        if r < 0.7:
            return self.op_fork(sid)
        if r < 0.76:
            if drafts and rng.random() < 0.8:
                return self.op_step(sid)
            return self.op_evict(sid)  # with drafts: 409
        if r < 0.78:
            return self.op_delete(sid)
        if r < 0.81:
            return self.op_put(sid)
        if r < 0.83:
            return self.op_bad_step(sid)
        if r < 0.85:
            return self.op_adopt(sid)
        if r < 0.855:
            return self.op_bad_adopt(sid)
        if r < 0.87:
            return self.op_diverged(sid)
        if r < 0.92 and sess.last is not None:
            return self.op_retry(sid)
        return self.op_get(sid)

    def send(self, client, op):
        """Sends op and checks the answer against the model; applies it to
        the model once the answer is in. Raises Transport when no whole
        answer came (then the caller decides what the model is)."""
        status, body = client.call(op.method, op.path, op.body)
        expect(status == op.status and same_answer(body, op.answer),
               f"{op.describe()}: expected {op.status} "
               f"{json.dumps(op.answer)[:600]}, got {status} "
               f"{json.dumps(body)[:600]}")
        self.s.update(op.after)
        self.sent += 1
        tags = set(op.tags)
        if op.kind == "fork" and op.status == 201:
            self.children.add(op.body["into"])
            parent = op.path.split("/")[2]
            if self.s[parent].last is not None:
                self.fork_origin[op.body["into"]] = self.s[parent].last[0]
        if op.kind == "adopt" and op.status in (200, 201):
            self.adopted.add(op.path.split("/")[2])
        for sid, st in op.after.items():
            if st.win is None or st.last is not None:
                self.adopted.discard(sid)
            if st.win is None:
                self.children.discard(sid)
                self.fork_origin.pop(sid, None)
            elif (sid in self.children and op.kind != "fork"
                  and st is not op.before[sid]
                  and st.last is not op.before[sid].last):
                tags.add("fork-child")
        for t in tags:
            self.count[t] = self.count.get(t, 0) + 1

    def run(self, client, n):
        for _ in range(n):
            self.send(client, self.next_op())
