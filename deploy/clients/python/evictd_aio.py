"""An asyncio client for evictd: :class:`AsyncEvictdClient`.

Standard library only (Python 3.9+), next to ``evictd_client.py``, which it
imports: the two clients share the results (:class:`StepResult`,
:class:`SessionView`, ...), the errors (:class:`EvictdError` and its
subclasses), :class:`StepBatch`, the code that builds each request and
reads its answer, and the rules for sending a request again (the core,
``evictd_client._Core``), so they cannot disagree about the API. This
module only carries those requests over asyncio streams (HTTP/1.1, keep-alive,
``Content-Length`` bodies; chunked answers and answers ended by closing are
read too, for proxies, although the daemon sends neither).

Concurrency. One client may be used by any number of coroutines at once (of
one event loop): it keeps a small pool of keep-alive connections, at most
``max_connections`` (default 8) open at a time. A request takes an idle
connection or opens a new one; when all are busy it waits for one
(``max_connections=1`` makes the client a serializing lock around one
connection). Requests of concurrent coroutines reach the daemon in no
promised order, so a session's own steps, which must increase, belong in one
coroutine (or one batch).

Retries are those of :class:`evictd_client.EvictdClient`, decided by the
same code (see that module's docstring): an idle pooled connection the peer has
closed is replaced before use; a request whose sending failed is resent once
on a new connection; a request sent on a reused connection that got no
answer is resent once on a new connection when it is safe to repeat (GET,
PUT, DELETE, step, commit, truncate, fork, batches naming each session once;
never an evict); timeouts are never retried.

Timeouts. ``timeout`` bounds one attempt of a request (sending it and
reading the whole answer), ``connect_timeout`` opening a connection. Waiting
for a free pooled connection is not bounded by either (wrap the call in
``asyncio.wait_for`` for that). A cancelled request closes its connection.

Example::

    async with AsyncEvictdClient("http://127.0.0.1:8090") as ev:
        await ev.create("seq-1", budget=512, sinks=4, lookahead=4)
        r = await ev.step("seq-1", [1, 2, 3, 4], tentative=True)
        r = await ev.step("seq-1", [4, 5], commit=3, tentative=True)
"""

import asyncio
import ssl
from typing import (Any, Dict, Iterable, List, Mapping, Optional, Sequence,
                    Tuple, Union)

from evictd_client import (
    _BROKEN, _LOST, _TIMED_OUT, _UNSENT, DEFAULT_URL, BatchOutcome,
    CommitResult, ConnectionFailed, EvictdClient, EvictdError, EvictResult,
    RequestTimeout, SessionView, StepBatch, StepResult, TruncateResult,
    _adopt_call, _answer, _batch_call, _Call, _commit_call, _Core,
    _create_call, _delete_call, _evict_call, _fork_call, _get_call,
    _health_call, _metrics_call, _peer_closed, _Request, _step_call,
    _truncate_call)

__all__ = ["AsyncEvictdClient"]

# Longest status or header line, and most header lines, of an answer.
_LINE_LIMIT = 65536
_MAX_HEADERS = 100


class _Dropped(Exception):
    """The connection ended before a whole answer arrived."""


class _SendFailed(Exception):
    """The request could not be handed over whole, and no answer came."""


class _BadAnswer(Exception):
    """Bytes that are not an HTTP/1.x answer."""


class _Reader(asyncio.StreamReader):
    """A StreamReader that turns a transport error into the end of the
    stream after the bytes already received. The stock one raises the error
    first, which loses an answer the daemon sent before resetting the
    connection (a 413 to a body it did not read), an answer the blocking
    client reads."""

    lost: Optional[BaseException] = None

    def set_exception(self, exc: BaseException) -> None:
        self.lost = exc
        self.feed_eof()


