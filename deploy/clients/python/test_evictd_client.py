"""Tests of the Python client against the real daemon (EVICTD_BIN, else
../../../build/evictd from this file), started on ephemeral ports and unix
sockets and stopped again by the fixtures. Standard library only. From the
repository, `make B=build/x test-python`; from this directory,
`EVICTD_BIN=/abs/path/evictd python3 -m unittest -v test_evictd_client`.
"""

import asyncio
import dataclasses
import glob
import http.client
import http.server
import io
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.parse
from typing import Any, Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import evictd_client as ec  # noqa: E402
from evictd_client import (  # noqa: E402
    EvictdClient, EvictdError, StepBatch, StepResult, group_steps)
import example_frontend  # noqa: E402

REPO = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
VECTORS = sorted(glob.glob(os.path.join(REPO, "proto", "vectors", "*.json")))
# Adopt and expect_newest (issue 26), in their own folder.
VECTORS += sorted(glob.glob(os.path.join(REPO, "proto", "vectors", "rehome",
                                         "*.json")))
LISTENING = re.compile(r"listening on (\S+)")


def daemon_bin() -> str:
    return os.environ.get("EVICTD_BIN") or os.path.join(REPO, "build",
                                                        "evictd")


class Daemon:
    """One evictd process: started with the given flags, its address read
    from its log, stopped with SIGTERM (SIGKILL if it hangs)."""

    def __init__(self, tmpdir: str, *args: str,
                 listen: str = "127.0.0.1:0") -> None:
        binary = daemon_bin()
        if not os.access(binary, os.X_OK):
            raise RuntimeError("no daemon at %s (set EVICTD_BIN or build it)"
                               % binary)
        self.log_path = tempfile.mktemp(prefix="evictd-", suffix=".log",
                                        dir=tmpdir)
        # The daemon must see only our flags, not the caller's EVICTD_*.
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("EVICTD_")}
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [binary, "--listen", listen] + list(args), env=env,
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=log)
        try:
            self.addr = self._wait_listening()
        except BaseException:
            self.stop()
            raise
        self.url = (self.addr if self.addr.startswith("unix:")
                    else "http://" + self.addr)

    def log(self) -> str:
        with open(self.log_path, encoding="utf-8", errors="replace") as f:
            return f.read()

    def _wait_listening(self) -> str:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            m = LISTENING.search(self.log())
            if m:
                return m.group(1)
            if self.proc.poll() is not None:
                break
            time.sleep(0.02)
        raise RuntimeError("evictd did not start (exit %s); log:\n%s"
                           % (self.proc.poll(), self.log()))

    def stop(self) -> Optional[int]:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def start_daemon(*args: str, listen: str = "127.0.0.1:0") -> Daemon:
    """Starts a daemon that is stopped when the module's tests end."""
    d = Daemon(TMP.name, *args, listen=listen)
    unittest.addModuleCleanup(d.stop)
    return d


TMP: Any = None
MAIN: Any = None  # a daemon on its defaults, shared by most tests


def setUpModule() -> None:
    global TMP, MAIN
    TMP = tempfile.TemporaryDirectory(prefix="evictd-pyclient-")
    unittest.addModuleCleanup(TMP.cleanup)
    MAIN = start_daemon()


class Case(unittest.TestCase):
    """A test with a client of the main daemon and unique session ids."""

    def setUp(self) -> None:
        self.client = EvictdClient(MAIN.url, timeout=10)
        self.addCleanup(self.client.close)

    def sid(self, name: str = "s") -> str:
        return "%s.%s" % (self._testMethodName[:100], name)

    def assertApiError(self, cls: type, status: int, fn: Any, *args: Any,
                       **kw: Any) -> EvictdError:
        with self.assertRaises(cls) as cm:
            fn(*args, **kw)
        e = cm.exception
        self.assertIs(type(e), cls)
        self.assertEqual(e.status, status)
        self.assertEqual(e.code, cls.code)
        self.assertTrue(e.message)
        return e


# ---- every method -----------------------------------------------------------


class MethodsTest(Case):

    def test_health(self) -> None:
        self.assertEqual(self.client.health(), {"status": "ok"})

    def test_create_new_identical_and_defaults(self) -> None:
        v = self.client.create(self.sid("a"), budget=8, sinks=2)
        self.assertEqual(v, ec.SessionView(self.sid("a"), 8, 2, 1, 0, [0],
                                           [0], created=True))
        again = self.client.create(self.sid("a"), budget=8, sinks=2)
        self.assertFalse(again.created)
        self.assertEqual((again.budget, again.sinks), (8, 2))
        d = self.client.create(self.sid("d"))
        self.assertEqual((d.budget, d.sinks, d.kept, d.slots),
                         (512, 0, [0], [0]))

    def test_step_one_position_and_many(self) -> None:
        s = self.sid()
        self.client.create(s, budget=3)
        r = self.client.step(s, 1)
        self.assertEqual(r, StepResult([], [1], 2, 1, False, [1]))
        r = self.client.step(s, [2, 3, 4])
        self.assertEqual((r.victims, r.slots, r.size, r.newest, r.replayed),
                         ([0, 1], [2, 3, 0], 3, 4, False))
        self.assertEqual(r.placements, [(2, 2), (3, 3), (4, 0)])
        r = self.client.step(s, positions=(7,), attention={"scores": [0.5]})
        self.assertEqual((r.victims, r.slots, r.newest), ([2], [1], 7))

    def test_step_autocreates_with_budget_and_sinks(self) -> None:
        s = self.sid()
        r = self.client.step(s, [1, 2, 3], budget=2, sinks=1)
        self.assertEqual((r.victims, r.size, r.newest), ([1, 2], 2, 3))
        v = self.client.get(s)
        self.assertEqual((v.budget, v.sinks, v.kept), (2, 1, [0, 3]))

    def test_step_needs_exactly_one_of_pos_and_positions(self) -> None:
        with self.assertRaises(ValueError):
            self.client.step(self.sid(), 1, positions=[2])
        with self.assertRaises(ValueError):
            self.client.step(self.sid())

    def test_evict_to_own_budget_and_smaller(self) -> None:
        s = self.sid()
        self.client.create(s, budget=4, sinks=1)
        self.client.step(s, [1, 2, 3])
        self.assertEqual(self.client.evict(s), ec.EvictResult([], 4))
        self.assertEqual(self.client.evict(s, 2), ec.EvictResult([1, 2], 2))
        self.assertEqual(self.client.get(s).kept, [0, 3])

    def test_get_shows_kept_positions_and_slots(self) -> None:
        s = self.sid()
        self.client.create(s, budget=2)
        self.client.step(s, [5, 9])
        v = self.client.get(s)
        self.assertEqual((v.id, v.size, v.newest, v.kept, v.slots,
                          v.created), (s, 2, 9, [5, 9], [1, 2], False))

    def test_delete_then_missing(self) -> None:
        s = self.sid()
        self.client.create(s)
        self.assertTrue(self.client.delete(s))
        self.assertApiError(ec.UnknownSession, 404, self.client.get, s)
        self.assertApiError(ec.UnknownSession, 404, self.client.delete, s)
        self.assertFalse(self.client.delete(s, missing_ok=True))

    def test_exact_retry_of_last_step_is_replayed(self) -> None:
        s = self.sid()
        self.client.create(s, budget=2)
        first = self.client.step(s, [1, 2, 3])
        again = self.client.step(s, [1, 2, 3])
        self.assertFalse(first.replayed)
        self.assertTrue(again.replayed)
        self.assertEqual((again.victims, again.slots, again.size,
                          again.newest),
                         (first.victims, first.slots, first.size,
                          first.newest))
        # Even after an evict, the answer is the original one.
        self.client.evict(s, 1)
        late = self.client.step(s, [1, 2, 3])
        self.assertTrue(late.replayed)
        self.assertEqual(late.size, first.size)
        self.assertEqual(self.client.get(s).kept, [3])
        # Anything else at or below the newest position is stale.
        e = self.assertApiError(ec.StalePosition, 409, self.client.step, s,
                                [2, 3])
        self.assertEqual(e.newest, 3)

    def test_keep_alive_uses_one_connection(self) -> None:
        for i in range(1, 50):
            self.client.step(self.sid(), i)
        self.assertEqual(self.client.connections_opened, 1)
        self.assertEqual(self.client.retries, 0)

    def test_close_then_reuse_and_context_manager(self) -> None:
        with EvictdClient(MAIN.url) as c:
            c.health()
            c.close()
            c.health()
            self.assertEqual(c.connections_opened, 2)

    def test_address_forms(self) -> None:
        bare = MAIN.addr  # host:port without a scheme
        with EvictdClient(bare) as c:
            self.assertEqual(c.health(), {"status": "ok"})
        for bad in ("ftp://x", "unix:", "gopher://127.0.0.1:1"):
            with self.assertRaises(ValueError):
                EvictdClient(bad)
        # https is an address (tests/tls speaks it); TLS options need it.
        EvictdClient("https://127.0.0.1:1").close()
        with self.assertRaises(ValueError):
            EvictdClient("http://127.0.0.1:1", cafile="/nonexistent")

    def test_session_ids_are_escaped_not_rerouted(self) -> None:
        for bad in ("a/b", "a b", "é", "x" * 129, "a%2Fb"):
            self.assertApiError(ec.InvalidSessionId, 400, self.client.get,
                                bad)
        # An empty id leaves "/session/", which is no route at all.
        self.assertApiError(ec.NotFound, 404, self.client.get, "")
        with self.assertRaises(TypeError):
            self.client.get(7)  # type: ignore[arg-type]
        ok = "A-z0.9_~" + "x" * 120
        self.assertEqual(self.client.create(ok).id, ok)
        self.client.delete(ok)

    def test_metrics_text(self) -> None:
        self.client.step(self.sid(), 1)
        text = self.client.metrics()
        self.assertRegex(text, r"(?m)^# TYPE \S+ (counter|gauge|histogram)")

    def test_raw_request(self) -> None:
        self.assertEqual(self.client.request("GET", "/healthz"),
                         (200, {"status": "ok"}))
        self.client.create(self.sid())
        self.assertEqual(self.client.request(
            "DELETE", "/session/" + self.sid()), (204, None))


