"""Tests of the asyncio client's own machinery against the real daemon
(EVICTD_BIN, else ../../../build/evictd) and a few fake servers: the
connection pool under many concurrent coroutines, keep-alive and reconnects,
retries decided as the blocking client decides them, unix sockets, timeouts,
cancellation, and how answers are read. The API itself (every method, every
engine workflow, the vectors) is tested for both clients by test_engine.py.
From this directory, `EVICTD_BIN=/abs/path/evictd python3 -m unittest -v
test_evictd_aio`.
"""

import asyncio
import inspect
import json
import os
import random
import socket
import socketserver
import sys
import tempfile
import threading
import time
import unittest
from typing import Any, Dict, List, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import evictd_client as ec  # noqa: E402
import evictd_aio  # noqa: E402
from evictd_aio import AsyncEvictdClient  # noqa: E402
from evictd_client import EvictdClient, StepResult  # noqa: E402
from test_evictd_client import Daemon, DroppingProxy  # noqa: E402

TMP: Any = None
MAIN: Any = None

API = ("health", "metrics", "create", "step", "commit", "truncate", "fork",
       "evict", "adopt", "get", "delete", "batch", "request")


def start(*args: str, listen: str = "127.0.0.1:0") -> Daemon:
    d = Daemon(TMP.name, *args, listen=listen)
    unittest.addModuleCleanup(d.stop)
    return d


def setUpModule() -> None:
    global TMP, MAIN
    TMP = tempfile.TemporaryDirectory(prefix="evictd-pyaio-")
    unittest.addModuleCleanup(TMP.cleanup)
    MAIN = start()


def window(newest: int, budget: int, sinks: int) -> List[int]:
    everything = list(range(newest + 1))
    if len(everything) <= budget:
        return everything
    return everything[:sinks] + everything[len(everything) - (budget - sinks):]


class Counting(AsyncEvictdClient):
    """Records the most connections busy at once."""

    peak = 0

    async def _acquire(self, fresh: bool) -> Any:
        got = await super()._acquire(fresh)
        self.peak = max(self.peak, len(self._busy))
        return got


class Case(unittest.IsolatedAsyncioTestCase):

    async def asyncSetUp(self) -> None:
        self.c = self.client(MAIN.url)

    def client(self, url: str, cls: type = AsyncEvictdClient,
               **kw: Any) -> Any:
        c = cls(url, **kw)
        self.addAsyncCleanup(c.close)
        return c

    def sid(self, name: str = "s") -> str:
        return "aio.%s.%s" % (self._testMethodName[5:90], name)


# ---- the API surface --------------------------------------------------------


class SurfaceTest(unittest.TestCase):

    def test_same_methods_and_signatures_as_the_blocking_client(self) -> None:
        for name in API:
            with self.subTest(method=name):
                sync = getattr(EvictdClient, name)
                aio = getattr(AsyncEvictdClient, name)
                self.assertTrue(inspect.iscoroutinefunction(aio))
                self.assertEqual(inspect.signature(aio),
                                 inspect.signature(sync))
                if name != "request":
                    self.assertIn(inspect.getdoc(sync).splitlines()[0],
                                  inspect.getdoc(aio))
        self.assertEqual(set(evictd_aio.__all__), {"AsyncEvictdClient"})

    def test_address_forms(self) -> None:
        for bad in ("ftp://x", "unix:", "http://127.0.0.1:99999"):
            with self.assertRaises(ValueError):
                AsyncEvictdClient(bad)
        with self.assertRaises(ValueError):
            AsyncEvictdClient(max_connections=0)

    def test_usable_from_one_event_loop_after_another(self) -> None:
        # The pool's semaphore belongs to one loop: a client used by several
        # asyncio.run() in turn must make a new pool in each.
        c = AsyncEvictdClient(MAIN.url, max_connections=1)

        async def use() -> List[Any]:
            try:
                return await asyncio.gather(*(c.health() for _ in range(5)))
            finally:
                await c.close()

        for _ in range(3):
            self.assertEqual(asyncio.run(use()), [{"status": "ok"}] * 5)
        self.assertEqual(c.connections_opened, 3)


# ---- connections and the pool -----------------------------------------------