class _Connection:
    """One keep-alive connection of the pool."""

    __slots__ = ("reader", "writer", "generation", "slots")

    def __init__(self, reader: _Reader, writer: asyncio.StreamWriter,
                 generation: int, slots: asyncio.Semaphore) -> None:
        self.reader = reader
        self.writer = writer
        self.generation = generation
        self.slots = slots  # the pool's semaphore it holds while busy

    def unusable(self) -> bool:
        """True when the idle connection must not carry another request:
        the peer closed it or sent something unasked (seen by the loop
        already, or still waiting in the socket)."""
        if (self.writer.is_closing() or self.reader.at_eof()
                or self.reader.lost is not None):
            return True
        sock = self.writer.get_extra_info("socket")
        return sock is None or _peer_closed(sock)

    def close(self) -> None:
        try:
            self.writer.close()
        except RuntimeError:  # its event loop is closed: nothing to do
            pass


class _Response:
    __slots__ = ("status", "reason", "headers", "body", "will_close")

    def __init__(self, status: int, reason: str, headers: Dict[str, str],
                 body: bytes, will_close: bool) -> None:
        self.status = status
        self.reason = reason
        self.headers = headers
        self.body = body
        self.will_close = will_close

    def header(self, name: str) -> Optional[str]:
        return self.headers.get(name.lower())


async def _line(reader: asyncio.StreamReader) -> bytes:
    """One CRLF-ended line (without it); _Dropped at the end of the stream,
    _BadAnswer when it is too long."""
    try:
        line = await reader.readuntil(b"\n")
    except asyncio.IncompleteReadError as e:
        raise _Dropped("the answer ended after %d bytes of a line"
                       % len(e.partial)) from None
    except asyncio.LimitOverrunError:
        raise _BadAnswer("a line longer than %d bytes" % _LINE_LIMIT) \
            from None
    return line.rstrip(b"\r\n")


async def _exactly(reader: asyncio.StreamReader, n: int) -> bytes:
    try:
        return await reader.readexactly(n)
    except asyncio.IncompleteReadError as e:
        raise _Dropped("the answer ended after %d of %d body bytes"
                       % (len(e.partial), n)) from None


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    parts: List[bytes] = []
    while True:
        size_line = await _line(reader)
        try:
            size = int(size_line.split(b";", 1)[0].strip(), 16)
        except ValueError:
            raise _BadAnswer("bad chunk size %.40r" % size_line) from None
        if size < 0:
            raise _BadAnswer("bad chunk size %.40r" % size_line)
        if size == 0:
            while await _line(reader):  # trailers, up to the empty line
                pass
            return b"".join(parts)
        parts.append(await _exactly(reader, size))
        if await _line(reader):
            raise _BadAnswer("no CRLF after a chunk")


async def _read_response(reader: asyncio.StreamReader,
                         head: bool) -> _Response:
    """Reads one whole answer."""
    while True:
        status_line = await _line(reader)
        if not status_line and reader.at_eof():
            raise _Dropped("the connection closed without an answer")
        parts = status_line.decode("latin-1").split(None, 2)
        if (len(parts) < 2 or not parts[0].startswith("HTTP/1.")
                or not parts[1].isdigit() or len(parts[1]) != 3):
            # Like http.client's BadStatusLine: the connection is not
            # carrying the answer it should; treated as a dropped one.
            raise _Dropped("bad status line %.80r" % status_line)
        version, status = parts[0], int(parts[1])
        reason = parts[2] if len(parts) > 2 else ""
        headers: Dict[str, str] = {}
        for _ in range(_MAX_HEADERS + 1):
            line = await _line(reader)
            if not line:
                break
            name, sep, value = line.decode("latin-1").partition(":")
            if not sep or not name or name != name.strip():
                raise _BadAnswer("bad header line %.80r" % line)
            key = name.lower()
            value = value.strip()
            if key in headers and key not in ("content-length",):
                headers[key] += ", " + value
            else:
                headers[key] = value
        else:
            raise _BadAnswer("more than %d header lines" % _MAX_HEADERS)
        if 100 <= status < 200 and status != 101:
            continue  # an interim answer (100 Continue): the real one follows
        break
    tokens = {t.strip().lower()
              for t in headers.get("connection", "").split(",")}
    will_close = "close" in tokens or (version == "HTTP/1.0"
                                       and "keep-alive" not in tokens)
    if head or status in (204, 304) or 100 <= status < 200:
        return _Response(status, reason, headers, b"", will_close)
    if "chunked" in headers.get("transfer-encoding", "").lower():
        body = await _read_chunked(reader)
    elif "content-length" in headers:
        try:
            length = int(headers["content-length"])
        except ValueError:
            length = -1
        if length < 0:
            raise _BadAnswer("bad Content-Length %r"
                             % headers["content-length"])
        body = await _exactly(reader, length)
    else:  # the answer ends when the connection does
        body = await reader.read()
        will_close = True
    return _Response(status, reason, headers, body, will_close)