# ---- every mapped error -----------------------------------------------------


class ErrorsTest(Case):

    @classmethod
    def setUpClass(cls) -> None:
        cls.limits = start_daemon("--max-positions", "4", "--max-batch", "3",
                                  "--max-sessions", "2", "--max-body", "1024",
                                  "--no-autocreate")

    def test_invalid_json(self) -> None:
        s = self.sid()
        for body in (b"{", b"[1]", b'{"pos":1,"pos":2}', b"null"):
            self.assertApiError(ec.InvalidJSON, 400, self.client.request,
                                "POST", "/session/%s/step" % s, body)
        deep: Any = 1
        for _ in range(40):
            deep = [deep]
        e = self.assertApiError(ec.InvalidJSON, 400, self.client.step, s, 1,
                                attention=deep)
        self.assertIn("deep", e.message)
        self.assertApiError(ec.UnknownSession, 404, self.client.get, s)

    def test_invalid_field(self) -> None:
        s = self.sid()
        self.assertApiError(ec.InvalidField, 400, self.client.create, s,
                            budget="512")
        self.assertApiError(ec.InvalidField, 400, self.client.create, s,
                            budget=512.5)
        self.assertApiError(ec.InvalidField, 400, self.client.request, "PUT",
                            "/session/" + s, {"budjet": 4})
        self.assertApiError(ec.InvalidField, 400, self.client.step, s, 1,
                            sinks="0")
        self.assertApiError(ec.InvalidField, 400, self.client.request, "POST",
                            "/step", {"items": []})

    def test_invalid_session_id(self) -> None:
        self.assertApiError(ec.InvalidSessionId, 400, self.client.create,
                            "no spaces")
        self.assertApiError(ec.InvalidSessionId, 400, self.client.step,
                            "x" * 129, 1)

    def test_invalid_budget(self) -> None:
        s = self.sid()
        self.assertApiError(ec.InvalidBudget, 400, self.client.create, s,
                            budget=0)
        self.assertApiError(ec.InvalidBudget, 400, self.client.create, s,
                            budget=1048577)
        self.client.create(s, budget=4, sinks=2)
        self.assertApiError(ec.InvalidBudget, 400, self.client.evict, s, 0)
        self.assertApiError(ec.InvalidBudget, 400, self.client.evict, s, 2)

    def test_invalid_sinks(self) -> None:
        self.assertApiError(ec.InvalidSinks, 400, self.client.create,
                            self.sid(), budget=4, sinks=4)
        self.assertApiError(ec.InvalidSinks, 400, self.client.create,
                            self.sid(), budget=4, sinks=-1)
        self.assertApiError(ec.InvalidSinks, 400, self.client.step,
                            self.sid(), 1, budget=2, sinks=3)

    def test_invalid_position(self) -> None:
        s = self.sid()
        for bad in (-1, 2 ** 32, 1.5, "1", True):
            self.assertApiError(ec.InvalidPosition, 400, self.client.step, s,
                                bad)
        for bad in ([], [3, 3], [4, 2], [1, None]):
            self.assertApiError(ec.InvalidPosition, 400, self.client.step, s,
                                positions=bad)
        self.assertApiError(ec.UnknownSession, 404, self.client.get, s)

    def test_too_many_positions(self) -> None:
        c = EvictdClient(self.limits.url)
        self.addCleanup(c.close)
        c.create(self.sid())
        self.addCleanup(c.delete, self.sid(), True)
        self.assertApiError(ec.TooManyPositions, 400, c.step, self.sid(),
                            [1, 2, 3, 4, 5])
        self.assertEqual(c.step(self.sid(), [1, 2, 3, 4]).newest, 4)

    def test_too_many_steps(self) -> None:
        c = EvictdClient(self.limits.url)
        self.addCleanup(c.close)
        self.assertApiError(ec.TooManySteps, 400, c.batch,
                            [{"session": "x%d" % i, "pos": 1}
                             for i in range(4)])

    def test_unknown_session(self) -> None:
        s = self.sid()
        self.assertApiError(ec.UnknownSession, 404, self.client.get, s)
        self.assertApiError(ec.UnknownSession, 404, self.client.delete, s)
        self.assertApiError(ec.UnknownSession, 404, self.client.evict, s)
        c = EvictdClient(self.limits.url)  # --no-autocreate
        self.addCleanup(c.close)
        self.assertApiError(ec.UnknownSession, 404, c.step, s, 1)

    def test_not_found(self) -> None:
        self.assertApiError(ec.NotFound, 404, self.client.request, "GET",
                            "/nowhere")
        self.assertApiError(ec.NotFound, 404, self.client.request, "POST",
                            "/session/a/stepx", {"pos": 1})

    def test_method_not_allowed_carries_allow(self) -> None:
        e = self.assertApiError(ec.MethodNotAllowed, 405, self.client.request,
                                "POST", "/healthz", {})
        self.assertEqual(e.allow, "GET, HEAD")
        e = self.assertApiError(ec.MethodNotAllowed, 405, self.client.request,
                                "GET", "/session/a/step")
        self.assertEqual(e.allow, "POST")

    def test_diverged_carries_newest_and_view(self) -> None:
        s = self.sid()
        self.client.step(s, [1, 2])
        e = self.assertApiError(ec.Diverged, 409, self.client.step, s, 3,
                                expect_newest=1)
        self.assertEqual((e.newest, e.view), (2, self.client.get(s)))
        self.assertIsInstance(e, EvictdError)
        # Built from a body alone too, as a batch item's error is.
        e = ec.error_from_body(None, {"error": {
            "code": "diverged", "message": "m", "status": 409, "newest": 4,
            "view": {"id": "x", "budget": 2, "sinks": 0, "size": 1,
                     "newest": 4, "kept": [4], "slots": [1]}}})
        self.assertEqual((type(e), e.status, e.newest, e.view.kept),
                         (ec.Diverged, 409, 4, [4]))
        self.assertIsNone(ec.Diverged("m").view)

    def test_invalid_state(self) -> None:
        e = self.assertApiError(ec.InvalidState, 400, self.client.adopt,
                                self.sid(), [0, 3, 2], 3)
        self.assertIn("strictly increase", e.message)

    def test_session_exists(self) -> None:
        s = self.sid()
        self.client.create(s, budget=8)
        self.assertApiError(ec.SessionExists, 409, self.client.create, s,
                            budget=9)
        self.assertApiError(ec.SessionExists, 409, self.client.create, s,
                            budget=8, sinks=1)

    def test_stale_position_carries_newest(self) -> None:
        s = self.sid()
        self.client.step(s, [1, 2, 3])
        self.client.step(s, 4)
        # [4] again would be a retry of the last step, answered as such.
        for p in (3, 0, [4, 5], [2, 9]):
            e = self.assertApiError(ec.StalePosition, 409, self.client.step,
                                    s, p)
            self.assertEqual(e.newest, 4)
        e = self.assertApiError(ec.StalePosition, 409, self.client.step,
                                self.sid("new"), 0)
        self.assertEqual(e.newest, 0)

    def test_body_too_large(self) -> None:
        c = EvictdClient(self.limits.url)
        self.addCleanup(c.close)
        c.create(self.sid())
        self.addCleanup(c.delete, self.sid(), True)
        self.assertApiError(ec.BodyTooLarge, 413, c.step, self.sid(), 1,
                            attention="x" * 2000)
        self.assertEqual(c.get(self.sid()).newest, 0)
        # Larger than the socket buffers: the daemon answers before reading
        # it all and the client must still report 413, not a broken pipe.
        self.assertApiError(ec.BodyTooLarge, 413, self.client.step,
                            self.sid(), 1, attention="y" * (16 << 20))
        self.assertEqual(self.client.health(), {"status": "ok"})

    def test_session_limit(self) -> None:
        c = EvictdClient(self.limits.url)
        self.addCleanup(c.close)
        for n in ("1", "2"):
            c.create(self.sid(n))
            self.addCleanup(c.delete, self.sid(n), True)
        self.assertApiError(ec.SessionLimit, 503, c.create, self.sid("3"))
        self.assertApiError(ec.SessionLimit, 503, c.fork, self.sid("1"),
                            self.sid("3"))
        # Into itself: refused as such, not as a session beyond the limit.
        self.assertApiError(ec.InvalidField, 400, c.fork, self.sid("1"),
                            self.sid("1"))

    def test_unauthorized(self) -> None:
        path = os.path.join(TMP.name, "daemon-token")
        with open(path, "w") as f:
            f.write("0123456789abcdef-token\n")
        d = start_daemon("--token-file", path)
        for kw in ({}, {"token": "0123456789abcdef-wrong"}):
            with EvictdClient(d.url, **kw) as c:
                self.assertEqual(c.health(), {"status": "ok"})
                e = self.assertApiError(ec.Unauthorized, 401, c.get, "a")
                self.assertEqual(e.www_authenticate, 'Bearer realm="evictd"')
                self.assertApiError(ec.Unauthorized, 401, c.step, "a", 1)
                self.assertApiError(ec.Unauthorized, 401, c.request, "GET",
                                    "/nowhere")
        with EvictdClient(d.url, token_file=path) as c:
            self.assertEqual(c.step("a", 1).newest, 1)
            self.assertIn("evictd", c.metrics())

    def test_codes_the_daemon_cannot_produce_here_map_too(self) -> None:
        # The 503s and internal need an allocation failure, a shutdown or a
        # bug.
        for code, cls in ec._ERRORS.items():
            e = ec.error_from_body(418, {"error": {"code": code,
                                                   "message": "m."}})
            self.assertIs(type(e), cls)
            self.assertEqual((e.status, e.code, e.message), (418, code, "m."))
        for code, cls, status in (("unauthorized", ec.Unauthorized, 401),
                                  ("out_of_memory", ec.OutOfMemory, 503),
                                  ("journal_failed", ec.JournalFailed, 503)):
            e = ec.error_from_body(status, {"error": {"code": code,
                                                      "message": "x"}})
            self.assertIsInstance(e, EvictdError)
            self.assertIs(type(e), cls)
        for code, cls, status in (
                ("invalid_lookahead", ec.InvalidLookahead, 400),
                ("invalid_page_size", ec.InvalidPageSize, 400),
                ("tentative_pending", ec.TentativePending, 409)):
            e = ec.error_from_body(None, {"error": {
                "code": code, "message": "x", "status": status}})
            self.assertIs(type(e), cls)
            self.assertEqual((e.status, e.code), (status, code))
            self.assertIn(cls.__name__, ec.__all__)
        odd = ec.error_from_body(400, {"error": {"code": "brand_new",
                                                 "message": "later"}})
        self.assertIs(type(odd), EvictdError)
        self.assertEqual((odd.code, odd.status), ("brand_new", 400))
        self.assertIsInstance(ec.error_from_body(502, "<html>"),
                              ec.ProtocolError)
        item = ec.error_from_body(None, {"error": {
            "code": "stale_position", "message": "m", "newest": 9,
            "status": 409}})
        self.assertEqual((item.status, item.newest), (409, 9))

    def test_a_rejected_step_changes_nothing(self) -> None:
        s = self.sid()
        self.client.create(s, budget=2)
        self.client.step(s, [1, 2])
        before = self.client.get(s)
        for bad in ([3, 3], [1], [5, 2**32]):
            with self.assertRaises(EvictdError):
                self.client.step(s, bad)
        self.assertEqual(self.client.get(s), before)