class InstancePoolTest(Case):

    async def test_adopt_and_expect_go_to_the_session_instance(self) -> None:
        import evictd_pool_aio
        other = start()
        pool = evictd_pool_aio.AsyncEvictdPool([MAIN.url, other.url])
        self.addAsyncCleanup(pool.close)
        for k in range(6):
            s = self.sid(str(k))
            self.assertTrue((await pool.adopt(s, [0, 3], 3, budget=4)
                             ).created)
            self.assertEqual((await pool.client_for(s).get(s)).kept, [0, 3])
            self.assertEqual((await pool.step(s, 4, expect_newest=3)).newest,
                             4)
            self.assertEqual((await pool.fork(s, s + "~f", expect_newest=4)
                              ).kept, [0, 3, 4])
            with self.assertRaises(ec.Diverged):
                await pool.truncate(s, 2, expect_newest=9)


class PoolTest(Case):

    async def test_keep_alive_uses_one_connection_in_sequence(self) -> None:
        for i in range(1, 40):
            await self.c.step(self.sid(), i)
        self.assertEqual((self.c.connections_opened, self.c.retries,
                          self.c.connections), (1, 0, 1))

    async def test_close_then_reuse_and_context_manager(self) -> None:
        async with AsyncEvictdClient(MAIN.url) as c:
            await c.health()
            await c.close()
            self.assertEqual(c.connections, 0)
            await c.health()
            self.assertEqual(c.connections_opened, 2)
        self.assertEqual(c.connections, 0)

    async def speculative_session(self, c: AsyncEvictdClient, sid: str,
                                  seed: int) -> None:
        """One sequence decoded speculatively, from one coroutine: drafts of
        3, at least one accepted per iteration; every answer checked against
        the window and the slots the answers handed out."""
        rng = random.Random(seed)
        budget, sinks, K = 6, 1, 3
        v = await c.create(sid, budget=budget, sinks=sinks, lookahead=K)
        held = dict(zip(v.kept, v.slots))
        committed = 0
        drafts: List[int] = []
        for it in range(15):
            commit = (committed + rng.randint(1, len(drafts)) if drafts
                      else None)
            base = committed if commit is None else commit
            r = await c.step(sid, list(range(base + 1, base + 1 + K)),
                             tentative=True, commit=commit)
            self.assertEqual(r.dropped, [d for d in drafts
                                         if commit is not None and d > commit])
            for p in r.victims + r.dropped:
                del held[p]
            for p, s in r.placements:
                self.assertNotIn(s, held.values())
                self.assertTrue(0 <= s < budget + K)
                held[p] = s
            committed, drafts = base, r.positions
            self.assertEqual(r.size, len(window(committed, budget, sinks))
                             + K)
        r = await c.step(sid, commit=drafts[-1])
        for p in r.victims:
            del held[p]
        v = await c.get(sid)
        self.assertEqual(v.kept, window(drafts[-1], budget, sinks))
        self.assertEqual(dict(zip(v.kept, v.slots)), held)

    async def test_many_coroutines_share_one_client(self) -> None:
        c = self.client(MAIN.url, Counting, max_connections=8)
        await asyncio.gather(*(self.speculative_session(
            c, self.sid(str(i)), i) for i in range(64)))
        self.assertEqual(c.peak, 8)  # all eight were busy at once
        self.assertLessEqual(c.connections_opened, 8)
        self.assertEqual((c.connections, c.retries), (c.connections_opened,
                                                      0))
        # Batches and single requests side by side.
        s = self.sid("x")
        results = await asyncio.gather(
            c.batch([ec.step_item(self.sid("b%d" % i), [1, 2])
                     for i in range(50)]),
            *(c.get(self.sid(str(i))) for i in range(64)),
            c.step(s, [1, 2, 3]))
        self.assertEqual(len(results[0]), 50)
        self.assertTrue(all(isinstance(r, StepResult) for r in results[0]))
        self.assertEqual(results[-1].newest, 3)
        self.assertLessEqual(c.connections_opened, 8)

    async def test_one_connection_makes_a_lock(self) -> None:
        c = self.client(MAIN.url, Counting, max_connections=1)
        await asyncio.gather(*(self.speculative_session(
            c, self.sid(str(i)), i) for i in range(12)))
        self.assertEqual((c.peak, c.connections_opened, c.connections),
                         (1, 1, 1))

    async def test_cancelled_request_frees_its_connection(self) -> None:
        silent = socket.socket()  # accepts connections, never answers
        self.addCleanup(silent.close)
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = "http://127.0.0.1:%d" % silent.getsockname()[1]
        c = self.client(url, max_connections=1, timeout=None)
        task = asyncio.ensure_future(c.step("s", 1))
        await asyncio.sleep(0.2)
        self.assertEqual(c.connections, 1)
        task.cancel()
        with self.assertRaises(asyncio.CancelledError):
            await task
        self.assertEqual(c.connections, 0)
        c.timeout = 0.2  # the only slot is free again: this one runs
        with self.assertRaises(ec.RequestTimeout):
            await asyncio.wait_for(c.health(), 5)
        self.assertEqual((c.connections, c.retries), (0, 0))


