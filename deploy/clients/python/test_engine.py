"""Engine workflows through both clients, against the real daemon
(EVICTD_BIN, else ../../../build/evictd): lookahead sub-steps, tentative
steps and commits, truncate, fork, pages, and the errors that go with them.

Every test is written once, as a coroutine, and runs twice: with the
blocking EvictdClient (seen through AsAsync) and with AsyncEvictdClient.
From this directory, `EVICTD_BIN=/abs/path/evictd python3 -m unittest -v
test_engine`.
"""

import asyncio
import dataclasses
import os
import random
import sys
import tempfile
import unittest
from typing import Any, Dict, List, Optional, Set

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import evictd_client as ec  # noqa: E402
from evictd_client import (  # noqa: E402
    CommitResult, EvictdClient, EvictdError, StepBatch, StepResult,
    TruncateResult)
from evictd_aio import AsyncEvictdClient  # noqa: E402
from test_evictd_client import (  # noqa: E402
    VECTORS, AsAsync, Daemon, load_vector, replay_vector)

TMP: Any = None
MAIN: Any = None   # the daemon on its defaults
FLAGS: Any = None  # --lookahead 2 --page-size 8 --max-lookahead 4 ...


def start(*args: str) -> Daemon:
    d = Daemon(TMP.name, *args)
    unittest.addModuleCleanup(d.stop)
    return d


def setUpModule() -> None:
    global TMP, MAIN, FLAGS
    TMP = tempfile.TemporaryDirectory(prefix="evictd-pyengine-")
    unittest.addModuleCleanup(TMP.cleanup)
    MAIN = start()
    FLAGS = start("--lookahead", "2", "--page-size", "8", "--max-lookahead",
                  "4", "--max-positions", "8", "--no-autocreate")


def window(newest: int, budget: int, sinks: int) -> List[int]:
    """The committed positions a sliding window with sinks keeps of
    0..newest."""
    everything = list(range(newest + 1))
    if len(everything) <= budget:
        return everything
    return everything[:sinks] + everything[len(everything) - (budget - sinks):]


class Slots:
    """What a frontend knows of one session: position -> slot, updated from
    answers alone, refusing a slot that is still held or out of range."""

    def __init__(self, test: unittest.TestCase, view: ec.SessionView) -> None:
        self.test = test
        self.ring = view.ring_size
        self.held: Dict[int, int] = dict(zip(view.kept, view.slots))

    def free(self, positions: List[int]) -> None:
        for p in positions:
            self.test.assertIn(p, self.held)
            del self.held[p]

    def place(self, positions: List[int], slots: List[int]) -> None:
        self.test.assertEqual(len(positions), len(slots))
        for p, s in zip(positions, slots):
            self.test.assertTrue(0 <= s < self.ring, (p, s, self.ring))
            self.test.assertNotIn(s, self.held.values(), (p, s, self.held))
            self.held[p] = s

    def step(self, r: StepResult) -> None:
        """Frees what the answer frees and places the positions it keeps
        (a position stepped and evicted by the same answer only passes)."""
        self.free(r.dropped)
        new = set(r.positions)
        self.free([p for p in r.victims if p not in new])
        gone = set(r.victims)
        kept = [(p, s) for p, s in zip(r.positions, r.slots) if p not in gone]
        self.place([p for p, _ in kept], [s for _, s in kept])

    def matches(self, view: ec.SessionView) -> None:
        self.test.assertEqual(dict(zip(view.kept, view.slots)), self.held)