# ---- batch ------------------------------------------------------------------


class BatchTest(Case):

    def test_results_mix_successes_and_errors(self) -> None:
        a, b, c = self.sid("a"), self.sid("b"), self.sid("c")
        self.client.create(a, budget=2)
        self.client.step(a, 1)
        out = self.client.batch([
            {"session": a, "pos": 2},                       # ok
            {"session": b, "positions": [1, 2], "budget": 3},  # creates
            {"session": a, "pos": 2},                       # retry: replayed
            {"session": a, "pos": 1},                       # stale
            {"session": "bad id", "pos": 1},
            {"session": c, "positions": []},
            {"session": c, "pos": 1, "colour": "red"},
            {"session": a, "positions": [3, 4]},            # ok, evicts
            {"pos": 1},
            {"session": c, "pos": 1, "budget": 0},
        ])
        self.assertEqual(len(out), 10)
        self.assertEqual(out[0], StepResult([0], [2], 2, 2, False, [2]))
        self.assertEqual(out[1], StepResult([], [1, 2], 3, 2, False, [1, 2]))
        self.assertEqual(out[2], StepResult([0], [2], 2, 2, True, [2]))
        kinds = [(type(r), r.status) for r in out[3:7]]
        self.assertEqual(kinds, [(ec.StalePosition, 409),
                                 (ec.InvalidSessionId, 400),
                                 (ec.InvalidPosition, 400),
                                 (ec.InvalidField, 400)])
        self.assertEqual(out[3].newest, 2)
        self.assertEqual(out[7], StepResult([1, 2], [0, 1], 2, 4, False,
                                            [3, 4]))
        self.assertIsInstance(out[8], ec.InvalidField)
        self.assertIsInstance(out[9], ec.InvalidBudget)
        self.assertEqual(self.client.get(a).kept, [3, 4])
        self.assertEqual(self.client.get(b).budget, 3)
        self.assertApiError(ec.UnknownSession, 404, self.client.get, c)

    def test_empty_batch(self) -> None:
        self.assertEqual(self.client.batch([]), [])

    def test_step_batch_groups_items_per_session(self) -> None:
        a, b = self.sid("a"), self.sid("b")
        batch = StepBatch()
        batch.add(a, [1, 2], budget=2).add(b, 1).add(a, 3, budget=2)
        batch.add(b, positions=[2], attention=[0.1])
        self.assertEqual(len(batch), 2)
        self.assertEqual(batch.items(), [
            {"session": a, "positions": [1, 2, 3], "budget": 2},
            {"session": b, "positions": [1, 2], "attention": [0.1]}])
        results = batch.results_by_session(self.client.batch(batch))
        self.assertEqual(results[a].victims, [0, 1])
        self.assertEqual(results[a].placements, [(1, 1), (2, 2), (3, 0)])
        self.assertEqual(results[b].newest, 2)
        with self.assertRaises(ValueError):
            batch.add(a, 9, budget=3)
        with self.assertRaises(ValueError):
            batch.add(b, 9, attention=1)
        batch.clear()
        self.assertEqual(batch.items(), [])

    def test_group_steps(self) -> None:
        pairs = [("x", 1), ("y", 5), ("x", 2), ("z", 1), ("y", 6)]
        self.assertEqual(group_steps(pairs), [
            {"session": "x", "positions": [1, 2]},
            {"session": "y", "positions": [5, 6]},
            {"session": "z", "positions": [1]}])
        self.assertEqual(ec.step_item("q", 3, budget=4),
                         {"session": "q", "pos": 3, "budget": 4})

    def test_step_batch_with_drafts_commits_and_config(self) -> None:
        batch = StepBatch()
        batch.add("a", commit=4)                      # commit-only so far
        batch.add("a", [5, 6], tentative=True)
        batch.add("a", 7, tentative=True, commit=4)   # the same commit
        batch.add("b", [1, 2], lookahead=2, page_size=4)
        batch.add("b", 3, lookahead=2)
        batch.add("c", commit=9)
        self.assertEqual(batch.items(), [
            {"session": "a", "commit": 4, "positions": [5, 6, 7],
             "tentative": True},
            {"session": "b", "positions": [1, 2, 3], "lookahead": 2,
             "page_size": 4},
            {"session": "c", "commit": 9}])
        for bad in (lambda: batch.add("a", 8),          # plain among drafts
                    lambda: batch.add("b", 4, tentative=True),
                    lambda: batch.add("a", 8, tentative=True, commit=5),
                    lambda: batch.add("b", 4, lookahead=3),
                    lambda: batch.add("b", 4, page_size=0),
                    lambda: batch.add("d"),
                    lambda: batch.add("d", tentative=True)):
            with self.assertRaises(ValueError):
                bad()
        self.assertEqual(len(batch), 3)
        self.assertEqual(batch.items()[0]["positions"], [5, 6, 7])
        # Commit first, drafts later: the item is the same.
        later = StepBatch().add("a", [5, 6], tentative=True).add(
            "a", 7, tentative=True).add("a", commit=4)
        self.assertEqual(later.items(), [
            {"session": "a", "positions": [5, 6, 7], "tentative": True,
             "commit": 4}])
        self.assertEqual(ec.step_item("q", commit=3),
                         {"session": "q", "commit": 3})
        self.assertEqual(ec.step_item("q", [1], tentative=True, commit=0,
                                      lookahead=4, page_size=16),
                         {"session": "q", "positions": [1],
                          "tentative": True, "commit": 0, "lookahead": 4,
                          "page_size": 16})
        with self.assertRaises(ValueError):
            ec.step_item("q")

    def test_requests_at_the_defaults_are_what_they_were(self) -> None:
        # No new field goes on the wire unless asked for.
        self.assertEqual(ec._step_call("s", 1, None, None, {}, False,
                                       None).body, {"pos": 1})
        self.assertEqual(ec._create_call("s", None, None, None, None).body,
                         {})
        self.assertEqual(ec._create_call("s", 4, 1, None, None).body,
                         {"budget": 4, "sinks": 1})
        self.assertEqual(ec.step_item("s", [1, 2], budget=3),
                         {"session": "s", "positions": [1, 2], "budget": 3})
        call = ec._step_call("s", None, None, None, {}, False, 5)
        self.assertEqual((call.body, call.retry), ({"commit": 5}, True))
        self.assertEqual(ec._evict_call("s", None).retry, False)
        for c in (ec._commit_call("s", 1), ec._truncate_call("s", 1, None),
                  ec._fork_call("s", "t")):
            self.assertTrue(c.retry)

    def test_batch_outcomes_carry_what_was_asked(self) -> None:
        a, b = self.sid("a"), self.sid("b")
        self.client.create(a, budget=4, lookahead=2, page_size=2)
        batch = StepBatch().add(a, [1, 2, 3]).add(b, [1], page_size=1)
        out = batch.results_by_session(self.client.batch(batch))
        self.assertEqual(out[a], StepResult([], [1, 2, 3], 4, 3, False,
                                            [1, 2, 3], [], [1], []))
        self.assertEqual((out[b].pages_new, out[b].size), ([0, 1], 2))
        batch = StepBatch().add(a, [4, 5], tentative=True)
        r = self.client.batch(batch)[0]
        self.assertEqual((r.tentative, r.commit, r.victims, r.size),
                         (True, None, [], 6))
        r = self.client.batch(StepBatch().add(a, commit=4))[0]
        self.assertEqual(r, StepResult([0], [], 4, 4, False, [], [5], [], [],
                                       False, 4))