# ---- retries ----------------------------------------------------------------


class RetryThroughProxyTest(Case):
    """Answers lost after the daemon applied the request."""

    async def asyncSetUp(self) -> None:
        await super().asyncSetUp()
        self.proxy = DroppingProxy(MAIN.url)
        self.addCleanup(self.proxy.stop)
        self.pc = self.client(self.proxy.url, token="s3cret")
        await self.pc.health()  # the next request reuses this connection

    async def test_lost_step_answer_is_replayed_on_retry(self) -> None:
        s = self.sid()
        await self.c.create(s, budget=3)
        await self.c.step(s, [1, 2, 3])
        self.proxy.drop = 1
        r = await self.pc.step(s, [4, 5])
        self.assertEqual(r, StepResult([1, 2], [0, 1], 3, 5, True, [4, 5]))
        self.assertEqual((self.pc.retries, self.pc.connections_opened),
                         (1, 2))
        self.assertEqual((await self.c.get(s)).kept, [3, 4, 5])

    async def test_lost_commit_truncate_and_fork_answers(self) -> None:
        s, child = self.sid(), self.sid("child")
        await self.c.create(s, budget=3, lookahead=2)
        await self.c.step(s, [1, 2, 3])
        await self.c.step(s, [4, 5], tentative=True)
        self.proxy.drop = 1
        c = await self.pc.commit(s, 4)
        self.assertEqual(c, ec.CommitResult([1], [5], 3, 4, True))
        self.proxy.drop = 1
        t = await self.pc.truncate(s, 4)
        self.assertEqual(t, ec.TruncateResult([4], 2, 3, True))
        self.proxy.drop = 1
        v = await self.pc.fork(s, child)
        self.assertFalse(v.created)  # the retry's answer: it existed
        self.assertEqual(v, ec.SessionView(child, 3, 0, 2, 3, [2, 3],
                                           v.slots, False, 2))
        self.assertEqual(self.pc.retries, 3)
        self.assertEqual((await self.c.get(child)).kept, [2, 3])

    async def test_lost_batch_answer_is_replayed_when_sessions_are_distinct(
            self) -> None:
        a, b = self.sid("a"), self.sid("b")
        await self.c.create(a, budget=4, lookahead=2)
        await self.c.step(a, [1, 2], tentative=True)
        self.proxy.drop = 1
        out = await self.pc.batch([
            ec.step_item(a, [2, 3], tentative=True, commit=1),
            ec.step_item(b, 1, lookahead=2),
            ec.step_item("bad id", 1)])
        self.assertEqual([getattr(r, "replayed", None) for r in out],
                         [True, True, None])
        self.assertEqual((out[0].dropped, out[0].commit, out[0].tentative),
                         ([2], 1, True))
        self.assertIsInstance(out[2], ec.InvalidSessionId)
        self.assertEqual((await self.c.get(a)).tentative, [2, 3])

    async def test_batch_naming_a_session_twice_is_not_retried(self) -> None:
        a = self.sid("a")
        self.proxy.drop = 1
        with self.assertRaises(ec.ConnectionFailed):
            await self.pc.batch([{"session": a, "pos": 1},
                                 {"session": a, "pos": 2}])
        self.assertEqual(self.pc.retries, 0)
        self.assertEqual((await self.c.get(a)).kept, [0, 1, 2])

    async def test_lost_evict_answer_is_not_retried(self) -> None:
        s = self.sid()
        await self.c.step(s, [1, 2, 3])
        self.proxy.drop = 1
        with self.assertRaises(ec.ConnectionFailed) as cm:
            await self.pc.evict(s, 1)
        self.assertNotIsInstance(cm.exception, ec.RequestTimeout)
        self.assertEqual(self.pc.retries, 0)
        self.assertEqual((await self.c.get(s)).kept, [3])  # it did happen

    async def test_lost_create_and_delete_answers(self) -> None:
        s = self.sid()
        self.proxy.drop = 1
        v = await self.pc.create(s, budget=4, page_size=2)
        self.assertEqual((v.created, v.budget, v.page_size), (False, 4, 2))
        self.proxy.drop = 1
        self.assertFalse(await self.pc.delete(s, missing_ok=True))
        self.assertEqual(self.pc.retries, 2)
        with self.assertRaises(ec.UnknownSession):
            await self.c.get(s)

    async def test_bearer_token_and_host_are_sent(self) -> None:
        sent = self.proxy.headers[-1]
        self.assertEqual(sent.get("Authorization"), "Bearer s3cret")
        self.assertEqual(sent.get("Host"), self.proxy.url[len("http://"):])
        self.assertTrue(sent.get("User-Agent", "").startswith(
            "evictd-client-python-asyncio/"))
        path = os.path.join(TMP.name, "token")
        with open(path, "w") as f:
            f.write("from-file\n")
        async with AsyncEvictdClient(self.proxy.url, token_file=path) as c:
            await c.health()
        self.assertEqual(self.proxy.headers[-1].get("Authorization"),
                         "Bearer from-file")
        async with AsyncEvictdClient(self.proxy.url) as c:
            await c.health()
        self.assertNotIn("Authorization", self.proxy.headers[-1])


