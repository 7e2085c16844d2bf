"""A Python client for evictd, the KV-cache eviction bookkeeping daemon.

Standard library only (Python 3.9+). One :class:`EvictdClient` holds one
keep-alive HTTP connection (TCP or a unix socket) and is meant for one thread.

Retries. A keep-alive connection may be closed by the daemon while it sits
idle (``--conn-timeout``) or by anything in between. The client therefore:

* checks, before reusing a connection, whether the peer has closed it, and
  opens a new one if so (this covers the common idle-timeout case for every
  request);
* retries once, on a new connection, a request whose sending failed (the
  daemon cannot have received all of it, so it cannot have applied it);
* retries once a request that was sent on a reused connection but got no
  answer, when repeating it is safe: GET, PUT (an identical create answers
  200 with the same view), DELETE, step requests, and batches that name
  each session at most once.

Step requests are safe to repeat because the daemon answers an exact retry
of a session's last applied step (the same positions list) with the original
response plus ``"replayed": true`` and changes nothing, even if the first
attempt had in fact been applied. :attr:`StepResult.replayed` tells you that
this happened; the victims and slots are those of the original answer. A
batch naming a session twice is not retried: only a session's last step is
replayed, so the earlier item would come back as ``stale_position``.

Evict requests are never retried once sent: a second evict to the same
budget evicts nothing and the first answer's victims would be lost, so the
client raises :class:`ConnectionFailed` and the caller must read the session
(:meth:`EvictdClient.get`) to learn what it holds. Likewise a DELETE retried
after a lost answer may meet ``unknown_session`` although it was the first
attempt that deleted the session; ``delete(..., missing_ok=True)`` accepts
that. Timeouts are never retried (the request may still be running); a step
that timed out can simply be sent again with the same positions.
"""

import http.client
import json
import select
import socket
import urllib.parse
from dataclasses import dataclass, field
from typing import (Any, Dict, Iterable, List, Mapping, Optional, Sequence,
                    Tuple, Type, Union)

__all__ = [
    "EvictdClient", "StepResult", "EvictResult", "SessionView", "StepBatch",
    "group_steps", "UnixHTTPConnection", "error_from_body",
    "EvictdError", "ConnectionFailed", "RequestTimeout", "ProtocolError",
    "InvalidJSON", "InvalidField", "InvalidSessionId", "InvalidBudget",
    "InvalidSinks", "InvalidPosition", "TooManyPositions", "TooManySteps",
    "Unauthorized", "UnknownSession", "NotFound", "MethodNotAllowed",
    "SessionExists", "StalePosition", "BodyTooLarge", "SessionLimit",
    "OutOfMemory", "JournalFailed",
]

__version__ = "0.1.0"

DEFAULT_URL = "http://127.0.0.1:8090"

# ---- errors -----------------------------------------------------------------