# ---- connections: reconnects, retries, unix sockets, timeouts ---------------


class DroppingProxy:
    """An HTTP proxy in front of a daemon that can drop answers: the daemon
    handles the request, then the proxy closes the client's connection
    without answering (a connection lost after the request was applied).
    It also records the headers of each request."""

    def __init__(self, upstream: str) -> None:
        u = urllib.parse.urlsplit(upstream)
        proxy = self
        self.drop = 0
        self.headers: List[Dict[str, str]] = []
        self.lock = threading.Lock()

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def forward(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else None
                with proxy.lock:
                    proxy.headers.append(dict(self.headers))
                up = http.client.HTTPConnection(u.hostname, u.port,
                                                timeout=10)
                try:
                    up.request(self.command, self.path, body,
                               {k: v for k, v in self.headers.items()
                                if k.lower() not in ("host", "connection")})
                    resp = up.getresponse()
                    data = resp.read()
                finally:
                    up.close()
                with proxy.lock:
                    drop = proxy.drop > 0
                    proxy.drop -= drop
                if drop:
                    self.close_connection = True
                    return
                self.send_response(resp.status, resp.reason)
                for k, v in resp.getheaders():
                    if k.lower() in ("content-type", "allow"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_PUT = do_POST = do_DELETE = forward

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                                      Handler)
        self.server.daemon_threads = True
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever,
                                       args=(0.05,),
                                       daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


class RetryThroughProxyTest(Case):
    """Answers lost after the daemon applied the request."""

    def setUp(self) -> None:
        super().setUp()
        self.proxy = DroppingProxy(MAIN.url)
        self.addCleanup(self.proxy.stop)
        self.pc = EvictdClient(self.proxy.url, token="s3cret")
        self.addCleanup(self.pc.close)
        self.pc.health()  # the next request reuses this connection

    def test_lost_step_answer_is_replayed_on_retry(self) -> None:
        s = self.sid()
        self.client.create(s, budget=3)
        self.client.step(s, [1, 2, 3])
        self.proxy.drop = 1
        r = self.pc.step(s, [4, 5])
        self.assertEqual(r, StepResult([1, 2], [0, 1], 3, 5, True, [4, 5]))
        self.assertEqual(self.pc.retries, 1)
        self.assertEqual(self.client.get(s).kept, [3, 4, 5])

    def test_lost_batch_answer_is_replayed_when_sessions_are_distinct(
            self) -> None:
        a, b = self.sid("a"), self.sid("b")
        self.proxy.drop = 1
        out = self.pc.batch([{"session": a, "positions": [1, 2]},
                             {"session": b, "pos": 1},
                             {"session": "bad id", "pos": 1}])
        self.assertEqual([getattr(r, "replayed", None) for r in out],
                         [True, True, None])
        self.assertIsInstance(out[2], ec.InvalidSessionId)
        self.assertEqual(self.client.get(a).kept, [0, 1, 2])

    def test_batch_naming_a_session_twice_is_not_retried(self) -> None:
        a = self.sid("a")
        self.proxy.drop = 1
        with self.assertRaises(ec.ConnectionFailed):
            self.pc.batch([{"session": a, "pos": 1},
                           {"session": a, "pos": 2}])
        self.assertEqual(self.pc.retries, 0)
        self.assertEqual(self.client.get(a).kept, [0, 1, 2])

    def test_lost_commit_truncate_and_fork_answers(self) -> None:
        s, child = self.sid(), self.sid("child")
        self.client.create(s, budget=3, lookahead=2)
        self.client.step(s, [1, 2, 3])
        self.client.step(s, [4, 5], tentative=True)
        self.proxy.drop = 1
        self.assertEqual(self.pc.commit(s, 4),
                         ec.CommitResult([1], [5], 3, 4, True))
        self.proxy.drop = 1
        self.assertEqual(self.pc.truncate(s, 4),
                         ec.TruncateResult([4], 2, 3, True))
        self.proxy.drop = 1
        v = self.pc.fork(s, child)
        self.assertEqual((v.created, v.kept, v.lookahead),
                         (False, [2, 3], 2))
        self.proxy.drop = 1
        r = self.pc.step(s, [4, 5], tentative=True, commit=3)
        self.assertEqual((r.replayed, r.dropped, r.slots, r.commit),
                         (True, [], r.slots, 3))
        self.assertEqual(self.pc.retries, 4)
        self.assertEqual(self.client.get(s).tentative, [4, 5])

    def test_lost_adopt_answer_finds_its_state_on_retry(self) -> None:
        s = self.sid()
        self.proxy.drop = 1
        v = self.pc.adopt(s, [0, 4, 5], 6, budget=4, sinks=1)
        self.assertEqual((v.created, v.kept, v.newest), (False, [0, 4, 5], 6))
        self.proxy.drop = 1
        v = self.pc.adopt(s, [0, 7], 7, budget=4, sinks=1, replace=True)
        self.assertEqual((v.created, v.kept), (False, [0, 7]))
        self.assertEqual(self.pc.retries, 2)
        self.assertEqual(self.client.get(s).kept, [0, 7])

    def test_lost_evict_answer_is_not_retried(self) -> None:
        s = self.sid()
        self.client.step(s, [1, 2, 3])
        self.proxy.drop = 1
        with self.assertRaises(ec.ConnectionFailed) as cm:
            self.pc.evict(s, 1)
        self.assertNotIsInstance(cm.exception, ec.RequestTimeout)
        self.assertEqual(self.pc.retries, 0)
        self.assertEqual(self.client.get(s).kept, [3])  # it did happen

    def test_lost_create_and_delete_answers(self) -> None:
        s = self.sid()
        self.proxy.drop = 1
        v = self.pc.create(s, budget=4)
        self.assertEqual((v.created, v.budget), (False, 4))  # the retry's view
        self.proxy.drop = 1
        self.assertFalse(self.pc.delete(s, missing_ok=True))
        self.assertEqual(self.pc.retries, 2)
        self.assertApiError(ec.UnknownSession, 404, self.client.get, s)

    def test_bearer_token_is_sent(self) -> None:
        self.assertEqual(self.proxy.headers[-1].get("Authorization"),
                         "Bearer s3cret")
        path = os.path.join(TMP.name, "token")
        with open(path, "w") as f:
            f.write("from-file\n")
        with EvictdClient(self.proxy.url, token_file=path) as c:
            c.health()
        self.assertEqual(self.proxy.headers[-1].get("Authorization"),
                         "Bearer from-file")
        with EvictdClient(self.proxy.url) as c:
            c.health()
        self.assertNotIn("Authorization", self.proxy.headers[-1])


class IdleReconnectTest(Case):
    """The daemon closes connections idle for a second (--conn-timeout 1)."""

    @classmethod
    def setUpClass(cls) -> None:
        cls.daemon = start_daemon("--conn-timeout", "1")

    def test_next_call_after_idle_close_succeeds(self) -> None:
        c = EvictdClient(self.daemon.url)
        self.addCleanup(c.close)
        c.create(self.sid(), budget=4)
        time.sleep(2)
        self.assertEqual(c.step(self.sid(), 1).newest, 1)
        self.assertEqual(c.connections_opened, 2)
        time.sleep(2)
        self.assertEqual(c.evict(self.sid(), 1).victims, [0])

    def test_retry_when_the_dead_socket_is_only_found_by_writing(
            self) -> None:
        # Without the idle probe the request goes out on the closed socket
        # and the client must notice and resend it on a new one.
        c = EvictdClient(self.daemon.url)
        self.addCleanup(c.close)
        c._probe_idle = False
        c.health()
        time.sleep(2)
        r = c.step(self.sid(), [1, 2])
        self.assertEqual((r.newest, r.replayed), (2, False))
        self.assertEqual((c.retries, c.connections_opened), (1, 2))
        self.assertEqual(c.get(self.sid()).kept, [0, 1, 2])


class UnixSocketTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls) -> None:
        cls.path = os.path.join(TMP.name, "evictd.sock")
        cls.daemon = start_daemon("--budget", "4", listen="unix:" + cls.path)

    def test_api_over_a_unix_socket(self) -> None:
        self.assertEqual(self.daemon.url, "unix:" + self.path)
        with EvictdClient(self.daemon.url) as c:
            self.assertEqual(c.health(), {"status": "ok"})
            self.assertTrue(c.create("u", sinks=1).created)
            self.assertEqual(c.step("u", [1, 2, 3, 4]).victims, [1])
            self.assertIsInstance(c.batch([{"session": "u", "pos": 4},
                                           {"session": "u", "pos": 5}])[1],
                                  StepResult)
            self.assertEqual(c.evict("u", 2).victims, [3, 4])
            self.assertEqual(c.get("u").kept, [0, 5])
            self.assertEqual(c.step("u", [6], tentative=True).size, 3)
            self.assertEqual(c.commit("u", 5).dropped, [6])
            self.assertEqual(c.fork("u", "u2").kept, [0, 5])
            self.assertEqual(c.truncate("u2", 5).removed, [5])
            self.assertEqual(c.create("p", lookahead=3, page_size=2).pages,
                             [0])
            with self.assertRaises(ec.StalePosition):
                c.step("u", 3)
            self.assertTrue(c.delete("u"))
            self.assertEqual(c.connections_opened, 1)

    def test_missing_socket_is_a_connection_failure(self) -> None:
        with EvictdClient("unix:" + self.path + ".missing") as c:
            with self.assertRaises(ec.ConnectionFailed):
                c.health()