class IdleReconnectTest(Case):
    """The daemon closes connections idle for a second (--conn-timeout 1)."""

    @classmethod
    def setUpClass(cls) -> None:
        cls.daemon = start("--conn-timeout", "1")

    async def test_next_call_after_idle_close_succeeds(self) -> None:
        c = self.client(self.daemon.url)
        await c.create(self.sid(), budget=4)
        await asyncio.sleep(2)
        self.assertEqual((await c.step(self.sid(), 1)).newest, 1)
        self.assertEqual((c.connections_opened, c.retries), (2, 0))
        await asyncio.sleep(2)
        self.assertEqual((await c.evict(self.sid(), 1)).victims, [0])

    async def test_retry_when_the_dead_socket_is_only_found_by_writing(
            self) -> None:
        c = self.client(self.daemon.url)
        c._probe_idle = False
        await c.health()
        await asyncio.sleep(2)
        r = await c.step(self.sid(), [1, 2])
        self.assertEqual((r.newest, r.replayed), (2, False))
        self.assertEqual((c.retries, c.connections_opened), (1, 2))
        self.assertEqual((await c.get(self.sid())).kept, [0, 1, 2])
        # An evict is not resent: the caller hears of it.
        await asyncio.sleep(2)
        with self.assertRaises(ec.ConnectionFailed):
            await c.evict(self.sid(), 1)
        self.assertEqual(c.retries, 1)
        self.assertEqual((await c.get(self.sid())).kept, [0, 1, 2])


# ---- transports and failures ------------------------------------------------