class Engine:
    """The tests; a subclass says which client runs them (make_client)."""

    kind = "?"

    def make_client(self, url: str, **kw: Any) -> Any:
        raise NotImplementedError

    async def asyncSetUp(self) -> None:
        # The blocking client blocks the loop on purpose: no debug warnings.
        asyncio.get_running_loop().slow_callback_duration = 60
        self.c = self.make_client(MAIN.url)

    def sid(self, name: str = "s") -> str:
        return "%s.%s.%s" % (self.kind, self._testMethodName[5:90], name)

    async def assertApiError(self, cls: type, status: int, coro: Any
                             ) -> EvictdError:
        with self.assertRaises(cls) as cm:
            await coro
        e = cm.exception
        self.assertIs(type(e), cls)
        self.assertEqual((e.status, e.code), (status, cls.code))
        self.assertTrue(e.message)
        return e

    # -- configuration --

    async def test_create_with_lookahead_and_page_size(self) -> None:
        s = self.sid()
        v = await self.c.create(s, budget=8, sinks=2, lookahead=4,
                                page_size=4)
        self.assertEqual(v, ec.SessionView(s, 8, 2, 1, 0, [0], [0], True, 4,
                                           4, [], [0]))
        self.assertEqual(v.ring_size, 12)
        again = await self.c.create(s, budget=8, sinks=2, lookahead=4,
                                    page_size=4)
        self.assertEqual(again, dataclasses.replace(v, created=False))
        for kw in ({"lookahead": 3}, {"page_size": 0}, {}):
            await self.assertApiError(ec.SessionExists, 409, self.c.create(
                s, budget=8, sinks=2, **kw))
        d = await self.c.create(self.sid("d"))
        self.assertEqual((d.budget, d.lookahead, d.page_size, d.tentative,
                          d.pages, d.ring_size), (512, 1, 0, [], [], 513))
        # At the defaults the view has no new fields on the wire.
        _, raw = await self.c.request("GET", "/session/" + self.sid("d"))
        self.assertEqual(list(raw), ["id", "budget", "sinks", "size",
                                     "newest", "kept", "slots"])

    async def test_defaults_and_limits_come_from_the_flags(self) -> None:
        c = self.make_client(FLAGS.url)
        v = await c.create(self.sid(), budget=4)
        self.assertEqual((v.lookahead, v.page_size, v.pages, v.ring_size),
                         (2, 8, [0], 6))
        self.assertEqual((await c.create(self.sid("4"), lookahead=4)
                          ).lookahead, 4)
        await self.assertApiError(ec.InvalidLookahead, 400, c.create(
            self.sid("5"), lookahead=5))
        # --max-positions still bounds a request.
        await c.create(self.sid("m"), lookahead=4)
        await self.assertApiError(ec.TooManyPositions, 400, c.step(
            self.sid("m"), list(range(1, 10))))
        # --no-autocreate: commit, truncate and fork never create anyway.
        await self.assertApiError(ec.UnknownSession, 404, c.step(
            self.sid("x"), 1, lookahead=2))

    async def test_autocreating_step_takes_lookahead_and_page_size(
            self) -> None:
        s = self.sid()
        r = await self.c.step(s, [1, 2, 3, 4, 5], budget=4, lookahead=3,
                              page_size=2)
        # Sub-steps [1,2,3] and [4,5]. The session held nothing before, so
        # page 0, entered and left by this request, is transient: neither
        # new nor freed.
        self.assertEqual(r, StepResult([0, 1], [1, 2, 3, 4, 5], 4, 5, False,
                                       [1, 2, 3, 4, 5], [], [1, 2], [],
                                       False, None, [0]))
        v = await self.c.get(s)
        self.assertEqual((v.lookahead, v.page_size, v.pages),
                         (3, 2, [1, 2]))
        out = await self.c.batch([
            ec.step_item(self.sid("b"), [1, 2], lookahead=2, page_size=1),
            ec.step_item(self.sid("c"), 1, lookahead=0),
            ec.step_item(self.sid("d"), 1, page_size=65537)])
        self.assertEqual((out[0].pages_new, out[0].pages_freed,
                          out[0].pages_transient), ([0, 1, 2], [], []))
        self.assertIs(type(out[1]), ec.InvalidLookahead)
        self.assertIs(type(out[2]), ec.InvalidPageSize)
        self.assertEqual((out[1].status, out[2].status), (400, 400))
        self.assertEqual((await self.c.get(self.sid("b"))).lookahead, 2)

    # -- steps in sub-steps, drafts, commits --

    async def test_sub_steps_of_lookahead_positions(self) -> None:
        one, four = self.sid("1"), self.sid("4")
        await self.c.create(one, budget=4)
        await self.c.create(four, budget=4, lookahead=4)
        a = await self.c.step(one, [1, 2, 3, 4, 5, 6])
        b = await self.c.step(four, [1, 2, 3, 4, 5, 6])
        # Lookahead 1: append and evict one by one, in a ring of 5 slots.
        self.assertEqual((a.victims, a.slots, a.size), ([0, 1, 2],
                                                        [1, 2, 3, 4, 0, 1],
                                                        4))
        # Lookahead 4: [1..4] then [5,6], each evicted after, 8 slots.
        self.assertEqual((b.victims, b.slots, b.size), ([0, 1, 2],
                                                        [1, 2, 3, 4, 5, 6],
                                                        4))
        self.assertEqual((await self.c.get(four)).kept, [3, 4, 5, 6])

    async def test_drafts_commit_in_a_step_and_commit_only(self) -> None:
        s = self.sid()
        await self.c.create(s, budget=4, lookahead=3)
        await self.c.step(s, [1, 2, 3, 4])
        before = await self.c.get(s)
        r = await self.c.step(s, [5, 6, 7], tentative=True)
        self.assertEqual((r.victims, r.size, r.newest, r.dropped, r.tentative,
                          r.commit), ([], 7, 7, [], True, None))
        self.assertFalse(set(r.slots) & set(before.slots))
        v = await self.c.get(s)
        self.assertEqual((v.kept, v.tentative, v.size),
                         ([1, 2, 3, 4, 5, 6, 7], [5, 6, 7], 7))
        slot_of = dict(zip(v.kept, v.slots))
        # Refused while drafts are pending, and nothing changes.
        await self.assertApiError(ec.TentativePending, 409,
                                  self.c.step(s, 8))
        await self.assertApiError(ec.TentativePending, 409,
                                  self.c.evict(s, 2))
        await self.assertApiError(ec.TooManyPositions, 400,
                                  self.c.step(s, 8, tentative=True))
        e = await self.assertApiError(ec.StalePosition, 409, self.c.step(
            s, [6], tentative=True, commit=6))
        self.assertEqual(e.newest, 7)
        await self.assertApiError(ec.InvalidPosition, 400, self.c.step(
            s, [8], tentative=True, commit=3))
        self.assertEqual(await self.c.get(s), v)
        # Accept 5 and 6, drop 7, evict to the budget, then two drafts.
        r = await self.c.step(s, [7, 8], tentative=True, commit=6)
        self.assertEqual(r, StepResult([1, 2], [slot_of[7], r.slots[1]], 6, 8,
                                       False, [7, 8], [7], [], [], True, 6))
        self.assertEqual(r.freed, [1, 2, 7])
        self.assertEqual(r.placements, [(7, slot_of[7]), (8, r.slots[1])])
        # A commit-only step: no positions, empty slots.
        r = await self.c.step(s, commit=8)
        self.assertEqual(r, StepResult([3, 4], [], 4, 8, False, [], [], [],
                                       [], False, 8))
        v = await self.c.get(s)
        self.assertEqual((v.kept, v.tentative), ([5, 6, 7, 8], []))
        # An exact retry of the last step is replayed.
        again = await self.c.step(s, commit=8)
        self.assertTrue(again.replayed)
        self.assertEqual(dataclasses.replace(again, replayed=False), r)
        # Plain steps work again.
        r = await self.c.step(s, 9)
        self.assertEqual((r.victims, r.newest), ([5], 9))

    async def test_commit(self) -> None:
        s = self.sid()
        await self.c.create(s, budget=3, sinks=1, lookahead=4)
        await self.c.step(s, [1, 2])
        # Nothing pending is a valid commit (at or above the committed
        # newest); below it is not.
        self.assertEqual(await self.c.commit(s, 2),
                         CommitResult([], [], 3, 2))
        await self.assertApiError(ec.InvalidPosition, 400,
                                  self.c.commit(s, 1))
        await self.c.step(s, [3, 4, 5, 6], tentative=True)
        c = await self.c.commit(s, 4)
        self.assertEqual(c, CommitResult([1, 2], [5, 6], 3, 4))
        v = await self.c.get(s)
        self.assertEqual((v.kept, v.tentative, v.newest),
                         ([0, 3, 4], [], 4))
        again = await self.c.commit(s, 4)
        self.assertEqual(again, CommitResult([1, 2], [5, 6], 3, 4, True))
        self.assertEqual(await self.c.get(s), v)
        # A commit above the newest accepts every draft.
        await self.c.step(s, [5, 6], tentative=True)
        c = await self.c.commit(s, 100)
        self.assertEqual((c.victims, c.dropped, c.newest), ([3, 4], [], 6))
        for bad in (-1, 2 ** 32, "7", 1.5):
            await self.assertApiError(ec.InvalidPosition, 400,
                                      self.c.commit(s, bad))
        await self.assertApiError(ec.InvalidField, 400, self.c.request(
            "POST", "/session/%s/commit" % s, {}))
        await self.assertApiError(ec.UnknownSession, 404,
                                  self.c.commit(self.sid("none"), 1))
        await self.assertApiError(ec.UnknownSession, 404,
                                  self.c.get(self.sid("none")))

    async def test_truncate_and_restep(self) -> None:
        s = self.sid()
        await self.c.create(s, budget=6, sinks=2)
        await self.c.step(s, list(range(1, 11)))
        v = await self.c.get(s)
        self.assertEqual(v.kept, [0, 1, 7, 8, 9, 10])
        slot_of = dict(zip(v.kept, v.slots))
        t = await self.c.truncate(s, 8)
        self.assertEqual(t, TruncateResult([8, 9, 10], 3, 7))
        # The positions come back in the slots they left.
        r = await self.c.step(s, [8, 9])
        self.assertEqual((r.victims, r.slots, r.size, r.newest),
                         ([], [slot_of[8], slot_of[9]], 5, 9))
        # Above the newest: nothing happens, and it is no error.
        self.assertEqual(await self.c.truncate(s, from_=100),
                         TruncateResult([], 5, 9))
        self.assertTrue((await self.c.truncate(s, from_=100)).replayed)
        # Into the sinks: position 1 is pinned again, in slot 1, and the
        # first unpinned one takes slot `sinks`.
        t = await self.c.truncate(s, 1)
        self.assertEqual(t, TruncateResult([1, 7, 8, 9], 1, 0))
        r = await self.c.step(s, [1, 2, 3])
        self.assertEqual((r.victims, r.slots, r.newest), ([], [1, 2, 3], 3))
        for bad in (0, -1, "2"):
            await self.assertApiError(ec.InvalidPosition, 400,
                                      self.c.truncate(s, bad))
        await self.assertApiError(ec.InvalidField, 400, self.c.request(
            "POST", "/session/%s/truncate" % s, {}))
        with self.assertRaises(ValueError):
            await self.c.truncate(s)
        with self.assertRaises(ValueError):
            await self.c.truncate(s, 2, from_=2)
        await self.assertApiError(ec.UnknownSession, 404,
                                  self.c.truncate(self.sid("none"), 1))

    async def test_truncate_among_drafts(self) -> None:
        s = self.sid()
        await self.c.create(s, budget=4, lookahead=3, page_size=2)
        await self.c.step(s, [1, 2, 3, 4])
        await self.c.step(s, [5, 6, 7], tentative=True)
        t = await self.c.truncate(s, 6)
        self.assertEqual(t, TruncateResult([6, 7], 5, 5, False, [], [3]))
        v = await self.c.get(s)
        self.assertEqual((v.kept, v.tentative, v.pages),
                         ([1, 2, 3, 4, 5], [5], [0, 1, 2]))
        await self.assertApiError(ec.TentativePending, 409,
                                  self.c.step(s, 6))
        r = await self.c.step(s, [6, 7], tentative=True)
        self.assertEqual((r.pages_new, r.size), ([3], 7))
        c = await self.c.commit(s, 6)
        self.assertEqual(c, CommitResult([1, 2], [7], 4, 6, False, [], [0]))

    # -- forks --

    async def test_fork_then_divergent_steps(self) -> None:
        p, child, twin = self.sid("p"), self.sid("child"), self.sid("twin")
        await self.c.create(p, budget=4, sinks=1, lookahead=2, page_size=2)
        await self.c.step(p, [1, 2, 3, 4, 5])
        await self.c.step(p, [6, 7], tentative=True)
        pv = await self.c.get(p)
        v = await self.c.fork(p, child)
        self.assertEqual(v, dataclasses.replace(pv, id=child, created=True))
        self.assertEqual((v.tentative, v.lookahead, v.page_size),
                         ([6, 7], 2, 2))
        self.assertEqual(await self.c.fork(p, child),
                         dataclasses.replace(v, created=False))
        await self.assertApiError(ec.InvalidField, 400,
                                  self.c.fork(p, p))  # into itself
        await self.c.fork(p, twin)
        # The parent accepts every draft, the child none and steps on; the
        # twin does what the parent does and must answer alike.
        a = await self.c.commit(p, 7)
        self.assertEqual(await self.c.commit(twin, 7), a)
        self.assertEqual((a.victims, a.dropped, a.newest), ([3, 4], [], 7))
        c = await self.c.commit(child, 5)
        self.assertEqual((c.victims, c.dropped, c.newest, c.pages_freed),
                         ([], [6, 7], 5, [3]))
        r = await self.c.step(child, [6, 7, 8])
        self.assertEqual((r.victims, r.newest), ([3, 4, 5], 8))
        a = await self.c.step(p, [8, 9])
        self.assertEqual(await self.c.step(twin, [8, 9]), a)
        pv, cv = await self.c.get(p), await self.c.get(child)
        self.assertEqual((pv.kept, cv.kept), ([0, 7, 8, 9], [0, 6, 7, 8]))
        self.assertEqual(dataclasses.replace(await self.c.get(twin), id=p),
                         pv)
        # Now different: a fork into the child is refused.
        await self.assertApiError(ec.SessionExists, 409,
                                  self.c.fork(p, child))
        # The child has no replay record: the parent's last request is new
        # there (and here stale).
        late = self.sid("late")
        await self.c.fork(p, late)
        await self.assertApiError(ec.StalePosition, 409,
                                  self.c.step(late, [8, 9]))

    async def test_fork_errors(self) -> None:
        s = self.sid()
        await self.c.create(s)
        await self.assertApiError(ec.UnknownSession, 404,
                                  self.c.fork(self.sid("none"), self.sid("x")))
        await self.assertApiError(ec.InvalidSessionId, 400,
                                  self.c.fork(s, "bad id"))
        await self.assertApiError(ec.InvalidField, 400, self.c.fork(s, 7))
        await self.assertApiError(ec.InvalidField, 400, self.c.request(
            "POST", "/session/%s/fork" % s, {"into": "x", "colour": 1}))
        await self.c.create(self.sid("other"), budget=3)
        await self.assertApiError(ec.SessionExists, 409,
                                  self.c.fork(s, self.sid("other")))
        with self.assertRaises(TypeError):
            await self.c.fork(None, "x")

    # -- pages --

    async def test_pages_fields_agree_with_the_views(self) -> None:
        rng = random.Random(9)
        s = self.sid()
        B = 3
        await self.c.create(s, budget=5, sinks=1, lookahead=3, page_size=B)
        before = await self.c.get(s)
        kinds: Set[str] = set()
        replays = transients = 0
        for i in range(300):
            pending = before.tentative
            committed = before.newest - len(pending)
            op = rng.choice(["step", "draft", "commit", "truncate", "evict"])
            try:
                if op == "step" and not pending:
                    r: Any = await self.c.step(s, list(range(
                        before.newest + 1, before.newest + rng.randint(2, 8))))
                elif op in ("step", "draft"):
                    c = (committed + rng.randint(0, len(pending))
                         if pending else None)
                    start = before.newest if c is None else max(
                        c, committed)
                    r = await self.c.step(s, list(range(
                        start + 1, start + 1 + rng.randint(1, 3))),
                        tentative=True, commit=c)
                elif op == "commit":
                    r = await self.c.commit(s, committed + rng.randint(
                        0, len(pending) + 1))
                elif op == "truncate":
                    r = await self.c.truncate(s, rng.randint(
                        1, before.newest + 2))
                elif not pending:
                    r = await self.c.evict(s, rng.randint(2, 5))
                else:
                    continue
            except EvictdError as e:
                self.fail("op %d %s refused: %r" % (i, op, e))
            after = await self.c.get(s)
            if getattr(r, "replayed", False):  # a commit or truncate again
                self.assertEqual(after, before)
                replays += 1
                continue
            kinds.add(type(r).__name__)
            want_pages = sorted({p // B for p in after.kept})
            self.assertEqual(after.pages, want_pages)
            self.assertEqual(r.pages_new,
                             sorted(set(after.pages) - set(before.pages)))
            self.assertEqual(r.pages_freed,
                             sorted(set(before.pages) - set(after.pages)))
            # Transient: pages of the positions the request added that
            # were held neither before nor after it (only a step adds).
            added = set(r.positions) if isinstance(r, StepResult) else set()
            self.assertEqual(r.pages_transient, sorted(
                {p // B for p in added} - set(before.pages) -
                set(after.pages)))
            transients += bool(r.pages_transient)
            gone = sorted(set(before.kept) - set(after.kept))
            if isinstance(r, StepResult):
                self.assertEqual(sorted(set(r.freed) - set(r.positions)),
                                 gone)
            elif isinstance(r, CommitResult):
                self.assertEqual(sorted(r.victims + r.dropped), gone)
            elif isinstance(r, TruncateResult):
                self.assertEqual(r.removed, gone)
            else:
                self.assertEqual(r.victims, gone)
            self.assertEqual((r.size, after.size), (len(after.kept),) * 2)
            before = after
        self.assertEqual(kinds, {"StepResult", "CommitResult",
                                 "TruncateResult", "EvictResult"})
        self.assertGreater(replays, 0)
        self.assertGreater(transients, 0)

    async def test_pages_transient_issue_example(self) -> None:
        """Budget 3, page size 2, positions 1..7 stepped on a new session
        (the step creates it): pages 0 and 1 are written and emptied by the
        request, so they are transient, neither new nor freed. The same as
        a batch item, resent (replayed, same lists), on a session created
        first (page 0 was held: freed), and an evict (never transient)."""
        s = self.sid()
        r = await self.c.step(s, list(range(1, 8)), budget=3, page_size=2)
        self.assertEqual((r.victims, r.size, r.newest),
                         ([0, 1, 2, 3, 4], 3, 7))
        self.assertEqual((r.pages_new, r.pages_freed, r.pages_transient),
                         ([2, 3], [], [0, 1]))
        again = await self.c.step(s, list(range(1, 8)), budget=3,
                                  page_size=2)
        self.assertTrue(again.replayed)
        self.assertEqual(dataclasses.replace(again, replayed=False), r)
        self.assertEqual((await self.c.get(s)).pages, [2, 3])
        b = (await self.c.batch(StepBatch().add(
            self.sid("b"), list(range(1, 8)), budget=3, page_size=2)))[0]
        self.assertIsInstance(b, StepResult)
        self.assertEqual((b.pages_new, b.pages_freed, b.pages_transient),
                         ([2, 3], [], [0, 1]))
        c = self.sid("c")
        await self.c.create(c, budget=3, page_size=2)
        r = await self.c.step(c, list(range(1, 8)))
        self.assertEqual((r.pages_new, r.pages_freed, r.pages_transient),
                         ([2, 3], [0], [1]))
        e = await self.c.evict(c, 1)
        self.assertEqual((e.victims, e.pages_new, e.pages_freed,
                          e.pages_transient), ([5, 6], [], [2], []))

    async def test_no_pages_fields_without_a_page_size(self) -> None:
        s = self.sid()
        await self.c.create(s, budget=2)
        _, raw = await self.c.request("POST", "/session/%s/step" % s,
                                      {"positions": [1, 2, 3]})
        self.assertEqual(list(raw), ["victims", "slots", "size", "newest"])
        r = await self.c.step(s, 4)
        self.assertEqual((r.pages_new, r.pages_freed, r.pages_transient,
                          r.dropped), ([], [], [], []))
        self.assertEqual((await self.c.get(s)).pages, [])

    # -- the new errors --

    async def test_new_errors_map_to_their_classes(self) -> None:
        s = self.sid()
        for bad in (0, 65537, -1):
            await self.assertApiError(ec.InvalidLookahead, 400,
                                      self.c.create(s, lookahead=bad))
            await self.assertApiError(ec.InvalidLookahead, 400,
                                      self.c.step(s, 1, lookahead=bad))
        for bad in (-1, 65537):
            await self.assertApiError(ec.InvalidPageSize, 400,
                                      self.c.create(s, page_size=bad))
        for kw in ({"lookahead": "2"}, {"page_size": 1.5},
                   {"lookahead": True}):
            await self.assertApiError(ec.InvalidField, 400,
                                      self.c.create(s, **kw))
        await self.assertApiError(ec.InvalidField, 400,
                                  self.c.step(s, 1, tentative="yes"))
        await self.assertApiError(ec.InvalidPosition, 400,
                                  self.c.step(s, 1, commit="x"))
        await self.assertApiError(ec.UnknownSession, 404, self.c.get(s))
        with self.assertRaises(ValueError):  # neither positions nor commit
            await self.c.step(s, tentative=True)
        # The errors of batch items map alike.
        await self.c.create(s, budget=2, lookahead=1)
        await self.c.step(s, 1, tentative=True)
        out = await self.c.batch([ec.step_item(s, 2)])
        self.assertIs(type(out[0]), ec.TentativePending)
        self.assertEqual(out[0].status, 409)
        out = await self.c.batch([ec.step_item(s, 2, tentative=True)])
        self.assertIs(type(out[0]), ec.TooManyPositions)

    # -- the speculative loop --

    async def test_speculative_decoding_through_batches(self) -> None:
        budget, sinks, K, n = 8, 2, 4, 6
        rng = random.Random(5)
        ids = [self.sid(str(i)) for i in range(n)]
        track: List[Slots] = []
        for sid in ids:
            v = await self.c.create(sid, budget=budget, sinks=sinks,
                                    lookahead=K)
            track.append(Slots(self, v))
        committed = [0] * n
        drafts: List[List[int]] = [[] for _ in ids]
        batch = StepBatch()
        accepted_total = dropped_total = 0
        for it in range(40):
            batch.clear()
            commits: List[Optional[int]] = []
            for i, sid in enumerate(ids):
                if it == 0:  # the prompt, in sub-steps of K
                    batch.add(sid, list(range(1, 11 + i)))
                    commits.append(None)
                    continue
                # At least one accepted (the target's own token, sent
                # first), so that no iteration repeats the previous one.
                c = None
                if drafts[i]:
                    c = committed[i] + rng.randint(1, len(drafts[i]))
                    batch.add(sid, commit=c)
                base = committed[i] if c is None else c
                batch.add(sid, positions=range(base + 1, base + 1 + K),
                          tentative=True)
                commits.append(c)
            out = batch.results_by_session(await self.c.batch(batch))
            for i, sid in enumerate(ids):
                r = out[sid]
                self.assertIsInstance(r, StepResult, r)
                self.assertFalse(r.replayed)
                c = commits[i]
                self.assertEqual(r.commit, c)
                old_window = window(committed[i], budget, sinks)
                if c is not None:
                    self.assertEqual(r.dropped,
                                     [d for d in drafts[i] if d > c])
                    accepted = [d for d in drafts[i] if d <= c]
                    accepted_total += len(accepted)
                    dropped_total += len(r.dropped)
                    committed[i] = c
                elif it == 0:
                    accepted = list(range(1, 11 + i))
                    committed[i] = accepted[-1]
                else:
                    accepted = []
                new_window = window(committed[i], budget, sinks)
                self.assertEqual(r.victims, sorted(
                    set(old_window + accepted) - set(new_window)))
                track[i].step(r)
                if it:
                    self.assertTrue(r.tentative)
                    drafts[i] = list(r.positions)
                    self.assertEqual(r.size, len(new_window) + K)
                    self.assertEqual(r.newest, drafts[i][-1])
            for i in (0, n - 1):
                v = await self.c.get(ids[i])
                track[i].matches(v)
                self.assertEqual(v.tentative, drafts[i])
                self.assertEqual(v.kept, window(committed[i], budget, sinks)
                                 + drafts[i])
        self.assertGreater(accepted_total, 0)
        self.assertGreater(dropped_total, 0)
        # The last drafts: commit-only items accept all of them.
        batch.clear()
        for i, sid in enumerate(ids):
            batch.add(sid, commit=drafts[i][-1])
        out = await self.c.batch(batch)
        for i, (sid, r) in enumerate(zip(ids, out)):
            self.assertEqual((r.dropped, r.slots, r.positions, r.newest),
                             ([], [], [], drafts[i][-1]))
            track[i].step(r)
            v = await self.c.get(sid)
            track[i].matches(v)
            self.assertEqual(v.kept, window(drafts[i][-1], budget, sinks))

    async def test_a_repeated_redraft_is_answered_as_a_replay(self) -> None:
        # Rejecting every draft and drafting the same positions again sends
        # the request sent last time: the daemon takes it for a retry and
        # answers the earlier answer, changing nothing (the session already
        # holds those drafts, in those slots).
        s = self.sid()
        await self.c.create(s, budget=4, lookahead=2)
        await self.c.step(s, [1, 2, 3, 4, 5])
        await self.c.step(s, [6, 7], tentative=True)
        first = await self.c.step(s, [6, 7], tentative=True, commit=5)
        self.assertEqual((first.dropped, first.replayed), ([6, 7], False))
        v = await self.c.get(s)
        again = await self.c.step(s, [6, 7], tentative=True, commit=5)
        self.assertTrue(again.replayed)
        self.assertEqual(again.slots, first.slots)
        self.assertEqual(await self.c.get(s), v)


    # -- adopt and expect_newest (issue 26) --

    async def test_adopt_creates_resends_refuses_and_replaces(self) -> None:
        s = self.sid()
        v = await self.c.adopt(s, [0, 5, 9, 10], 12, budget=4, sinks=1)
        self.assertEqual(v, ec.SessionView(s, 4, 1, 4, 12, [0, 5, 9, 10],
                                           [0, 1, 2, 3], True))
        again = await self.c.adopt(s, [0, 5, 9, 10], 12, budget=4, sinks=1,
                                   slots=[0, 1, 2, 3])
        self.assertEqual(again, dataclasses.replace(v, created=False))
        await self.assertApiError(ec.SessionExists, 409, self.c.adopt(
            s, [0, 5, 9, 11], 12, budget=4, sinks=1))
        r = await self.c.step(s, 13, expect_newest=12)
        self.assertEqual((r.victims, r.slots, r.newest), ([5], [4], 13))
        # Replaced: its replay record goes with it (the resent step is
        # stale now, not a replay).
        v = await self.c.adopt(s, [2, 3, 4, 20], 20, budget=6, page_size=4,
                               slots=[2, 3, 4, 5], pages=[0, 1, 5],
                               replace=True)
        self.assertEqual((v.created, v.kept, v.slots, v.pages),
                         (False, [2, 3, 4, 20], [2, 3, 4, 5], [0, 1, 5]))
        e = await self.assertApiError(ec.StalePosition, 409,
                                      self.c.step(s, 13))
        self.assertEqual(e.newest, 20)

    async def test_adopt_refuses_states_naming_the_rule(self) -> None:
        s = self.sid()
        for kept, newest, kw, says in (
                ([0, 5, 5], 5, {}, "repeats"),
                ([0, 5, 3], 5, {}, "below kept[1]"),
                ([0, 1, 2], 2, {"budget": 2}, "budget of 2"),
                ([1, 2], 2, {"sinks": 1}, "Position 0"),
                ([0, 5], 4, {}, "below kept[1]"),
                ([0, 1, 2], 2, {"slots": [3, 4, 5]}, "round the ring"),
                ([0, 5], 5, {"page_size": 4, "pages": [0, 2]}, "pages")):
            e = await self.assertApiError(ec.InvalidState, 400, self.c.adopt(
                s, kept, newest, **kw))
            self.assertIn(says, e.message)
        await self.assertApiError(ec.UnknownSession, 404, self.c.get(s))

    async def test_expect_newest_on_every_change(self) -> None:
        s, child = self.sid(), self.sid("child")
        await self.c.create(s, budget=4, lookahead=2)
        await self.c.step(s, [1, 2, 9], expect_newest=0)
        view = await self.c.get(s)
        for call in (self.c.step(s, 10, expect_newest=5),
                     self.c.step(s, [10, 11], tentative=True,
                                 expect_newest=5),
                     self.c.commit(s, 9, expect_newest=5),
                     self.c.truncate(s, 3, expect_newest=5),
                     self.c.evict(s, 2, expect_newest=5),
                     self.c.fork(s, child, expect_newest=5)):
            e = await self.assertApiError(ec.Diverged, 409, call)
            self.assertEqual((e.newest, e.view), (9, view))
        self.assertEqual(await self.c.get(s), view)
        await self.assertApiError(ec.UnknownSession, 404, self.c.get(child))
        # Expected right, each applies; a resend (the same request, its
        # expectation stale now) is answered from the record.
        r = await self.c.step(s, 10, expect_newest=9)
        again = await self.c.step(s, 10, expect_newest=9)
        self.assertEqual((r.newest, again.replayed), (10, True))
        self.assertTrue((await self.c.fork(s, child, expect_newest=10)
                         ).created)
        await self.c.evict(s, 3, expect_newest=10)
        await self.c.step(s, [11, 12], tentative=True, expect_newest=10)
        self.assertEqual((await self.c.commit(s, 11, expect_newest=12)
                          ).newest, 11)
        self.assertEqual((await self.c.truncate(s, 11, expect_newest=11)
                          ).newest, 10)
        # A missing session expected past 0 is not made; at 0 it is.
        await self.assertApiError(ec.UnknownSession, 404, self.c.step(
            self.sid("n"), 5, expect_newest=4))
        await self.assertApiError(ec.UnknownSession, 404,
                                  self.c.get(self.sid("n")))
        self.assertEqual((await self.c.step(self.sid("n"), 1,
                                            expect_newest=0)).newest, 1)
        # In a batch, the diverged item alone fails.
        b = StepBatch().add(s, 11, expect_newest=3).add(self.sid("n"), 2,
                                                        expect_newest=1)
        out = await self.c.batch(b)
        self.assertIs(type(out[0]), ec.Diverged)
        self.assertEqual((out[0].status, out[0].newest, out[0].view.newest),
                         (409, 10, 10))
        self.assertEqual(out[1].newest, 2)
        with self.assertRaises(ValueError):
            StepBatch().add(s, 11, expect_newest=3).add(s, 12,
                                                        expect_newest=4)

    async def test_rehome_as_the_client_docs_say(self) -> None:
        # The engine's own copy of a session on one instance; a second
        # instance that lost it (a restart without state), then one that
        # holds an old copy: each refuses the step expecting the engine's
        # newest, the recipe adopts what the engine holds and resends, and
        # the answer is the one the first instance gives.
        s = self.sid()
        lost = start()
        home, away = self.c, self.make_client(lost.url)
        await home.create(s, budget=4, sinks=1)
        for p in (1, 2, 3, 7, 8):
            await home.step(s, p)
        held = await home.get(s)
        await away.adopt(s, [0, 1], 1, budget=4, sinks=1)  # an old copy
        for where, err in ((self.make_client(start().url), ec.UnknownSession),
                           (away, ec.Diverged)):
            try:
                await where.step(s, 9, expect_newest=held.newest)
                self.fail("a step expecting another window was applied")
            except (ec.UnknownSession, ec.Diverged) as e:
                self.assertIs(type(e), err)
                await where.adopt(s, held.kept, held.newest,
                                  slots=held.slots, budget=held.budget,
                                  sinks=held.sinks,
                                  replace=isinstance(e, ec.Diverged))
            r = await where.step(s, 9, expect_newest=held.newest)
            want = await home.step(s, 9, expect_newest=held.newest)
            self.assertEqual(dataclasses.replace(r, replayed=False),
                             dataclasses.replace(want, replayed=False))
            self.assertEqual(await where.get(s), await home.get(s))


class SyncEngineTest(Engine, unittest.IsolatedAsyncioTestCase):
    kind = "sync"

    def make_client(self, url: str, **kw: Any) -> Any:
        c = EvictdClient(url, timeout=10, **kw)
        self.addCleanup(c.close)
        return AsAsync(c)


class AsyncEngineTest(Engine, unittest.IsolatedAsyncioTestCase):
    kind = "aio"

    def make_client(self, url: str, **kw: Any) -> Any:
        c = AsyncEvictdClient(url, timeout=10, **kw)
        self.addAsyncCleanup(c.close)
        return c


class AsyncVectorsTest(unittest.IsolatedAsyncioTestCase):
    """Every proto/vectors/*.json and rehome/*.json through the asyncio
    client, with single steps and with batch items (test_evictd_client
    replays them through the blocking one)."""

    async def test_vectors(self) -> None:
        self.assertGreaterEqual(len(VECTORS), 20)
        async with AsyncEvictdClient(MAIN.url) as c:
            for path in VECTORS:
                for use_batch in (False, True):
                    with self.subTest(vector=os.path.basename(path),
                                      batch=use_batch):
                        vec = load_vector(path)
                        await replay_vector(
                            self, c, vec, use_batch, "avec-%s-%s"
                            % (vec["name"], "batch" if use_batch else "step"))
            self.assertEqual(c.connections_opened, 1)


if __name__ == "__main__":
    unittest.main()