class IPv6Test(unittest.TestCase):

    def test_api_over_ipv6_loopback(self) -> None:
        try:
            d = start_daemon(listen="[::1]:0")
        except RuntimeError as e:
            self.skipTest("no IPv6 loopback here: %s" % e)
        self.assertTrue(d.url.startswith("http://[::1]:"), d.url)
        with EvictdClient(d.url) as c:
            self.assertEqual(c.step("v6", [1, 2]).newest, 2)
            self.assertEqual(c.get("v6").kept, [0, 1, 2])


class TransportFailureTest(unittest.TestCase):

    def test_timeout(self) -> None:
        silent = socket.socket()  # accepts connections, never answers
        self.addCleanup(silent.close)
        silent.bind(("127.0.0.1", 0))
        silent.listen(4)
        c = EvictdClient("http://127.0.0.1:%d" % silent.getsockname()[1],
                         timeout=0.3)
        self.addCleanup(c.close)
        with self.assertRaises(ec.RequestTimeout) as cm:
            c.step("s", 1)
        self.assertEqual(cm.exception.code, "timeout")
        self.assertIsInstance(cm.exception, ec.ConnectionFailed)
        self.assertEqual(c.retries, 0)

    def test_connection_refused(self) -> None:
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        with EvictdClient("http://127.0.0.1:%d" % port) as c:
            with self.assertRaises(ec.ConnectionFailed) as cm:
                c.health()
        self.assertIsNone(cm.exception.status)

    def test_answers_that_are_not_the_api(self) -> None:
        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                status, body = ((200, b"plain text") if self.path == "/healthz"
                                else (502, b"<html>bad gateway</html>"))
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        srv.daemon_threads = True
        t = threading.Thread(target=srv.serve_forever, args=(0.05,),
                             daemon=True)
        t.start()
        self.addCleanup(t.join)
        self.addCleanup(srv.server_close)
        self.addCleanup(srv.shutdown)
        with EvictdClient("http://127.0.0.1:%d" % srv.server_address[1]) as c:
            with self.assertRaises(ec.ProtocolError) as cm:
                c.health()
            self.assertEqual(cm.exception.status, 200)
            with self.assertRaises(ec.ProtocolError) as cm:
                c.get("x")
            self.assertEqual(cm.exception.status, 502)
            self.assertIn("bad gateway", cm.exception.message)

    def test_pages_lists_absent_read_as_empty(self) -> None:
        """A daemon older than pages_transient (or a session without pages)
        leaves lists out: they read as empty; present ones are copied; one
        that is not a list is a ProtocolError."""
        step = {"victims": [5], "slots": [1], "size": 3, "newest": 8}
        old = dict(step, pages_new=[4], pages_freed=[2])
        new = dict(old, pages_transient=[3])
        for obj, want in ((step, ([], [], [])), (old, ([4], [2], [])),
                          (new, ([4], [2], [3]))):
            r = StepResult.from_json(obj, [8])
            self.assertEqual((r.pages_new, r.pages_freed, r.pages_transient),
                             want)
            c = ec.CommitResult.from_json(dict(obj, dropped=[]))
            self.assertEqual((c.pages_new, c.pages_freed, c.pages_transient),
                             want)
            t = ec.TruncateResult.from_json(dict(obj, removed=[9]))
            self.assertEqual((t.pages_new, t.pages_freed, t.pages_transient),
                             want)
            e = ec.EvictResult.from_json(obj)
            self.assertEqual((e.pages_new, e.pages_freed, e.pages_transient),
                             want)
        r = StepResult.from_json(new, [8])
        new["pages_transient"].append(99)  # copied, not shared
        self.assertEqual(r.pages_transient, [3])
        with self.assertRaises(ec.ProtocolError):
            StepResult.from_json(dict(step, pages_transient=3), [8])
        # Positional construction keeps its meaning: pages_transient comes
        # after commit.
        r = StepResult([0], [], 4, 4, False, [], [5], [1], [2], True, 4, [3])
        self.assertEqual((r.pages_new, r.pages_freed, r.tentative, r.commit,
                          r.pages_transient), ([1], [2], True, 4, [3]))