class TransportTest(Case):

    async def test_api_over_a_unix_socket(self) -> None:
        path = os.path.join(TMP.name, "aio.sock")
        d = start("--budget", "4", listen="unix:" + path)
        self.assertEqual(d.url, "unix:" + path)
        c = self.client(d.url)
        self.assertEqual(await c.health(), {"status": "ok"})
        self.assertTrue((await c.create("u", sinks=1, lookahead=2)).created)
        self.assertEqual((await c.step("u", [1, 2, 3, 4])).victims, [1])
        self.assertEqual((await c.step("u", [5, 6], tentative=True)).size, 6)
        self.assertEqual((await c.commit("u", 5)).dropped, [6])
        self.assertEqual((await c.fork("u", "v")).kept, [0, 3, 4, 5])
        self.assertEqual((await c.truncate("v", 4)).removed, [4, 5])
        self.assertEqual((await c.evict("u", 2)).victims, [3, 4])
        self.assertTrue(await c.delete("u"))
        self.assertEqual(c.connections_opened, 1)
        missing = self.client("unix:" + path + ".missing")
        with self.assertRaises(ec.ConnectionFailed) as cm:
            await missing.health()
        self.assertIsNone(cm.exception.status)

    async def test_api_over_ipv6_loopback(self) -> None:
        try:
            d = start(listen="[::1]:0")
        except RuntimeError as e:
            self.skipTest("no IPv6 loopback here: %s" % e)
        c = self.client(d.url)
        self.assertEqual((await c.step("v6", [1, 2])).newest, 2)
        self.assertEqual((await c.get("v6")).kept, [0, 1, 2])

    async def test_bare_host_port_address(self) -> None:
        c = self.client(MAIN.addr)
        self.assertEqual(await c.health(), {"status": "ok"})

    async def test_timeout(self) -> None:
        silent = socket.socket()
        self.addCleanup(silent.close)
        silent.bind(("127.0.0.1", 0))
        silent.listen(4)
        c = self.client("http://127.0.0.1:%d" % silent.getsockname()[1],
                        timeout=0.3)
        started = time.monotonic()
        with self.assertRaises(ec.RequestTimeout) as cm:
            await c.step("s", 1)
        self.assertLess(time.monotonic() - started, 3)
        self.assertEqual(cm.exception.code, "timeout")
        self.assertIsInstance(cm.exception, ec.ConnectionFailed)
        self.assertEqual((c.retries, c.connections), (0, 0))

    async def test_connection_refused(self) -> None:
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        c = self.client("http://127.0.0.1:%d" % port)
        with self.assertRaises(ec.ConnectionFailed) as cm:
            await c.health()
        self.assertIsNone(cm.exception.status)
        self.assertEqual(c.connections, 0)
        self.assertFalse(isinstance(cm.exception, ec.RequestTimeout))

    async def test_body_too_large_answer_is_read(self) -> None:
        # Larger than the socket buffers: the daemon answers before reading
        # it all and resets the connection; the answer still counts.
        asyncio.get_running_loop().slow_callback_duration = 60  # the dumps
        s = self.sid()
        await self.c.create(s)
        with self.assertRaises(ec.BodyTooLarge) as cm:
            await self.c.step(s, 1, attention="y" * (16 << 20))
        self.assertEqual(cm.exception.status, 413)
        self.assertEqual(await self.c.health(), {"status": "ok"})
        self.assertEqual((await self.c.get(s)).newest, 0)

    async def test_error_answers_carry_their_headers(self) -> None:
        with self.assertRaises(ec.MethodNotAllowed) as cm:
            await self.c.request("POST", "/healthz", {})
        self.assertEqual(cm.exception.allow, "GET, HEAD")
        with self.assertRaises(ec.StalePosition) as cm2:
            await self.c.step(self.sid(), 0)
        self.assertEqual(cm2.exception.newest, 0)
        self.assertEqual(await self.c.request("HEAD", "/healthz"),
                         (200, None))
        self.assertIn("evictd_", await self.c.metrics())
        self.assertEqual(self.c.connections_opened, 1)


class CannedServer:
    """Answers each request with canned bytes chosen by its path (and
    records the requests): for answers the daemon never sends."""

    def __init__(self, answers: Dict[str, Tuple[bytes, bool]]) -> None:
        server = self
        self.requests: List[Tuple[str, str, Dict[str, str], bytes]] = []
        self.connections = 0

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                server.connections += 1
                while True:
                    line = self.rfile.readline()
                    if not line:
                        return
                    method, path, _ = line.decode("latin-1").split(" ", 2)
                    headers: Dict[str, str] = {}
                    while True:
                        h = self.rfile.readline().decode("latin-1")
                        if h in ("\r\n", "\n", ""):
                            break
                        k, v = h.split(":", 1)
                        headers[k.strip().lower()] = v.strip()
                    body = self.rfile.read(int(headers.get(
                        "content-length", 0)))
                    server.requests.append((method, path, headers, body))
                    raw, close = answers.get(path, answers["/ok"])
                    self.wfile.write(raw)
                    self.wfile.flush()
                    if close:
                        return

        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0),
                                                      Handler)
        self.server.daemon_threads = True
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever,
                                       args=(0.05,), daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


def chunked(body: bytes, size: int) -> bytes:
    out = b""
    for i in range(0, len(body), size):
        part = body[i:i + size]
        out += b"%x;ext=1\r\n%s\r\n" % (len(part), part)
    return out + b"0\r\nX-Trailer: 1\r\n\r\n"


OK = b'{"status":"ok"}'