class AsyncEvictdClient(_Core):
    """An asyncio client for one evictd daemon: the methods of
    :class:`evictd_client.EvictdClient` as coroutines, with the same
    arguments, results and errors.

    Args:
        url: ``http://host:port`` (``http://[v6]:port`` too; a path prefix
            is kept, for a proxy), ``host:port``, or ``unix:/path``.
        timeout: seconds for one attempt of a request, sending it and
            reading the whole answer (None: forever).
        connect_timeout: seconds to open a connection (default timeout).
        token: a bearer token, sent as ``Authorization: Bearer <token>``.
        token_file: a file whose first line is the token (used when token
            is None).
        max_connections: the most connections open at once; concurrent
            requests beyond that wait for one to come free.

    Safe for concurrent coroutines of one event loop (a connection pool, see
    the module docstring). Use as ``async with`` or await :meth:`close`.
    """

    def __init__(self, url: str = DEFAULT_URL, *,
                 timeout: Optional[float] = 10.0,
                 connect_timeout: Optional[float] = None,
                 token: Optional[str] = None,
                 token_file: Optional[str] = None,
                 max_connections: int = 8,
                 cafile: Optional[str] = None,
                 ssl_context: Optional["ssl.SSLContext"] = None) -> None:
        if max_connections < 1:
            raise ValueError("max_connections must be at least 1")
        super().__init__(url, timeout, connect_timeout, token, token_file,
                         cafile, ssl_context, "evictd-client-python-asyncio")
        self.max_connections = max_connections
        if self._unix is not None:
            self._host_header = "localhost"
        else:
            host = ("[%s]" % self._host if ":" in self._host
                    else self._host)
            default = 443 if self._tls is not None else 80
            self._host_header = (host if self._port == default
                                 else "%s:%d" % (host, self._port))
        # The pool, made in the loop of the first request (a Semaphore made
        # outside a running loop is bound to the wrong one on Python 3.9).
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._slots: Optional[asyncio.Semaphore] = None
        self._idle: List[_Connection] = []
        self._busy: List[_Connection] = []
        self._generation = 0

    # -- plumbing --

    async def __aenter__(self) -> "AsyncEvictdClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def close(self) -> None:
        """Closes the idle connections now and the busy ones when their
        requests end (the next request opens a new one)."""
        self._generation += 1
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()
        if self._loop is not asyncio.get_running_loop():
            return  # they belong to a loop that has ended
        for conn in idle:
            try:
                await conn.writer.wait_closed()
            except (OSError, RuntimeError):
                pass

    @property
    def connections(self) -> int:
        """Connections open now (idle and busy)."""
        return len(self._idle) + len(self._busy)

    def _pool(self) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            # A new event loop (e.g. another asyncio.run): the connections
            # of the old one cannot be used in it.
            for conn in self._idle:
                conn.close()
            self._idle, self._busy = [], []
            self._loop = loop
            self._slots = asyncio.Semaphore(self.max_connections)
        assert self._slots is not None
        return self._slots

    async def _open(self, slots: asyncio.Semaphore) -> _Connection:
        loop = asyncio.get_running_loop()
        reader = _Reader(limit=_LINE_LIMIT)
        protocol = asyncio.StreamReaderProtocol(reader)
        try:
            if self._unix is not None:
                connecting = loop.create_unix_connection(lambda: protocol,
                                                         self._unix)
            else:
                connecting = loop.create_connection(
                    lambda: protocol, self._host, self._port, ssl=self._tls,
                    server_hostname=self._host if self._tls else None)
            transport, _ = await asyncio.wait_for(connecting,
                                                  self.connect_timeout)
        except asyncio.TimeoutError as e:
            raise RequestTimeout("Could not connect to %s within %ss."
                                 % (self.url, self.connect_timeout)) from e
        except OSError as e:
            raise ConnectionFailed("Could not connect to %s: %s"
                                   % (self.url, e)) from e
        writer = asyncio.StreamWriter(transport, protocol, reader, loop)
        return _Connection(reader, writer, self._generation, slots)

    async def _acquire(self, fresh: bool) -> Tuple[_Connection, bool]:
        """A connection and whether it was used before: an idle one the peer
        has not closed, or (always with ``fresh``) a new one."""
        slots = self._pool()
        await slots.acquire()
        try:
            while self._idle and not fresh:
                conn = self._idle.pop()
                if self._probe_idle and conn.unusable():
                    conn.close()
                    continue
                self._busy.append(conn)
                return conn, True
            self.connections_opened += 1
            conn = await self._open(slots)
            self._busy.append(conn)
            return conn, False
        except BaseException:
            slots.release()
            raise

    def _release(self, conn: _Connection, keep: bool) -> None:
        if conn in self._busy:
            self._busy.remove(conn)
        else:  # the pool was remade for another loop meanwhile
            keep = False
        if keep and conn.generation == self._generation:
            self._idle.append(conn)
        else:
            conn.close()
        conn.slots.release()

    @staticmethod
    async def _roundtrip(conn: _Connection, request: bytes,
                         head: bool) -> _Response:
        send_error: Optional[BaseException] = None
        try:
            conn.writer.write(request)
            await conn.writer.drain()
        except (OSError, RuntimeError) as e:
            # The daemon may have answered before reading the whole body
            # (413) and closed: read that answer if it is there.
            send_error = e
        try:
            return await _read_response(conn.reader, head)
        except _Dropped:
            if send_error is not None:
                raise _SendFailed(send_error) from send_error
            raise

    def _request_bytes(self, req: _Request) -> bytes:
        lines = ["%s %s HTTP/1.1" % (req.method, req.target),
                 "Host: " + self._host_header]
        lines.extend("%s: %s" % kv for kv in req.headers.items())
        if req.data is not None or req.method in ("POST", "PUT"):
            lines.append("Content-Length: %d" % len(req.data or b""))
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        return head + req.data if req.data else head

    async def _exchange(self, req: _Request) -> _Response:
        """Sends one request and reads the whole answer, on a new
        connection again when :meth:`evictd_client._Core._again` says so."""
        request = self._request_bytes(req)
        for attempt in (0, 1):
            conn, reused = await self._acquire(fresh=attempt > 0)
            keep = False
            try:
                try:
                    resp = await asyncio.wait_for(
                        self._roundtrip(conn, request, req.method == "HEAD"),
                        self.timeout)
                except asyncio.TimeoutError as e:
                    self._again(req, _TIMED_OUT, attempt, reused, e)
                    continue
                except _SendFailed as e:
                    self._again(req, _UNSENT, attempt, reused, e.args[0])
                    continue
                except _Dropped as e:
                    self._again(req, _LOST, attempt, reused, e)
                    continue
                except (_BadAnswer, OSError) as e:
                    self._again(req, _BROKEN, attempt, reused, e)
                    continue
                keep = not resp.will_close and conn.reader.lost is None
                return resp
            finally:
                self._release(conn, keep)
        raise AssertionError("unreachable")

    async def request(self, method: str, path: str, body: Any = None, *,
                      retry: Optional[bool] = None, raw: bool = False
                      ) -> Tuple[int, Any]:
        """Sends one request and returns ``(status, parsed JSON or None)``
        (with ``raw``, the body as bytes instead of parsed), as
        :meth:`evictd_client.EvictdClient.request` does."""
        req = self._prepare(method, path, body, retry)
        resp = await self._exchange(req)
        return _answer(req, resp.status, resp.reason, resp.header,
                       resp.body, raw)

    async def _call(self, call: _Call) -> Any:
        """Carries out one API call (the shared _*_call functions of
        evictd_client)."""
        try:
            status, obj = await self.request(*call.request, retry=call.retry,
                                             raw=call.raw)
        except EvictdError as e:
            return call.failed(e)
        return call.parse(status, obj)

    # -- the API (documented on EvictdClient; docstrings copied below) --

    async def health(self) -> Dict[str, Any]:
        return await self._call(_health_call())

    async def metrics(self) -> str:
        return await self._call(_metrics_call())

    async def create(self, session: str, budget: Optional[int] = None,
                     sinks: Optional[int] = None, *,
                     lookahead: Optional[int] = None,
                     page_size: Optional[int] = None) -> SessionView:
        return await self._call(_create_call(session, budget, sinks,
                                             lookahead, page_size))

    async def step(self, session: str,
                   pos: Union[int, Sequence[int], None] = None, *,
                   positions: Optional[Sequence[int]] = None,
                   attention: Any = None, budget: Optional[int] = None,
                   sinks: Optional[int] = None,
                   lookahead: Optional[int] = None,
                   page_size: Optional[int] = None, tentative: bool = False,
                   commit: Optional[int] = None,
                   expect_newest: Optional[int] = None) -> StepResult:
        return await self._call(_step_call(
            session, pos, positions, attention,
            {"budget": budget, "sinks": sinks, "lookahead": lookahead,
             "page_size": page_size}, tentative, commit, expect_newest))

    async def commit(self, session: str, newest: int, *,
                     expect_newest: Optional[int] = None) -> CommitResult:
        return await self._call(_commit_call(session, newest, expect_newest))

    async def truncate(self, session: str, frm: Optional[int] = None, *,
                       from_: Optional[int] = None,
                       expect_newest: Optional[int] = None
                       ) -> TruncateResult:
        return await self._call(_truncate_call(session, frm, from_,
                                               expect_newest))

    async def fork(self, session: str, into: str, *,
                   expect_newest: Optional[int] = None) -> SessionView:
        return await self._call(_fork_call(session, into, expect_newest))

    async def evict(self, session: str, budget: Optional[int] = None, *,
                    expect_newest: Optional[int] = None) -> EvictResult:
        return await self._call(_evict_call(session, budget, expect_newest))

    async def adopt(self, session: str, kept: Sequence[int], newest: int, *,
                    slots: Optional[Sequence[int]] = None,
                    pages: Optional[Sequence[int]] = None,
                    budget: Optional[int] = None,
                    sinks: Optional[int] = None,
                    lookahead: Optional[int] = None,
                    page_size: Optional[int] = None,
                    replace: bool = False) -> SessionView:
        return await self._call(_adopt_call(
            session, kept, newest, slots, pages,
            {"budget": budget, "sinks": sinks, "lookahead": lookahead,
             "page_size": page_size}, replace))

    async def get(self, session: str) -> SessionView:
        return await self._call(_get_call(session))

    async def delete(self, session: str, missing_ok: bool = False) -> bool:
        return await self._call(_delete_call(session, missing_ok))

    async def batch(self, items: Union[StepBatch,
                                       Iterable[Mapping[str, Any]]]
                    ) -> List[BatchOutcome]:
        return await self._call(_batch_call(items))


# The API methods say what EvictdClient's say (the tests check that the
# signatures are the same).
for _name in ("health", "metrics", "create", "step", "commit", "truncate",
              "fork", "evict", "adopt", "get", "delete", "batch"):
    getattr(AsyncEvictdClient, _name).__doc__ = (
        "Coroutine of :meth:`evictd_client.EvictdClient.%s`.\n\n    %s"
        % (_name, (getattr(EvictdClient, _name).__doc__ or "").strip()))
del _name