class EvictdError(Exception):
    """Base of every error this client raises (or returns in a batch).

    Attributes:
        status: the HTTP status (for a batch item, the item's status), or
            None when no answer arrived.
        code: the API's snake_case error code, e.g. ``"stale_position"``;
            client-side failures use ``"connection_failed"``, ``"timeout"``
            and ``"invalid_response"``.
        message: the daemon's sentence (or the client's).
        error: the whole error object as the daemon sent it (may be empty).
    """

    code: Optional[str] = None

    def __init__(self, message: str, status: Optional[int] = None,
                 code: Optional[str] = None,
                 error: Optional[Mapping[str, Any]] = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        if code is not None:
            self.code = code
        self.error: Dict[str, Any] = dict(error or {})

    def __str__(self) -> str:
        where = "" if self.status is None else " (HTTP %d)" % self.status
        return "%s%s: %s" % (self.code, where, self.message)

    def __repr__(self) -> str:
        return "%s(%r, status=%r, code=%r)" % (
            type(self).__name__, self.message, self.status, self.code)


class ConnectionFailed(EvictdError):
    """The request could not be sent or its answer did not arrive."""
    code = "connection_failed"


class RequestTimeout(ConnectionFailed):
    """No answer within the client's timeout (the request may have run)."""
    code = "timeout"


class ProtocolError(EvictdError):
    """The answer is not what the API promises (e.g. not JSON)."""
    code = "invalid_response"


class InvalidJSON(EvictdError):
    """400: the body is not a JSON object, has duplicate keys or nests too
    deeply."""
    code = "invalid_json"


class InvalidField(EvictdError):
    """400: an unknown field, a field of the wrong type, or a required one
    missing."""
    code = "invalid_field"


class InvalidSessionId(EvictdError):
    """400: session ids are 1-128 bytes of ``[A-Za-z0-9._~-]``."""
    code = "invalid_session_id"


class InvalidBudget(EvictdError):
    """400: the budget is out of range (or, for evict, not above sinks)."""
    code = "invalid_budget"


class InvalidSinks(EvictdError):
    """400: sinks must be from 0 to budget - 1."""
    code = "invalid_sinks"


class InvalidPosition(EvictdError):
    """400: a position is not in 0..4294967295, the list is empty or does not
    strictly increase."""
    code = "invalid_position"


class TooManyPositions(EvictdError):
    """400: more positions in one request than ``--max-positions``."""
    code = "too_many_positions"


class TooManySteps(EvictdError):
    """400: more batch items than ``--max-batch``."""
    code = "too_many_steps"


class Unauthorized(EvictdError):
    """401: a valid bearer token is required (daemon run with
    --token-file; give the client ``token`` or ``token_file``)."""
    code = "unauthorized"

    @property
    def www_authenticate(self) -> Optional[str]:
        """The WWW-Authenticate header of the answer."""
        return self.error.get("www_authenticate")


class UnknownSession(EvictdError):
    """404: no session has this id."""
    code = "unknown_session"


class NotFound(EvictdError):
    """404: no such endpoint."""
    code = "not_found"


class MethodNotAllowed(EvictdError):
    """405: wrong method for the path; ``allow`` lists the right ones."""
    code = "method_not_allowed"

    @property
    def allow(self) -> Optional[str]:
        """The Allow header of the answer, e.g. ``"GET, HEAD"``."""
        return self.error.get("allow")


class SessionExists(EvictdError):
    """409: the session exists with another budget or sinks."""
    code = "session_exists"


class StalePosition(EvictdError):
    """409: the first position is not above the session's newest, and the
    request is not a retry of the last step. ``newest`` is that position."""
    code = "stale_position"

    @property
    def newest(self) -> Optional[int]:
        """The newest position the session holds."""
        return self.error.get("newest")


class BodyTooLarge(EvictdError):
    """413: the body is over ``--max-body``."""
    code = "body_too_large"


class SessionLimit(EvictdError):
    """503: the daemon holds ``--max-sessions`` sessions already."""
    code = "session_limit"


class OutOfMemory(EvictdError):
    """503: the daemon could not allocate memory for the request."""
    code = "out_of_memory"


class JournalFailed(EvictdError):
    """503: with --state-dir, a journal write failed; the daemon refuses
    changes until it is restarted."""
    code = "journal_failed"


_ERRORS: Dict[str, Type[EvictdError]] = {
    cls.code: cls for cls in (
        InvalidJSON, InvalidField, InvalidSessionId, InvalidBudget,
        InvalidSinks, InvalidPosition, TooManyPositions, TooManySteps,
        Unauthorized, UnknownSession, NotFound, MethodNotAllowed,
        SessionExists, StalePosition, BodyTooLarge, SessionLimit,
        OutOfMemory, JournalFailed)
}


def error_from_body(status: Optional[int], body: Any) -> EvictdError:
    """Turns an error answer ``{"error": {"code", "message", ...}}`` into the
    matching :class:`EvictdError` subclass (the base class for a code this
    client does not know, :class:`ProtocolError` when the body has no error
    object). A ``status`` inside the error object (batch items) wins."""
    err = body.get("error") if isinstance(body, dict) else None
    if not isinstance(err, dict) or not isinstance(err.get("code"), str):
        return ProtocolError("The daemon answered %s without an error object."
                             % status, status=status)
    code = err["code"]
    message = err.get("message")
    if not isinstance(message, str):
        message = code
    item_status = err.get("status")
    if isinstance(item_status, int) and not isinstance(item_status, bool):
        status = item_status
    cls = _ERRORS.get(code, EvictdError)
    return cls(message, status=status, code=code, error=err)


# ---- results ----------------------------------------------------------------


@dataclass
class StepResult:
    """The answer to one step request (or one batch item).

    ``victims`` are the positions evicted, oldest first (a position stepped
    and evicted by the same request appears too); ``slots`` has one cache
    slot per stepped position, in request order; ``positions`` are the
    positions sent, as the client knows them.
    """
    victims: List[int]
    slots: List[int]
    size: int
    newest: int
    replayed: bool = False
    positions: List[int] = field(default_factory=list)

    @property
    def placements(self) -> List[Tuple[int, int]]:
        """``(position, slot)`` pairs: where to write each new entry."""
        return list(zip(self.positions, self.slots))

    @classmethod
    def from_json(cls, obj: Any, positions: Sequence[int] = ()
                  ) -> "StepResult":
        """Builds a result from the daemon's JSON object (ProtocolError when
        a field is missing or of the wrong type)."""
        try:
            victims, slots = obj["victims"], obj["slots"]
            size, newest = obj["size"], obj["newest"]
            replayed = obj.get("replayed", False)
            if not (isinstance(victims, list) and isinstance(slots, list)
                    and isinstance(size, int) and isinstance(newest, int)
                    and isinstance(replayed, bool)):
                raise TypeError
        except (KeyError, TypeError, AttributeError):
            raise ProtocolError("Not a step result: %.200r" % (obj,)) from None
        return cls(list(victims), list(slots), size, newest, replayed,
                   list(positions))


@dataclass
class EvictResult:
    """The answer to an evict request: the victims (oldest first) and the
    size left."""
    victims: List[int]
    size: int


@dataclass
class SessionView:
    """A session as GET (and PUT) show it: ``kept`` ascending, with their
    ``slots``. ``created`` is True only for a PUT that created the session."""
    id: str
    budget: int
    sinks: int
    size: int
    newest: int
    kept: List[int]
    slots: List[int]
    created: bool = False


def _view(obj: Any, created: bool = False) -> SessionView:
    try:
        return SessionView(obj["id"], obj["budget"], obj["sinks"],
                           obj["size"], obj["newest"], list(obj["kept"]),
                           list(obj["slots"]), created)
    except (KeyError, TypeError):
        raise ProtocolError("Not a session view: %.200r" % (obj,)) from None


BatchOutcome = Union[StepResult, EvictdError]


# ---- batch items ------------------------------------------------------------


def _positions_of(pos: Any, positions: Any) -> Tuple[str, Any]:
    """Chooses the wire field for a step: ("pos", P) or ("positions", [...]).
    `pos` may itself be a sequence of positions."""
    if pos is not None and positions is not None:
        raise ValueError("give pos or positions, not both")
    if positions is None:
        if pos is None:
            raise ValueError("give pos or positions")
        if isinstance(pos, (str, bytes)) or not isinstance(pos, Iterable):
            return "pos", pos
        positions = pos
    return "positions", list(positions)


def step_item(session: str, pos: Union[int, Sequence[int], None] = None, *,
              positions: Optional[Sequence[int]] = None,
              attention: Any = None, budget: Optional[int] = None,
              sinks: Optional[int] = None) -> Dict[str, Any]:
    """One batch item, as :meth:`EvictdClient.batch` sends it."""
    key, value = _positions_of(pos, positions)
    item: Dict[str, Any] = {"session": session, key: value}
    if attention is not None:
        item["attention"] = attention
    if budget is not None:
        item["budget"] = budget
    if sinks is not None:
        item["sinks"] = sinks
    return item


class StepBatch:
    """Groups steps into batch items, one item per session.

    ``add`` may be called several times for the same session (e.g. prompt
    tokens and then a decoded token); its positions are appended to that
    session's item, so the batch names each session once. That keeps a
    bad position from failing more than its own session, makes the whole
    batch safe to retry (see the module docstring), and keeps the items in
    the order their sessions were first added. Results come back in that
    order: :meth:`results_by_session` pairs them up.
    """

    def __init__(self) -> None:
        self._items: Dict[str, Dict[str, Any]] = {}

    def add(self, session: str, pos: Union[int, Sequence[int], None] = None,
            *, positions: Optional[Sequence[int]] = None,
            attention: Any = None, budget: Optional[int] = None,
            sinks: Optional[int] = None) -> "StepBatch":
        """Adds positions for a session. budget/sinks (used only when the
        step creates the session) must agree with earlier adds; attention
        can be given once per session. Returns self."""
        key, value = _positions_of(pos, positions)
        new = value if key == "positions" else [value]
        item = self._items.get(session)
        if item is None:
            item = step_item(session, positions=new, attention=attention,
                             budget=budget, sinks=sinks)
            self._items[session] = item
            return self
        for name, v in (("budget", budget), ("sinks", sinks)):
            if v is not None and item.setdefault(name, v) != v:
                raise ValueError("conflicting %s for session %r"
                                 % (name, session))
        if attention is not None:
            if "attention" in item:
                raise ValueError("attention given twice for session %r"
                                 % (session,))
            item["attention"] = attention
        item["positions"].extend(new)
        return self

    def items(self) -> List[Dict[str, Any]]:
        """The batch items, in the order sessions were first added."""
        return list(self._items.values())

    def sessions(self) -> List[str]:
        """The sessions, in item order."""
        return list(self._items)

    def results_by_session(self, results: Sequence[BatchOutcome]
                           ) -> Dict[str, BatchOutcome]:
        """Maps each session to its result from :meth:`EvictdClient.batch`."""
        return dict(zip(self._items, results))

    def __len__(self) -> int:
        return len(self._items)

    def clear(self) -> None:
        """Empties the batch for the next iteration."""
        self._items.clear()


def group_steps(steps: Iterable[Tuple[str, int]]) -> List[Dict[str, Any]]:
    """Groups ``(session, position)`` pairs into batch items, one per session
    (positions kept in the order given)."""
    batch = StepBatch()
    for session, pos in steps:
        batch.add(session, positions=[pos])
    return batch.items()


# ---- connections ------------------------------------------------------------


class _TCPConnection(http.client.HTTPConnection):
    """HTTPConnection with its own connect timeout and TCP_NODELAY."""

    def __init__(self, host: str, port: int, timeout: Optional[float],
                 connect_timeout: Optional[float]) -> None:
        super().__init__(host, port, timeout=timeout)
        self.connect_timeout = connect_timeout

    def connect(self) -> None:
        self.sock = socket.create_connection((self.host, self.port),
                                             self.connect_timeout)
        self.sock.settimeout(self.timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class UnixHTTPConnection(http.client.HTTPConnection):
    """HTTPConnection over a unix stream socket (``unix:/path`` addresses).
    The Host header says ``localhost``."""

    def __init__(self, path: str, timeout: Optional[float] = None,
                 connect_timeout: Optional[float] = None) -> None:
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path
        self.connect_timeout = connect_timeout

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(self.connect_timeout)
            sock.connect(self.unix_path)
            sock.settimeout(self.timeout)
        except BaseException:
            sock.close()
            raise
        self.sock = sock


def _peer_closed(sock: socket.socket) -> bool:
    """True when an idle keep-alive socket is readable: the peer closed it
    (or sent something unasked), so it must not carry another request."""
    try:
        if hasattr(select, "poll"):
            p = select.poll()
            p.register(sock, select.POLLIN)
            return bool(p.poll(0))
        readable, _, _ = select.select([sock], [], [], 0)
        return bool(readable)
    except (OSError, ValueError):
        return True


# Errors meaning "the connection died under this request".
_DROPPED = (ConnectionError, http.client.BadStatusLine,
            http.client.IncompleteRead)
_IDEMPOTENT = frozenset(("GET", "HEAD", "PUT", "DELETE"))


# ---- the client -------------------------------------------------------------


class EvictdClient:
    """A client for one evictd daemon over one keep-alive connection.

    Args:
        url: ``http://host:port`` (``http://[v6]:port`` too; a path prefix
            is kept, for a proxy), ``host:port``, or ``unix:/path``.
        timeout: seconds to wait for socket I/O of a request (None: forever).
        connect_timeout: seconds to wait for a connection (default timeout).
        token: a bearer token, sent as ``Authorization: Bearer <token>``.
        token_file: a file whose first line is the token (used when token
            is None).

    Not thread-safe: give each thread its own client. Use as a context
    manager or call :meth:`close`.

    Every method raises an :class:`EvictdError` subclass: the one of the
    daemon's error code, :class:`ConnectionFailed` / :class:`RequestTimeout`
    for transport failures, :class:`ProtocolError` for an unexpected answer.
    """

    def __init__(self, url: str = DEFAULT_URL, *,
                 timeout: Optional[float] = 10.0,
                 connect_timeout: Optional[float] = None,
                 token: Optional[str] = None,
                 token_file: Optional[str] = None) -> None:
        self.url = url
        self.timeout = timeout
        self.connect_timeout = (timeout if connect_timeout is None
                                else connect_timeout)
        if token is None and token_file is not None:
            with open(token_file, encoding="utf-8") as f:
                token = f.readline().strip()
        self._headers = {"Accept": "application/json",
                         "User-Agent": "evictd-client-python/" + __version__}
        if token:
            self._headers["Authorization"] = "Bearer " + token
        self._prefix = ""
        self._unix: Optional[str] = None
        if url.startswith("unix:"):
            self._unix = url[len("unix:"):]
            if not self._unix:
                raise ValueError("unix: address without a path")
        else:
            parsed = urllib.parse.urlsplit(url if "//" in url
                                           else "http://" + url)
            if parsed.scheme != "http" or not parsed.hostname:
                raise ValueError("unsupported evictd address %r" % url)
            self._host = parsed.hostname
            self._port = parsed.port or 80
            self._prefix = parsed.path.rstrip("/")
        self._conn: Optional[http.client.HTTPConnection] = None
        # Counters, for logs and tests.
        self.connections_opened = 0
        self.retries = 0
        # Whether to look for a peer-closed socket before reusing it (only
        # tests turn this off, to exercise the retry path).
        self._probe_idle = True

    # -- plumbing --

    def __enter__(self) -> "EvictdClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Closes the connection (the next request opens a new one)."""
        if self._conn is not None:
            self._conn.close()

    def _connection(self) -> http.client.HTTPConnection:
        if self._conn is None:
            if self._unix is not None:
                self._conn = UnixHTTPConnection(self._unix, self.timeout,
                                                self.connect_timeout)
            else:
                self._conn = _TCPConnection(self._host, self._port,
                                            self.timeout,
                                            self.connect_timeout)
        return self._conn

    def _exchange(self, method: str, path: str, data: Optional[bytes],
                  headers: Dict[str, str], retry: bool
                  ) -> Tuple[http.client.HTTPResponse, bytes]:
        """Sends one request and reads the whole answer, reconnecting once
        as the module docstring describes."""
        for attempt in (0, 1):
            conn = self._connection()
            reused = conn.sock is not None
            if reused and self._probe_idle and _peer_closed(conn.sock):
                conn.close()
                reused = False
            if not reused:
                self.connections_opened += 1
            try:
                try:
                    conn.request(method, path, data, headers)
                except socket.timeout:
                    raise
                except OSError as send_error:
                    # The daemon may have answered before reading the whole
                    # body (413) and closed: read that answer if it is there.
                    resp = None
                    if conn.sock is not None:
                        try:
                            resp = conn.getresponse()
                        except (OSError, http.client.HTTPException):
                            resp = None
                    if resp is None:
                        conn.close()
                        if attempt == 0 and reused:
                            self.retries += 1
                            continue  # never delivered whole: safe to resend
                        raise ConnectionFailed(
                            "Could not send %s %s to %s: %s"
                            % (method, path, self.url, send_error)
                        ) from send_error
                else:
                    resp = conn.getresponse()
                payload = resp.read()
            except socket.timeout as e:
                conn.close()
                raise RequestTimeout("No answer to %s %s from %s within %ss."
                                     % (method, path, self.url, self.timeout)
                                     ) from e
            except _DROPPED as e:
                conn.close()
                if attempt == 0 and reused and retry:
                    self.retries += 1
                    continue
                raise ConnectionFailed("The connection to %s dropped during "
                                       "%s %s: %r" % (self.url, method, path,
                                                      e)) from e
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                raise ConnectionFailed("%s %s to %s failed: %r"
                                       % (method, path, self.url, e)) from e
            if resp.will_close:
                conn.close()
            return resp, payload
        raise AssertionError("unreachable")

    def request(self, method: str, path: str, body: Any = None, *,
                retry: Optional[bool] = None, raw: bool = False
                ) -> Tuple[int, Any]:
        """Sends one request and returns ``(status, parsed JSON or None)``
        (with ``raw``, the body as bytes instead of parsed).

        ``body`` is JSON-encoded unless it is bytes (sent as is) or None (no
        body). ``path`` is relative to the client's URL. ``retry`` says
        whether a sent request may be repeated when the connection drops
        (default: for GET, HEAD, PUT and DELETE). Error answers raise.
        """
        if retry is None:
            retry = method in _IDEMPOTENT
        headers = dict(self._headers)
        if body is None:
            data = None
        else:
            data = (body if isinstance(body, bytes)
                    else json.dumps(body, separators=(",", ":")).encode())
            headers["Content-Type"] = "application/json"
        resp, payload = self._exchange(method, self._prefix + path, data,
                                       headers, retry)
        parsed: Any = None
        if raw and resp.status < 400:
            return resp.status, payload
        if payload and method != "HEAD":
            try:
                parsed = json.loads(payload)
            except ValueError:
                if resp.status < 400:
                    raise ProtocolError("The answer to %s %s is not JSON: "
                                        "%.200r" % (method, path, payload),
                                        status=resp.status) from None
                parsed = None
        if resp.status >= 400:
            err = error_from_body(resp.status, parsed)
            if isinstance(err, ProtocolError):
                err.message = ("%s %s answered %d %s: %.200r"
                               % (method, path, resp.status, resp.reason,
                                  payload))
                err.args = (err.message,)
            for header in ("Allow", "WWW-Authenticate"):
                value = resp.getheader(header)
                if value is not None:
                    err.error.setdefault(header.lower().replace("-", "_"),
                                         value)
            raise err
        return resp.status, parsed

    @staticmethod
    def _session_path(session: str, suffix: str = "") -> str:
        if not isinstance(session, str):
            raise TypeError("session ids are str, not %s"
                            % type(session).__name__)
        # Ids never need escapes; escaping the rest lets the daemon answer
        # invalid_session_id instead of seeing another path.
        return "/session/" + urllib.parse.quote(session, safe="") + suffix

    # -- the API --

    def health(self) -> Dict[str, Any]:
        """GET /healthz: ``{"status": "ok"}`` when the daemon is up."""
        return self.request("GET", "/healthz")[1]

    def metrics(self) -> str:
        """GET /metrics: the Prometheus text exposition."""
        return self.request("GET", "/metrics", raw=True)[1].decode("utf-8")

    def create(self, session: str, budget: Optional[int] = None,
               sinks: Optional[int] = None) -> SessionView:
        """PUT /session/{id}: creates a session (defaults from the daemon's
        --budget/--sinks). An identical existing session is returned with
        ``created=False``; another config raises :class:`SessionExists`."""
        body: Dict[str, Any] = {}
        if budget is not None:
            body["budget"] = budget
        if sinks is not None:
            body["sinks"] = sinks
        status, obj = self.request("PUT", self._session_path(session), body)
        return _view(obj, created=status == 201)

    def step(self, session: str,
             pos: Union[int, Sequence[int], None] = None, *,
             positions: Optional[Sequence[int]] = None,
             attention: Any = None, budget: Optional[int] = None,
             sinks: Optional[int] = None) -> StepResult:
        """POST /session/{id}/step: steps one position (``pos``) or several
        (``positions``, or a sequence as ``pos``), evicting to the budget
        after each. Creates the session unless the daemon runs with
        --no-autocreate (budget/sinks are used only then). ``attention`` is
        sent as is (the daemon ignores it today).

        Retried once on a dropped connection: an exact retry is answered with
        the original response and ``replayed=True``.
        """
        key, value = _positions_of(pos, positions)
        body: Dict[str, Any] = {key: value}
        if attention is not None:
            body["attention"] = attention
        if budget is not None:
            body["budget"] = budget
        if sinks is not None:
            body["sinks"] = sinks
        _, obj = self.request("POST", self._session_path(session, "/step"),
                              body, retry=True)
        return StepResult.from_json(obj, value if key == "positions"
                                    else [value])

    def evict(self, session: str, budget: Optional[int] = None
              ) -> EvictResult:
        """POST /session/{id}/evict: evicts until at most ``budget`` (default
        the session's own) positions remain. Not retried once sent."""
        body = {} if budget is None else {"budget": budget}
        _, obj = self.request("POST", self._session_path(session, "/evict"),
                              body, retry=False)
        try:
            return EvictResult(list(obj["victims"]), obj["size"])
        except (KeyError, TypeError):
            raise ProtocolError("Not an evict result: %.200r"
                                % (obj,)) from None

    def get(self, session: str) -> SessionView:
        """GET /session/{id}: the positions kept and their slots."""
        return _view(self.request("GET", self._session_path(session))[1])

    def delete(self, session: str, missing_ok: bool = False) -> bool:
        """DELETE /session/{id}. Returns True when deleted; with
        ``missing_ok`` an unknown session returns False instead of raising
        :class:`UnknownSession`."""
        try:
            self.request("DELETE", self._session_path(session))
        except UnknownSession:
            if missing_ok:
                return False
            raise
        return True

    def batch(self, items: Union[StepBatch, Iterable[Mapping[str, Any]]]
              ) -> List[BatchOutcome]:
        """POST /step: many step requests in one. ``items`` are dicts with
        ``session``, ``pos``/``positions`` and optionally ``attention``,
        ``budget``, ``sinks`` (see :func:`step_item`), or a
        :class:`StepBatch`. Returns one outcome per item, in order: a
        :class:`StepResult`, or the :class:`EvictdError` of that item (not
        raised). Errors of the request as a whole (e.g.
        :class:`TooManySteps`, :class:`BodyTooLarge`) raise.

        Retried once on a dropped connection when no session appears twice.
        """
        if isinstance(items, StepBatch):
            items = items.items()
        items = list(items)
        sessions = [it.get("session") for it in items]
        retry = len(set(map(repr, sessions))) == len(sessions)
        _, obj = self.request("POST", "/step", {"steps": items}, retry=retry)
        results = obj.get("results") if isinstance(obj, dict) else None
        if not isinstance(results, list) or len(results) != len(items):
            raise ProtocolError("Not a batch answer for %d items: %.200r"
                                % (len(items), obj))
        out: List[BatchOutcome] = []
        for item, res in zip(items, results):
            if isinstance(res, dict) and "error" in res:
                out.append(error_from_body(None, res))
            else:
                sent = item.get("positions")
                if sent is None:
                    sent = [item.get("pos")]
                out.append(StepResult.from_json(res, sent))
        return out