class AnswerFormsTest(Case):
    """How answers are read: the daemon sends Content-Length bodies only;
    a proxy may send others."""

    async def asyncSetUp(self) -> None:
        view = json.dumps({"id": "a", "budget": 2, "sinks": 0, "size": 1,
                           "newest": 0, "kept": [0], "slots": [0]}).encode()
        self.srv = CannedServer({
            "/ok": (b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s"
                    % (len(OK), OK), False),
            "/session/a": (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked"
                           b"\r\n\r\n" + chunked(view, 7), False),
            "/eof": (b"HTTP/1.0 200 OK\r\nContent-Type: application/json"
                     b"\r\n\r\n" + OK, True),
            "/continue": (b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n"
                          b"Content-Length: %d\r\n\r\n%s" % (len(OK), OK),
                          False),
            "/head": (b"HTTP/1.1 200 OK\r\nContent-Length: 15\r\n\r\n", False),
            "/garbage": (b"SPAM\r\n\r\n", True),
            "/short": (b"HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n{\"a\"",
                       True),
            "/plain": (b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\ntext",
                       False),
            "/502": (b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 6\r\n\r\n"
                     b"<html>", False),
        })
        self.addCleanup(self.srv.stop)
        self.c = self.client(self.srv.url, token="t0k")

    async def test_chunked_interim_and_head_answers_keep_the_connection(
            self) -> None:
        v = await self.c.get("a")
        self.assertEqual((v.id, v.kept, v.lookahead, v.pages),
                         ("a", [0], 1, []))
        self.assertEqual(await self.c.request("GET", "/continue"),
                         (200, {"status": "ok"}))
        self.assertEqual(await self.c.request("HEAD", "/head"), (200, None))
        self.assertEqual(await self.c.health(), {"status": "ok"})
        self.assertEqual((self.c.connections_opened, self.srv.connections),
                         (1, 1))

    async def test_answer_ended_by_closing(self) -> None:
        self.assertEqual(await self.c.request("GET", "/eof"),
                         (200, {"status": "ok"}))
        self.assertEqual(self.c.connections, 0)  # HTTP/1.0: not kept
        self.assertEqual(await self.c.health(), {"status": "ok"})
        self.assertEqual(self.c.connections_opened, 2)

    async def test_broken_answers(self) -> None:
        with self.assertRaises(ec.ConnectionFailed):
            await self.c.request("GET", "/garbage")
        self.assertEqual(self.c.retries, 0)  # a new connection: no retry
        await self.c.health()
        # Cut short on a reused connection: a GET is resent once, a POST
        # with retry=False is not.
        with self.assertRaises(ec.ConnectionFailed):
            await self.c.request("GET", "/short")
        self.assertEqual(self.c.retries, 1)
        await self.c.health()
        with self.assertRaises(ec.ConnectionFailed):
            await self.c.request("POST", "/short", {}, retry=False)
        self.assertEqual(self.c.retries, 1)
        with self.assertRaises(ec.ProtocolError) as cm:
            await self.c.request("GET", "/plain")
        self.assertEqual(cm.exception.status, 200)
        with self.assertRaises(ec.ProtocolError) as cm:
            await self.c.request("GET", "/502")
        self.assertEqual(cm.exception.status, 502)
        self.assertIn("<html>", cm.exception.message)

    async def test_request_bytes(self) -> None:
        with self.assertRaises(ec.ProtocolError):  # /ok is no step answer
            await self.c.step("s.1", [1, 2], tentative=True, commit=0)
        with self.assertRaises(ec.ProtocolError):
            await self.c.get("s.1")
        method, path, headers, body = self.srv.requests[-2]
        self.assertEqual((method, path), ("POST", "/session/s.1/step"))
        self.assertEqual(json.loads(body), {"positions": [1, 2],
                                            "tentative": True, "commit": 0})
        self.assertEqual(headers["content-length"], str(len(body)))
        self.assertEqual(headers["content-type"], "application/json")
        self.assertEqual(headers["authorization"], "Bearer t0k")
        self.assertEqual(headers["host"], self.srv.url[len("http://"):])
        method, path, headers, body = self.srv.requests[-1]
        self.assertEqual((method, path, body), ("GET", "/session/s.1", b""))
        self.assertNotIn("content-length", headers)
        prefixed = self.client(self.srv.url + "/evictd/")
        await prefixed.delete("a b/c")
        self.assertEqual(self.srv.requests[-1][:2],
                         ("DELETE", "/evictd/session/a%20b%2Fc"))


if __name__ == "__main__":
    unittest.main()