# ---- the vectors ------------------------------------------------------------

# Keys of a vector op that describe its request; the others are its answer.
VECTOR_REQUEST_KEYS = {"session", "step", "tentative", "commit", "evict",
                       "truncate", "fork", "check", "error", "adopt",
                       "expect_newest"}
# The HTTP status of each error code a vector may expect.
VECTOR_STATUS = {"invalid_position": 400, "invalid_budget": 400,
                 "too_many_positions": 400, "stale_position": 409,
                 "tentative_pending": 409, "session_exists": 409,
                 "invalid_state": 400, "diverged": 409}


class AsAsync:
    """A blocking client seen through coroutines: ``await w.step(...)``
    calls ``client.step(...)``. The engine tests and the vector replay are
    written once, as coroutines, and run against both clients."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.client, name)
        if not callable(attr):
            return attr

        async def call(*args: Any, **kw: Any) -> Any:
            return attr(*args, **kw)
        return call


def load_vector(path: str) -> Dict[str, Any]:
    with open(path) as f:
        return json.load(f)


async def replay_vector(test: unittest.TestCase, client: Any,
                        vec: Dict[str, Any], use_batch: bool,
                        main: str) -> None:
    """Replays one proto/vectors file (proto/vectors/README.md) through a
    client's coroutines (AsyncEvictdClient, or AsAsync(EvictdClient)) on
    session ``main`` (forks and adoptions become ``main.<name>``): each
    step as a step request (``pos`` for one position) or as a batch item,
    every answer compared with the vector's expected fields exactly (with a
    page size: pages_new, pages_freed and pages_transient too; without one
    all three must be empty), errors by class, code and status (a
    divergence with the newest the answers said and the session's view)."""
    names: Dict[Optional[str], str] = {None: main}
    newest: Dict[Optional[str], int] = {None: 0}
    await client.delete(main, missing_ok=True)
    view = await client.create(main, budget=vec["budget"], sinks=vec["sinks"],
                               lookahead=vec.get("lookahead"),
                               page_size=vec.get("page_size"))
    test.assertTrue(view.created)
    test.assertEqual((view.lookahead, view.page_size),
                     (vec.get("lookahead", 1), vec.get("page_size", 0)))
    paged = vec.get("page_size", 0) > 0
    for i, op in enumerate(vec["ops"]):
        where = "%s op %d %s" % (vec["name"], i, json.dumps(op)[:120])
        name = op.get("session")
        sid = names.get(name) or "%s.%s" % (main, name)
        expect = {"expect_newest": op["expect_newest"]} \
            if "expect_newest" in op else {}
        got: Dict[str, Any] = {}
        try:
            if "adopt" in op:
                b = op["adopt"]
                fresh = name not in names
                if fresh:
                    await client.delete(sid, missing_ok=True)
                v = await client.adopt(
                    sid, b["kept"], b["newest"], slots=b.get("slots"),
                    pages=b.get("pages"), budget=b["budget"],
                    sinks=b["sinks"], lookahead=b["lookahead"],
                    page_size=b["page_size"],
                    replace=b.get("replace", False))
                test.assertEqual((v.id, v.created), (sid, fresh), where)
                names[name] = sid
                got = {k: getattr(v, k) for k in (
                    "budget", "sinks", "size", "newest", "kept", "slots")}
                if v.lookahead != 1:
                    got["lookahead"] = v.lookahead
                if v.page_size:
                    got.update(page_size=v.page_size, pages=v.pages)
                test.assertEqual(v.tentative, [], where)
                r = None
            elif "step" in op:
                kw = {"tentative": op.get("tentative", False),
                      "commit": op.get("commit"), **expect}
                positions = op["step"] or None
                if use_batch:
                    item = ec.step_item(sid, positions=positions, **kw)
                    r = (await client.batch([item]))[0]
                    if isinstance(r, EvictdError):
                        raise r
                elif positions is not None and len(positions) == 1:
                    r = await client.step(sid, positions[0], **kw)
                else:
                    r = await client.step(sid, positions=positions, **kw)
                test.assertIsInstance(r, StepResult, where)
                test.assertFalse(r.replayed, where)
                test.assertEqual((r.positions, r.tentative, r.commit),
                                 (op["step"], op.get("tentative", False),
                                  op.get("commit")), where)
                got = {"victims": r.victims, "slots": r.slots,
                       "size": r.size, "newest": r.newest}
                if "commit" in op:
                    got["dropped"] = r.dropped
                else:
                    test.assertEqual(r.dropped, [], where)
            elif "commit" in op:
                c = await client.commit(sid, op["commit"], **expect)
                test.assertFalse(c.replayed, where)
                got = {"victims": c.victims, "dropped": c.dropped,
                       "size": c.size, "newest": c.newest}
                r = c
            elif "truncate" in op:
                t = await client.truncate(sid, op["truncate"], **expect)
                test.assertFalse(t.replayed, where)
                got = {"removed": t.removed, "size": t.size,
                       "newest": t.newest}
                r = t
            elif "evict" in op:
                r = await client.evict(sid, op["evict"], **expect)
                got = {"victims": r.victims, "size": r.size}
            elif "fork" in op:
                child = "%s.%s" % (main, op["fork"])
                await client.delete(child, missing_ok=True)
                v = await client.fork(sid, child, **expect)
                test.assertTrue(v.created, where)
                test.assertEqual(v.id, child, where)
                parent = await client.get(sid)
                parent.id = child
                test.assertEqual(v, dataclasses.replace(parent, created=True),
                                 where)
                names[op["fork"]] = child
                r = None
            else:
                v = await client.get(sid)
                test.assertEqual(v.size, len(v.kept), where)
                test.assertEqual(len(v.slots), len(v.kept), where)
                test.assertEqual({k: getattr(v, k) for k in op["check"]},
                                 op["check"], where)
                continue
            if r is not None:
                if paged:
                    got["pages_new"] = r.pages_new
                    got["pages_freed"] = r.pages_freed
                    got["pages_transient"] = r.pages_transient
                else:
                    test.assertEqual((r.pages_new, r.pages_freed,
                                      r.pages_transient), ([], [], []),
                                     where)
        except EvictdError as err:
            test.assertEqual(err.status, VECTOR_STATUS.get(err.code), where)
            test.assertIs(type(err), ec._ERRORS.get(err.code), where)
            if isinstance(err, ec.Diverged):
                test.assertEqual((err.newest, err.view.newest),
                                 (newest[name], newest[name]), where)
            got = {"error": err.code}
        want = {k: v for k, v in op.items() if k not in VECTOR_REQUEST_KEYS}
        if "error" in op:
            want = {"error": op["error"]}
        test.assertEqual(got, want, where)
        if "error" in op:
            continue
        if "fork" in op:
            newest[op["fork"]] = newest[name]
        elif "newest" in want:
            newest[name] = want["newest"]
    for sid in names.values():
        await client.delete(sid)


class PoolAdoptTest(Case):
    """EvictdPool sends an adoption and changes that expect a newest to
    the session's instance, as nginx routes them."""

    def test_adopt_and_expect_go_to_the_session_instance(self) -> None:
        import evictd_pool
        other = start_daemon()
        pool = evictd_pool.EvictdPool([MAIN.url, other.url])
        self.addCleanup(pool.close)
        for k in range(6):
            s = self.sid(str(k))
            v = pool.adopt(s, [0, 3], 3, budget=4)
            self.assertTrue(v.created)
            home = pool.client_for(s)
            self.assertEqual(home.get(s).kept, [0, 3])
            self.assertEqual(pool.step(s, 4, expect_newest=3).newest, 4)
            self.assertEqual(pool.fork(s, s + "~f", expect_newest=4).kept,
                             [0, 3, 4])
            with self.assertRaises(ec.Diverged):
                pool.commit(s, 4, expect_newest=9)


class VectorsTest(Case):
    """Every proto/vectors/*.json and rehome/*.json replayed through the
    client, once with single step requests and once with each step as a
    batch item."""

    def test_vectors(self) -> None:
        self.assertGreaterEqual(len(VECTORS), 20)
        self.assertTrue(any("rehome" in p for p in VECTORS))
        for path in VECTORS:
            for use_batch in (False, True):
                with self.subTest(vector=os.path.basename(path),
                                  batch=use_batch):
                    vec = load_vector(path)
                    asyncio.run(replay_vector(
                        self, AsAsync(self.client), vec, use_batch,
                        "vec-%s-%s" % (vec["name"],
                                       "batch" if use_batch else "step")))


# ---- the example frontend ---------------------------------------------------


class ExampleFrontendTest(unittest.TestCase):
    SCRIPT = os.path.join(HERE, "example_frontend.py")

    def run_frontend(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, self.SCRIPT] + list(args),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              universal_newlines=True, timeout=300)

    def test_runs_clean_end_to_end(self) -> None:
        extras = ([], ["--sinks", "4"], ["--budget", "1", "--sinks", "0"],
                  ["--lookahead", "16", "--sinks", "2"],
                  ["--speculative", "4"],
                  ["--speculative", "4", "--lookahead", "8", "--sinks", "3"],
                  ["--speculative", "1", "--budget", "1"],
                  ["--speculative", "3", "--budget", "2", "--sinks", "1"])
        for i, extra in enumerate(extras):
            with self.subTest(extra=extra):
                p = self.run_frontend("--url", MAIN.url, "--sequences", "3",
                                      "--steps", "150", "--budget", "16",
                                      "--prefix", "fe%d-" % i, *extra)
                self.assertEqual(p.returncode, 0, p.stderr)
                self.assertTrue(p.stdout.startswith("ok: 3 sequences"),
                                p.stdout)
                want = "lookahead %s" % (
                    extra[extra.index("--lookahead") + 1]
                    if "--lookahead" in extra else
                    extra[extra.index("--speculative") + 1]
                    if "--speculative" in extra else "1")
                self.assertIn(want, p.stdout)
                self.assertEqual("--speculative" in extra,
                                 "speculative" in p.stdout)
                with EvictdClient(MAIN.url) as c:  # it deleted its sessions
                    with self.assertRaises(ec.UnknownSession):
                        c.get("fe%d-0" % i)

    def test_bad_arguments(self) -> None:
        for args in (["--speculative", "4", "--lookahead", "2"],
                     ["--lookahead", "0"], ["--speculative", "-1"]):
            p = self.run_frontend("--url", MAIN.url, *args)
            self.assertEqual(p.returncode, 2, args)
            self.assertIn("error:", p.stderr)

    def test_unreachable_daemon_exits_nonzero(self) -> None:
        p = self.run_frontend("--url", "unix:" + os.path.join(TMP.name, "no"),
                              "--steps", "1")
        self.assertEqual(p.returncode, 2)
        self.assertIn("connection_failed", p.stderr)

    def test_buffer_checks_catch_bad_answers(self) -> None:
        fe = example_frontend
        buf = fe.KVBuffer(0, 2)
        self.assertEqual(len(buf.slots), 3)
        buf.write(0, 0)
        buf.apply(StepResult([], [1], 2, 1, False, [1]))
        buf.apply(StepResult([0], [2], 2, 2, False, [2]))
        bad = [
            StepResult([], [0], 3, 3, False, [3]),      # over budget
            StepResult([1], [2], 2, 3, False, [3]),     # slot of a live one
            StepResult([1], [3], 2, 3, False, [3]),     # outside the buffer
            StepResult([0], [0], 2, 3, False, [3]),     # victim not held
            StepResult([2, 1], [0], 2, 3, False, [3]),  # victims unordered
            StepResult([1], [0], 2, 4, False, [3]),     # wrong newest
            StepResult([1], [0, 1], 2, 3, False, [3]),  # slots != positions
            StepResult([1], [0], 3, 3, False, [3]),     # size disagrees
            StepResult([1, 2], [0], 1, 3, False, [3]),  # evicts too much
            # The victim's slot, taken before the victim is evicted.
            StepResult([1], [1], 2, 3, False, [3]),
            StepResult([1], [0], 2, 3, True, [3]),      # a replay, unasked
            StepResult([1], [0], 2, 3, False, [3], [2], commit=None),
        ]
        ok = fe.KVBuffer(0, 2)
        ok.slots, ok.where = list(buf.slots), dict(buf.where)
        ok.apply(StepResult([1], [0], 2, 3, False, [3]))  # the good answer
        for r in bad:
            copy = fe.KVBuffer(0, 2)
            copy.slots, copy.where = list(buf.slots), dict(buf.where)
            with self.subTest(result=r), self.assertRaises(fe.Violation):
                copy.apply(r)
        buf.slots[buf.where[2]] = (2, -1)  # overwritten token
        with self.assertRaises(fe.Violation):
            buf.check_tokens()
        self.assertEqual(fe.expected_window(9, 4, 1), [0, 7, 8, 9])
        self.assertEqual(fe.expected_window(2, 4, 1), [0, 1, 2])

    def test_buffer_checks_follow_sub_steps_and_drafts(self) -> None:
        fe = example_frontend

        def fresh() -> "example_frontend.KVBuffer":
            b = fe.KVBuffer(0, 3, lookahead=2)  # 5 slots
            b.write(0, 0)
            b.apply(StepResult([], [1, 2], 3, 2, False, [1, 2]))
            b.apply(StepResult([], [3, 4], 5, 4, False, [3, 4],
                               tentative=True))
            return b

        b = fresh()
        self.assertEqual((len(b.slots), b.drafts), (5, {3, 4}))
        # Accept 3, drop 4, evict 0; then drafts 4 and 5 in slots 4 and 0.
        b.apply(StepResult([0], [4, 0], 5, 5, False, [4, 5], [4],
                           tentative=True, commit=3))
        self.assertEqual((b.drafts, sorted(b.where)), ({4, 5}, [1, 2, 3, 4,
                                                                5]))
        # The same request again is answered as a replay: nothing changes.
        b.apply(StepResult([0], [4, 0], 5, 5, True, [4, 5], [4],
                           tentative=True, commit=3), repeat=True)
        self.assertEqual((b.drafts, sorted(b.where)), ({4, 5}, [1, 2, 3, 4,
                                                                5]))
        # A commit-only step accepting all: evicts 1 and 2.
        b.apply(StepResult([1, 2], [], 3, 5, commit=5))
        self.assertEqual((b.drafts, sorted(b.where)), (set(), [3, 4, 5]))
        # Sub-steps of 2: [6, 7] evicts 3 and 4, then [8] evicts 5; position
        # 8 may take slot 3 (3's, evicted after the first sub-step) but not
        # slot 0 (5's, evicted only after 8 is in).
        good = StepResult([3, 4, 5], [1, 2, 3], 3, 8, False, [6, 7, 8])
        early = StepResult([3, 4, 5], [1, 2, 0], 3, 8, False, [6, 7, 8])
        for r, fine in ((early, False), (good, True)):
            copy = fe.KVBuffer(0, 3, lookahead=2)
            copy.slots, copy.where = list(b.slots), dict(b.where)
            if fine:
                copy.apply(r)
            else:
                with self.assertRaises(fe.Violation):
                    copy.apply(r)
        bad = [
            # a plain step while drafts are pending
            StepResult([0], [4], 3, 5, False, [5]),
            # more drafts than the lookahead
            StepResult([], [4], 6, 5, False, [5], tentative=True),
            # dropped is not every draft above the commit
            StepResult([0], [], 4, 3, False, [], [], commit=3),
            StepResult([0], [], 3, 3, False, [], [4, 5], commit=3),
            # more victims than the commit needs (it needs 0 and 1)
            StepResult([0, 1, 3], [], 3, 4, False, [], [], commit=4),
            StepResult([0, 1], [], 3, 3, False, [], [4], tentative=True,
                       commit=3),
            # a victim that is not held
            StepResult([0, 9], [], 3, 4, False, [], [], commit=4),
            # a replayed answer that does not match the buffer
            StepResult([], [0, 4], 5, 4, True, [3, 4], tentative=True),
        ]
        for r in bad:
            b = fresh()
            with self.subTest(result=r), self.assertRaises(fe.Violation):
                b.apply(r, repeat=r.replayed)

    def test_run_in_process_with_a_lying_daemon_view(self) -> None:
        # A daemon whose GET disagrees with its step answers is caught.
        class Liar(EvictdClient):
            def get(self, session: str) -> ec.SessionView:
                v = super().get(session)
                v.slots = list(reversed(v.slots))
                return v

        with Liar(MAIN.url) as c:
            self.addCleanup(c.close)  # after the deletes below
            for i in range(2):
                self.addCleanup(c.delete, "liar-%d" % i, True)
            with self.assertRaises(example_frontend.Violation):
                example_frontend.run(c, 2, 20, 4, 0, 3, "liar-", 1,
                                     out=io.StringIO())


if __name__ == "__main__":
    unittest.main()
