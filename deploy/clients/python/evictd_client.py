"""A Python client for evictd, the KV-cache eviction bookkeeping daemon.

Standard library only (Python 3.9+). One :class:`EvictdClient` holds one
keep-alive HTTP connection (TCP or a unix socket) and is meant for one thread.
``evictd_aio.AsyncEvictdClient`` (next to this file) is the asyncio twin: the
same methods as coroutines, the same results and errors, a small pool of
connections shared by concurrent coroutines.

Engine workflows. A session may have a ``lookahead`` L (its ring holds
``budget + L`` slots: a frontend's KV buffer needs that many) and a
``page_size`` B (answers then say which logical pages ``p // B`` became used,
``pages_new``, or unused, ``pages_freed``, and which the request both wrote
and emptied, ``pages_transient``: held neither before nor after it, as when a
step of more positions than the budget evicts some of its own; an engine
allocates ``pages_new`` and ``pages_transient`` before the request's pass and
frees ``pages_freed`` and ``pages_transient`` after it). A step may be
``tentative`` (speculative drafts: appended, nothing evicted, at most L
pending) and may carry ``commit=P`` (accept the pending drafts up to P, drop
the others, evict to the budget: before the step's own positions).
:meth:`EvictdClient.commit`, :meth:`EvictdClient.truncate` and
:meth:`EvictdClient.fork` are the other new operations; missing fields of an
answer read as the API's defaults (lookahead 1, page size 0, empty lists:
``pages_transient`` is empty from a daemon older than it).

Retries. A keep-alive connection may be closed by the daemon while it sits
idle (``--conn-timeout``) or by anything in between. The client therefore:

* checks, before reusing a connection, whether the peer has closed it, and
  opens a new one if so (this covers the common idle-timeout case for every
  request);
* retries once, on a new connection, a request whose sending failed (the
  daemon cannot have received all of it, so it cannot have applied it);
* retries once a request that was sent on a reused connection but got no
  answer, when repeating it is safe: GET, PUT (an identical create answers
  200 with the same view), DELETE, step, commit and truncate requests, forks
  (a child identical to its parent answers 200 with its view), and batches
  that name each session at most once.

Step, commit and truncate requests are safe to repeat because the daemon
answers an exact retry of a session's last applied step, commit or truncate
(the same positions, tentative flag and commit; the same newest; the same
from) with the original response plus ``"replayed": true`` and changes
nothing, even if the first attempt had in fact been applied.
:attr:`StepResult.replayed` (and the same attribute of
:class:`CommitResult` and :class:`TruncateResult`) tells you that this
happened; the other fields are those of the original answer. A batch naming a
session twice is not retried: only a session's last step is replayed, so the
earlier item would come back as ``stale_position``. A retried fork whose
first attempt created the child answers with ``created=False``, as a retried
create does.

Re-homing. A session lives in the instance that holds it, while the engine
holds the cache it describes; an instance can lose the session (a restart
without ``--state-dir``, a pool that changed size) or hold an old copy of it
(a pool that changed size and back). Every change (:meth:`EvictdClient.step`,
a batch item, :meth:`~EvictdClient.commit`, :meth:`~EvictdClient.truncate`,
:meth:`~EvictdClient.evict`, :meth:`~EvictdClient.fork`) takes
``expect_newest=N``, the newest position the engine believes the session
has before the request: an instance whose session differs refuses the change
with :class:`Diverged` (carrying its ``newest`` and ``view``) and changes
nothing, so no change is answered from a window other than the engine's. A
missing session expected past 0 is :class:`UnknownSession`, even where a step
would create one. Either way, :meth:`EvictdClient.adopt` the state the engine
holds (``replace=True`` after a divergence) and resend::

    try:
        r = ev.step(sid, pos, expect_newest=held.newest)
    except (UnknownSession, Diverged) as e:
        ev.adopt(sid, held.kept, held.newest, slots=held.slots,
                 budget=held.budget, sinks=held.sinks,
                 replace=isinstance(e, Diverged))
        r = ev.step(sid, pos, expect_newest=held.newest)

An adoption is safe to resend (the same state again answers 200 and changes
nothing), so it is retried like a step. A resend of a change carries the
newest before it, which no longer matches after the change was applied: the
daemon answers a resend of the session's last request from its record
first, whatever it expects, so the retries above stay safe with it.

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
import ssl
import urllib.parse
from dataclasses import dataclass, field
from typing import (Any, Callable, Dict, Iterable, List, Mapping, NamedTuple,
                    Optional, Sequence, Tuple, Type, Union)

__all__ = [
    "EvictdClient", "StepResult", "CommitResult", "TruncateResult",
    "EvictResult", "SessionView", "StepBatch", "group_steps", "step_item",
    "UnixHTTPConnection", "error_from_body",
    "EvictdError", "ConnectionFailed", "RequestTimeout", "ProtocolError",
    "InvalidJSON", "InvalidField", "InvalidSessionId", "InvalidBudget",
    "InvalidSinks", "InvalidLookahead", "InvalidPageSize", "InvalidPosition",
    "TooManyPositions", "TooManySteps", "Unauthorized", "UnknownSession",
    "NotFound", "MethodNotAllowed", "SessionExists", "StalePosition",
    "TentativePending", "ReplayUnavailable", "BodyTooLarge", "SessionLimit",
    "OutOfMemory",
    "JournalFailed", "InvalidState", "Diverged",
]

__version__ = "0.2.0"

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


class InvalidLookahead(EvictdError):
    """400: lookahead must be from 1 to the daemon's --max-lookahead."""
    code = "invalid_lookahead"


class InvalidPageSize(EvictdError):
    """400: page_size must be from 0 (pages off) to 65536."""
    code = "invalid_page_size"


class InvalidPosition(EvictdError):
    """400: a position is not in 0..4294967295, the list is empty or does not
    strictly increase; or a commit (``newest``, a step's ``commit``) is not a
    position or is below the committed newest; or a truncate's ``from`` is
    below 1."""
    code = "invalid_position"


class TooManyPositions(EvictdError):
    """400: more positions in one request than ``--max-positions``, or more
    tentative positions pending than the session's lookahead."""
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
    """409: the session exists with another budget, sinks, lookahead or page
    size (create), or with another configuration or state (fork)."""
    code = "session_exists"


class StalePosition(EvictdError):
    """409: the first position is not above the session's newest (as the
    request's own commit leaves it), and the request is not a retry of the
    last step. ``newest`` is the session's newest position."""
    code = "stale_position"

    @property
    def newest(self) -> Optional[int]:
        """The newest position the session holds."""
        return self.error.get("newest")


class TentativePending(EvictdError):
    """409: tentative positions (drafts) are pending: commit them (a step
    with ``commit``, or :meth:`EvictdClient.commit`) before a plain step or
    an evict."""
    code = "tentative_pending"


class ReplayUnavailable(EvictdError):
    """409: the request resends the session's last one, but its answer is
    no longer kept (it was not made of runs and the daemon's --replay-pool
    let it go); the change it made stands: GET the session's view."""
    code = "replay_unavailable"


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


class InvalidState(EvictdError):
    """400: the state to adopt is not one a session can be in; the message
    names the rule it breaks (positions not strictly ascending, more than
    the budget, position 0 missing under sinks, a newest below a held
    position, slots the ring cannot have, pages that are not those of the
    positions)."""
    code = "invalid_state"


class Diverged(EvictdError):
    """409: the change carried ``expect_newest``, and the session's newest
    is another: its window is not the one the engine holds. Nothing changed.
    ``newest`` and ``view`` are the daemon's. Adopt the engine's state
    (``replace=True``) and resend (see the module docstring)."""
    code = "diverged"

    @property
    def newest(self) -> Optional[int]:
        """The newest position the daemon's session has."""
        return self.error.get("newest")

    @property
    def view(self) -> Optional["SessionView"]:
        """The daemon's view of the session (None if the answer had none)."""
        v = self.error.get("view")
        return _view(v) if isinstance(v, dict) else None


_ERRORS: Dict[str, Type[EvictdError]] = {
    cls.code: cls for cls in (
        InvalidJSON, InvalidField, InvalidSessionId, InvalidBudget,
        InvalidSinks, InvalidLookahead, InvalidPageSize, InvalidPosition,
        TooManyPositions, TooManySteps, Unauthorized, UnknownSession,
        NotFound, MethodNotAllowed, SessionExists, StalePosition,
        TentativePending, ReplayUnavailable, BodyTooLarge, SessionLimit,
        OutOfMemory,
        JournalFailed, InvalidState, Diverged)
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

_REQUIRED: Any = object()


def _field(obj: Any, key: str, kind: type, what: str,
           default: Any = _REQUIRED) -> Any:
    """obj[key], checked to be of ``kind`` (int: not a bool; list: copied);
    a missing key is the default when there is one. ProtocolError
    otherwise."""
    try:
        value = obj[key] if default is _REQUIRED else obj.get(key, default)
    except (KeyError, TypeError, AttributeError):
        raise ProtocolError("Not %s (no %r): %.200r"
                            % (what, key, obj)) from None
    if kind is list:
        ok = isinstance(value, list)
        value = list(value) if ok else value
    elif kind is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    else:
        ok = isinstance(value, kind)
    if not ok:
        raise ProtocolError("Not %s (%r is %.50r): %.200r"
                            % (what, key, value, obj))
    return value


def _pages(obj: Any, what: str) -> Tuple[List[int], List[int], List[int]]:
    """``pages_new``, ``pages_freed`` and ``pages_transient`` (absent, i.e.
    empty, when the session's page size is 0, and ``pages_transient`` from a
    daemon older than it)."""
    return (_field(obj, "pages_new", list, what, []),
            _field(obj, "pages_freed", list, what, []),
            _field(obj, "pages_transient", list, what, []))


@dataclass
class StepResult:
    """The answer to one step request (or one batch item).

    ``victims`` are the positions evicted, oldest first (the commit's victims
    first, then those of each sub-step; a position stepped and evicted by the
    same request appears too); ``slots`` has one cache slot per stepped
    position, in request order (empty for a commit-only step); ``positions``
    are the positions sent, as the client knows them, and ``tentative`` and
    ``commit`` what the request asked. ``dropped`` lists the drafts the
    request's commit rejected, ascending (empty without a commit);
    ``pages_new`` / ``pages_freed`` the logical pages the request started /
    stopped using, ``pages_transient`` those it used only within itself
    (written and emptied: held neither before nor after it; allocate them
    for the request's pass with ``pages_new``, free them after it with
    ``pages_freed``); all three ascending, disjoint, and empty when the
    session's page size is 0. (``pages_transient`` comes last, after
    ``commit``, so that positional construction keeps its meaning.)
    """
    victims: List[int]
    slots: List[int]
    size: int
    newest: int
    replayed: bool = False
    positions: List[int] = field(default_factory=list)
    dropped: List[int] = field(default_factory=list)
    pages_new: List[int] = field(default_factory=list)
    pages_freed: List[int] = field(default_factory=list)
    tentative: bool = False
    commit: Optional[int] = None
    pages_transient: List[int] = field(default_factory=list)

    @property
    def placements(self) -> List[Tuple[int, int]]:
        """``(position, slot)`` pairs: where to write each new entry."""
        return list(zip(self.positions, self.slots))

    @property
    def freed(self) -> List[int]:
        """Every position whose slot this request freed: the victims and the
        dropped drafts, ascending."""
        return sorted(self.victims + self.dropped)

    @classmethod
    def from_json(cls, obj: Any, positions: Sequence[int] = (),
                  tentative: bool = False, commit: Optional[int] = None
                  ) -> "StepResult":
        """Builds a result from the daemon's JSON object (ProtocolError when
        a field is missing or of the wrong type)."""
        what = "a step result"
        pages_new, pages_freed, pages_transient = _pages(obj, what)
        return cls(_field(obj, "victims", list, what),
                   _field(obj, "slots", list, what),
                   _field(obj, "size", int, what),
                   _field(obj, "newest", int, what),
                   _field(obj, "replayed", bool, what, False),
                   list(positions),
                   _field(obj, "dropped", list, what, []),
                   pages_new, pages_freed, tentative, commit,
                   pages_transient)


@dataclass
class CommitResult:
    """The answer to :meth:`EvictdClient.commit`: ``dropped`` are the
    rejected drafts (ascending; their slots are free again), ``victims`` the
    positions then evicted to the budget (oldest first); the pages lists as
    :class:`StepResult`'s."""
    victims: List[int]
    dropped: List[int]
    size: int
    newest: int
    replayed: bool = False
    pages_new: List[int] = field(default_factory=list)
    pages_freed: List[int] = field(default_factory=list)
    pages_transient: List[int] = field(default_factory=list)

    @classmethod
    def from_json(cls, obj: Any) -> "CommitResult":
        what = "a commit result"
        return cls(_field(obj, "victims", list, what),
                   _field(obj, "dropped", list, what),
                   _field(obj, "size", int, what),
                   _field(obj, "newest", int, what),
                   _field(obj, "replayed", bool, what, False),
                   *_pages(obj, what))


@dataclass
class TruncateResult:
    """The answer to :meth:`EvictdClient.truncate`: the positions
    ``removed`` (ascending; their slots are free again), the size and newest
    left; the pages lists as :class:`StepResult`'s (a truncate adds no
    positions: ``pages_new`` and ``pages_transient`` stay empty)."""
    removed: List[int]
    size: int
    newest: int
    replayed: bool = False
    pages_new: List[int] = field(default_factory=list)
    pages_freed: List[int] = field(default_factory=list)
    pages_transient: List[int] = field(default_factory=list)

    @classmethod
    def from_json(cls, obj: Any) -> "TruncateResult":
        what = "a truncate result"
        return cls(_field(obj, "removed", list, what),
                   _field(obj, "size", int, what),
                   _field(obj, "newest", int, what),
                   _field(obj, "replayed", bool, what, False),
                   *_pages(obj, what))


@dataclass
class EvictResult:
    """The answer to an evict request: the victims (oldest first) and the
    size left (and the pages, when the session has a page size:
    ``pages_freed``; ``pages_new`` and ``pages_transient`` are always
    empty)."""
    victims: List[int]
    size: int
    pages_new: List[int] = field(default_factory=list)
    pages_freed: List[int] = field(default_factory=list)
    pages_transient: List[int] = field(default_factory=list)

    @classmethod
    def from_json(cls, obj: Any) -> "EvictResult":
        what = "an evict result"
        return cls(_field(obj, "victims", list, what),
                   _field(obj, "size", int, what), *_pages(obj, what))


@dataclass
class SessionView:
    """A session as GET (and PUT and fork) show it: ``kept`` ascending, with
    their ``slots``; ``tentative`` the pending drafts (ascending, also in
    ``kept``), ``pages`` the logical pages in use (empty when the page size
    is 0). ``created`` is True only for a PUT or fork that created the
    session."""
    id: str
    budget: int
    sinks: int
    size: int
    newest: int
    kept: List[int]
    slots: List[int]
    created: bool = False
    lookahead: int = 1
    page_size: int = 0
    tentative: List[int] = field(default_factory=list)
    pages: List[int] = field(default_factory=list)

    @property
    def ring_size(self) -> int:
        """The session's slots, ``budget + lookahead``: slot indices run
        from 0 to ring_size - 1, so a KV buffer of that many entries holds
        everything the daemon places."""
        return self.budget + self.lookahead


def _view(obj: Any, created: bool = False) -> SessionView:
    what = "a session view"
    sid = _field(obj, "id", str, what)
    return SessionView(sid, _field(obj, "budget", int, what),
                       _field(obj, "sinks", int, what),
                       _field(obj, "size", int, what),
                       _field(obj, "newest", int, what),
                       _field(obj, "kept", list, what),
                       _field(obj, "slots", list, what), created,
                       _field(obj, "lookahead", int, what, 1),
                       _field(obj, "page_size", int, what, 0),
                       _field(obj, "tentative", list, what, []),
                       _field(obj, "pages", list, what, []))


BatchOutcome = Union[StepResult, EvictdError]


# ---- batch items ------------------------------------------------------------


def _positions_of(pos: Any, positions: Any, commit: Any = None
                  ) -> Tuple[Optional[str], Any]:
    """Chooses the wire field for a step: ("pos", P) or ("positions", [...]),
    or (None, None) for a commit-only step (neither given, ``commit`` is).
    `pos` may itself be a sequence of positions."""
    if pos is not None and positions is not None:
        raise ValueError("give pos or positions, not both")
    if positions is None:
        if pos is None:
            if commit is not None:
                return None, None
            raise ValueError("give pos or positions (or commit)")
        if isinstance(pos, (str, bytes)) or not isinstance(pos, Iterable):
            return "pos", pos
        positions = pos
    return "positions", list(positions)


def _sent_positions(key: Optional[str], value: Any) -> List[int]:
    """The positions a step carries, as a list (what StepResult keeps)."""
    if key is None:
        return []
    return value if key == "positions" else [value]


_CREATION = ("budget", "sinks", "lookahead", "page_size")


def _step_body(key: Optional[str], value: Any, tentative: Any, commit: Any,
               attention: Any, creation: Mapping[str, Any],
               expect_newest: Optional[int] = None) -> Dict[str, Any]:
    """A step's JSON body (a batch item adds "session" first). ``tentative``
    goes on the wire only when it is not False/None (false is the default),
    and ``expect_newest`` only when given, so default requests stay byte for
    byte what they were."""
    body: Dict[str, Any] = {}
    if key is not None:
        body[key] = value
    if tentative is not None and tentative is not False:
        body["tentative"] = tentative
    if commit is not None:
        body["commit"] = commit
    if attention is not None:
        body["attention"] = attention
    for name in _CREATION:
        if creation.get(name) is not None:
            body[name] = creation[name]
    if expect_newest is not None:
        body["expect_newest"] = expect_newest
    return body


def _with_expect(body: Dict[str, Any], expect_newest: Optional[int]
                 ) -> Dict[str, Any]:
    """body with "expect_newest" when one is given."""
    if expect_newest is not None:
        body["expect_newest"] = expect_newest
    return body


def step_item(session: str, pos: Union[int, Sequence[int], None] = None, *,
              positions: Optional[Sequence[int]] = None,
              attention: Any = None, budget: Optional[int] = None,
              sinks: Optional[int] = None, lookahead: Optional[int] = None,
              page_size: Optional[int] = None, tentative: bool = False,
              commit: Optional[int] = None,
              expect_newest: Optional[int] = None) -> Dict[str, Any]:
    """One batch item, as :meth:`EvictdClient.batch` sends it. With
    ``commit`` and no positions it is a commit-only item; with
    ``expect_newest`` it is refused alone (:class:`Diverged`) when the
    session's newest is another."""
    key, value = _positions_of(pos, positions, commit)
    item: Dict[str, Any] = {"session": session}
    item.update(_step_body(key, value, tentative, commit, attention,
                           {"budget": budget, "sinks": sinks,
                            "lookahead": lookahead, "page_size": page_size},
                           expect_newest))
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

    One item is one step request: its ``commit`` (given once, or the same
    each time) applies before all its positions, whatever order the adds
    came in, and its positions are all tentative (drafts) or all not, so
    adds with positions must agree on ``tentative``. ``add(sid,
    commit=P)`` alone makes a commit-only item. ``expect_newest`` (the
    session's newest before the item) is given once, or the same each time.
    """

    def __init__(self) -> None:
        self._items: Dict[str, Dict[str, Any]] = {}

    def add(self, session: str, pos: Union[int, Sequence[int], None] = None,
            *, positions: Optional[Sequence[int]] = None,
            attention: Any = None, budget: Optional[int] = None,
            sinks: Optional[int] = None, lookahead: Optional[int] = None,
            page_size: Optional[int] = None, tentative: bool = False,
            commit: Optional[int] = None,
            expect_newest: Optional[int] = None) -> "StepBatch":
        """Adds positions (and/or a commit) for a session. budget, sinks,
        lookahead and page_size (used only when the step creates the
        session), commit and expect_newest must agree with earlier adds;
        attention can be given once per session; tentative must agree with
        earlier adds that had positions. Returns self."""
        key, value = _positions_of(pos, positions, commit)
        new = _sent_positions(key, value)
        item = self._items.get(session)
        if item is None:
            item = step_item(session, positions=new if key else None,
                             attention=attention, budget=budget, sinks=sinks,
                             lookahead=lookahead, page_size=page_size,
                             tentative=tentative if key else False,
                             commit=commit, expect_newest=expect_newest)
            self._items[session] = item
            return self
        for name, v in (("budget", budget), ("sinks", sinks),
                        ("lookahead", lookahead), ("page_size", page_size),
                        ("commit", commit), ("expect_newest", expect_newest)):
            if v is not None and item.setdefault(name, v) != v:
                raise ValueError("conflicting %s for session %r"
                                 % (name, session))
        if attention is not None:
            if "attention" in item:
                raise ValueError("attention given twice for session %r"
                                 % (session,))
            item["attention"] = attention
        if key is not None:
            held = item.get("positions")
            if held and bool(item.get("tentative")) != bool(tentative):
                raise ValueError("tentative and plain positions in one item "
                                 "for session %r" % (session,))
            if tentative:
                item["tentative"] = tentative
            item.setdefault("positions", []).extend(new)
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


# ---- requests and answers, shared with evictd_aio ---------------------------
#
# Each API method is a _Call built by one of the _*_call functions below: the
# request (method, path, JSON body, whether it may be repeated) and how to
# turn the answer into a result. EvictdClient._call and
# AsyncEvictdClient._call only carry it over their transports, so the two
# clients cannot disagree about the API.


class _Call(NamedTuple):
    method: str
    path: str
    body: Any
    retry: Optional[bool]
    parse: Callable[[int, Any], Any]
    raw: bool = False
    # Turns an error answer into a result (or raises it again).
    on_error: Optional[Callable[[EvictdError], Any]] = None

    @property
    def request(self) -> Tuple[str, str, Any]:
        """The method, path and body to send."""
        return self.method, self.path, self.body

    def failed(self, error: EvictdError) -> Any:
        """What the call gives when its request raised ``error``: the
        result ``on_error`` makes of it, or the error raised again."""
        if self.on_error is None:
            raise error
        return self.on_error(error)


def _session_path(session: str, suffix: str = "") -> str:
    if not isinstance(session, str):
        raise TypeError("session ids are str, not %s"
                        % type(session).__name__)
    # Ids never need escapes; escaping the rest lets the daemon answer
    # invalid_session_id instead of seeing another path.
    return "/session/" + urllib.parse.quote(session, safe="") + suffix


def _health_call() -> _Call:
    return _Call("GET", "/healthz", None, None, lambda status, obj: obj)


def _metrics_call() -> _Call:
    return _Call("GET", "/metrics", None, None,
                 lambda status, raw: raw.decode("utf-8"), raw=True)


def _create_call(session: str, budget: Optional[int], sinks: Optional[int],
                 lookahead: Optional[int], page_size: Optional[int]
                 ) -> _Call:
    body = {name: v for name, v in (("budget", budget), ("sinks", sinks),
                                    ("lookahead", lookahead),
                                    ("page_size", page_size))
            if v is not None}
    return _Call("PUT", _session_path(session), body, None,
                 lambda status, obj: _view(obj, created=status == 201))


def _step_call(session: str, pos: Any, positions: Any, attention: Any,
               creation: Mapping[str, Any], tentative: Any, commit: Any,
               expect_newest: Optional[int] = None) -> _Call:
    key, value = _positions_of(pos, positions, commit)
    body = _step_body(key, value, tentative, commit, attention, creation,
                      expect_newest)
    sent = _sent_positions(key, value)
    return _Call("POST", _session_path(session, "/step"), body, True,
                 lambda status, obj: StepResult.from_json(
                     obj, sent, tentative is True, commit))


def _commit_call(session: str, newest: int,
                 expect_newest: Optional[int] = None) -> _Call:
    return _Call("POST", _session_path(session, "/commit"),
                 _with_expect({"newest": newest}, expect_newest), True,
                 lambda status, obj: CommitResult.from_json(obj))


def _truncate_call(session: str, frm: Optional[int], from_: Optional[int],
                   expect_newest: Optional[int] = None) -> _Call:
    if (frm is None) == (from_ is None):
        raise ValueError("give exactly one of frm and from_")
    return _Call("POST", _session_path(session, "/truncate"),
                 _with_expect({"from": frm if from_ is None else from_},
                              expect_newest), True,
                 lambda status, obj: TruncateResult.from_json(obj))


def _fork_call(session: str, into: str,
               expect_newest: Optional[int] = None) -> _Call:
    return _Call("POST", _session_path(session, "/fork"),
                 _with_expect({"into": into}, expect_newest), True,
                 lambda status, obj: _view(obj, created=status == 201))


def _evict_call(session: str, budget: Optional[int],
                expect_newest: Optional[int] = None) -> _Call:
    body = {} if budget is None else {"budget": budget}
    return _Call("POST", _session_path(session, "/evict"),
                 _with_expect(body, expect_newest), False,
                 lambda status, obj: EvictResult.from_json(obj))


def _adopt_call(session: str, kept: Sequence[int], newest: int,
                slots: Optional[Sequence[int]], pages: Optional[Sequence[int]],
                creation: Mapping[str, Any], replace: bool) -> _Call:
    body: Dict[str, Any] = {name: creation[name] for name in _CREATION
                            if creation.get(name) is not None}
    body["kept"] = list(kept)
    body["newest"] = newest
    if slots is not None:
        body["slots"] = list(slots)
    if pages is not None:
        body["pages"] = list(pages)
    if replace:
        body["replace"] = True
    # A resent adoption finds the state it made: 200, nothing changes.
    return _Call("POST", _session_path(session, "/adopt"), body, True,
                 lambda status, obj: _view(obj, created=status == 201))


def _get_call(session: str) -> _Call:
    return _Call("GET", _session_path(session), None, None,
                 lambda status, obj: _view(obj))


def _delete_call(session: str, missing_ok: bool) -> _Call:
    def on_error(e: EvictdError) -> bool:
        if missing_ok and isinstance(e, UnknownSession):
            return False
        raise e

    return _Call("DELETE", _session_path(session), None, None,
                 lambda status, obj: True, on_error=on_error)


def _batch_call(items: Union[StepBatch, Iterable[Mapping[str, Any]]]
                ) -> _Call:
    if isinstance(items, StepBatch):
        items = items.items()
    items = list(items)
    sessions = [it.get("session") for it in items]
    retry = len(set(map(repr, sessions))) == len(sessions)

    def parse(status: int, obj: Any) -> List[BatchOutcome]:
        results = obj.get("results") if isinstance(obj, dict) else None
        if not isinstance(results, list) or len(results) != len(items):
            raise ProtocolError("Not a batch answer for %d items: %.200r"
                                % (len(items), obj))
        out: List[BatchOutcome] = []
        for item, res in zip(items, results):
            if isinstance(res, dict) and "error" in res:
                out.append(error_from_body(None, res))
                continue
            sent = item.get("positions")
            if sent is None:
                sent = [item["pos"]] if "pos" in item else []
            out.append(StepResult.from_json(
                res, sent, item.get("tentative") is True,
                item.get("commit")))
        return out

    return _Call("POST", "/step", {"steps": items}, retry, parse)


class _Request(NamedTuple):
    """One request as a transport sends it (made by _Core._prepare)."""
    method: str
    path: str  # as the caller gave it, for the answer's errors
    target: str  # the path with the URL's prefix: what goes on the wire
    data: Optional[bytes]
    headers: Dict[str, str]
    retry: bool  # may be sent again when its answer was lost


def _encode(body: Any) -> Optional[bytes]:
    """A request body: None, bytes as they are, anything else as JSON."""
    if body is None or isinstance(body, bytes):
        return body
    return json.dumps(body, separators=(",", ":")).encode()


def _answer(req: _Request, status: int, reason: str,
            header: Callable[[str], Optional[str]], payload: bytes,
            raw: bool) -> Tuple[int, Any]:
    """``(status, parsed JSON or None)`` of the answer to ``req`` (the
    bytes with ``raw``), or raises the EvictdError of an error answer."""
    method, path = req.method, req.path
    if raw and status < 400:
        return status, payload
    parsed: Any = None
    if payload and method != "HEAD":
        try:
            parsed = json.loads(payload)
        except ValueError:
            if status < 400:
                raise ProtocolError("The answer to %s %s is not JSON: %.200r"
                                    % (method, path, payload),
                                    status=status) from None
            parsed = None
    if status >= 400:
        err = error_from_body(status, parsed)
        if isinstance(err, ProtocolError):
            err.message = ("%s %s answered %d %s: %.200r"
                           % (method, path, status, reason, payload))
            err.args = (err.message,)
        for name in ("Allow", "WWW-Authenticate"):
            value = header(name)
            if value is not None:
                err.error.setdefault(name.lower().replace("-", "_"), value)
        raise err
    return status, parsed


class _Address(NamedTuple):
    unix: Optional[str]
    host: str
    port: int
    prefix: str
    tls: bool = False


def _parse_address(url: str) -> _Address:
    """``http://host:port[/prefix]``, ``https://...``, ``host:port`` or
    ``unix:/path``."""
    if url.startswith("unix:"):
        path = url[len("unix:"):]
        if not path:
            raise ValueError("unix: address without a path")
        return _Address(path, "localhost", 0, "")
    parsed = urllib.parse.urlsplit(url if "//" in url else "http://" + url)
    tls = parsed.scheme == "https"
    try:
        port = parsed.port or (443 if tls else 80)
    except ValueError:
        raise ValueError("unsupported evictd address %r" % url) from None
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise ValueError("unsupported evictd address %r" % url)
    return _Address(None, parsed.hostname, port, parsed.path.rstrip("/"),
                    tls)


def _tls_context(address: _Address, ssl_context: Optional[ssl.SSLContext],
                 cafile: Optional[str]) -> Optional[ssl.SSLContext]:
    """The TLS context of an https:// address: the caller's, or one that
    verifies the daemon's certificate against `cafile` (the system's trust
    store when None). None for plain http."""
    if not address.tls:
        if ssl_context is not None or cafile is not None:
            raise ValueError("ssl_context and cafile need an https:// URL")
        return None
    return ssl_context or ssl.create_default_context(cafile=cafile)


def _base_headers(token: Optional[str], token_file: Optional[str],
                  agent: str) -> Dict[str, str]:
    if token is None and token_file is not None:
        with open(token_file, encoding="utf-8") as f:
            token = f.readline().strip()
    headers = {"Accept": "application/json",
               "User-Agent": "%s/%s" % (agent, __version__)}
    if token:
        headers["Authorization"] = "Bearer " + token
    return headers


# How an attempt to send a request failed, as a transport tells
# _Core._again: the request was not delivered whole (and no answer came);
# it was, and the connection ended before the whole answer; no answer
# within the timeout; anything else (a connection refused, an answer that
# is not HTTP).
_UNSENT, _LOST, _TIMED_OUT, _BROKEN = "unsent", "lost", "timed out", "broken"


class _Core:
    """What :class:`EvictdClient` and ``evictd_aio.AsyncEvictdClient`` are
    besides their transports, which only carry bytes: the daemon's address
    and TLS context, the headers every request carries, the counters, each
    request made ready to send (:meth:`_prepare`), and the rules for
    sending it again (:meth:`_again`; the module docstring says why). No
    I/O here, so the two clients cannot disagree about any of it."""

    def __init__(self, url: str, timeout: Optional[float],
                 connect_timeout: Optional[float], token: Optional[str],
                 token_file: Optional[str], cafile: Optional[str],
                 ssl_context: Optional[ssl.SSLContext], agent: str) -> None:
        self.url = url
        self.timeout = timeout
        self.connect_timeout = (timeout if connect_timeout is None
                                else connect_timeout)
        address = _parse_address(url)
        self._tls = _tls_context(address, ssl_context, cafile)
        self._headers = _base_headers(token, token_file, agent)
        self._unix = address.unix
        self._host, self._port = address.host, address.port
        self._prefix = address.prefix
        # Counters, for logs and tests.
        self.connections_opened = 0
        self.retries = 0
        # Whether to look for a peer-closed socket before reusing it (only
        # tests turn this off, to exercise the retry path).
        self._probe_idle = True

    def _prepare(self, method: str, path: str, body: Any,
                 retry: Optional[bool]) -> _Request:
        """The request :meth:`request` sends: ``body`` encoded (see
        :func:`_encode`), the headers, and whether it may be repeated
        (by default GET, HEAD, PUT and DELETE may)."""
        headers = dict(self._headers)
        data = _encode(body)
        if data is not None:
            headers["Content-Type"] = "application/json"
        if retry is None:
            retry = method in _IDEMPOTENT
        return _Request(method, path, self._prefix + path, data, headers,
                        retry)

    def _again(self, req: _Request, failure: str, attempt: int,
               reused: bool, error: BaseException) -> None:
        """The resend rules, asked by a transport after attempt ``attempt``
        (0 or 1) at ``req`` failed as ``failure`` says on a connection that
        carried a request before (``reused``) or not. Returns when the
        request is to be sent once more, on a new connection (counted in
        ``retries``); raises the :class:`ConnectionFailed` (or
        :class:`RequestTimeout`) the caller gets otherwise.

        Only a first attempt on a reused connection is repeated: the peer
        may have closed that connection while it sat idle, while a new one
        that fails the same way would fail again. A request not delivered
        whole cannot have been applied, so it is repeated whatever it is;
        one delivered whose answer was lost only when ``req.retry`` says
        that repeating it is safe. A timed-out request may still be
        running: never repeated."""
        if attempt == 0 and reused and (
                failure == _UNSENT or (failure == _LOST and req.retry)):
            self.retries += 1
            return
        what = "%s %s" % (req.method, req.target)
        if failure == _TIMED_OUT:
            raise RequestTimeout("No answer to %s from %s within %ss."
                                 % (what, self.url, self.timeout)) from error
        if failure == _UNSENT:
            raise ConnectionFailed("Could not send %s to %s: %s"
                                   % (what, self.url, error)) from error
        if failure == _LOST:
            raise ConnectionFailed("The connection to %s dropped during %s: "
                                   "%s" % (self.url, what,
                                           str(error) or repr(error))
                                   ) from error
        raise ConnectionFailed("%s to %s failed: %r"
                               % (what, self.url, error)) from error

    @staticmethod
    def _session_path(session: str, suffix: str = "") -> str:
        return _session_path(session, suffix)


# ---- connections ------------------------------------------------------------


class _TCPConnection(http.client.HTTPConnection):
    """HTTPConnection with its own connect timeout and TCP_NODELAY, over
    TLS when given a context."""

    def __init__(self, host: str, port: int, timeout: Optional[float],
                 connect_timeout: Optional[float],
                 tls: Optional[ssl.SSLContext] = None) -> None:
        super().__init__(host, port, timeout=timeout)
        self.connect_timeout = connect_timeout
        self.tls = tls

    def connect(self) -> None:
        sock = socket.create_connection((self.host, self.port),
                                        self.connect_timeout)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.tls is not None:
                sock = self.tls.wrap_socket(sock, server_hostname=self.host)
            sock.settimeout(self.timeout)
        except BaseException:
            sock.close()
            raise
        self.sock = sock


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


class EvictdClient(_Core):
    """A client for one evictd daemon over one keep-alive connection.

    Args:
        url: ``http://host:port`` (``http://[v6]:port`` too; a path prefix
            is kept, for a proxy), ``https://host:port`` (a daemon started
            with ``--tls-cert``), ``host:port``, or ``unix:/path``.
        timeout: seconds to wait for socket I/O of a request (None: forever).
        connect_timeout: seconds to wait for a connection (default timeout).
        token: a bearer token, sent as ``Authorization: Bearer <token>``.
        token_file: a file whose first line is the token (used when token
            is None).
        cafile: with https, the CA (or self-signed certificate) that signs
            the daemon's certificate; the system's trust store when None.
        ssl_context: with https, a context of your own instead.

    Not thread-safe: give each thread its own client (or use
    ``evictd_aio.AsyncEvictdClient`` from coroutines). Use as a context
    manager or call :meth:`close`.

    Every method raises an :class:`EvictdError` subclass: the one of the
    daemon's error code, :class:`ConnectionFailed` / :class:`RequestTimeout`
    for transport failures, :class:`ProtocolError` for an unexpected answer.
    """

    def __init__(self, url: str = DEFAULT_URL, *,
                 timeout: Optional[float] = 10.0,
                 connect_timeout: Optional[float] = None,
                 token: Optional[str] = None,
                 token_file: Optional[str] = None,
                 cafile: Optional[str] = None,
                 ssl_context: Optional[ssl.SSLContext] = None) -> None:
        super().__init__(url, timeout, connect_timeout, token, token_file,
                         cafile, ssl_context, "evictd-client-python")
        self._conn: Optional[http.client.HTTPConnection] = None

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
                                            self.connect_timeout, self._tls)
        return self._conn

    def _exchange(self, req: _Request
                  ) -> Tuple[http.client.HTTPResponse, bytes]:
        """Sends one request and reads the whole answer, on a new
        connection again when :meth:`_Core._again` says so."""
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
                    conn.request(req.method, req.target, req.data,
                                 req.headers)
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
                        self._again(req, _UNSENT, attempt, reused, send_error)
                        continue
                else:
                    resp = conn.getresponse()
                payload = resp.read()
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                self._again(req, _TIMED_OUT if isinstance(e, socket.timeout)
                           else _LOST if isinstance(e, _DROPPED) else _BROKEN,
                           attempt, reused, e)
                continue
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
        req = self._prepare(method, path, body, retry)
        resp, payload = self._exchange(req)
        return _answer(req, resp.status, resp.reason, resp.getheader,
                       payload, raw)

    def _call(self, call: _Call) -> Any:
        """Carries out one API call (see the shared _*_call functions)."""
        try:
            status, obj = self.request(*call.request, retry=call.retry,
                                       raw=call.raw)
        except EvictdError as e:
            return call.failed(e)
        return call.parse(status, obj)

    # -- the API --

    def health(self) -> Dict[str, Any]:
        """GET /healthz: ``{"status": "ok"}`` when the daemon is up."""
        return self._call(_health_call())

    def metrics(self) -> str:
        """GET /metrics: the Prometheus text exposition."""
        return self._call(_metrics_call())

    def create(self, session: str, budget: Optional[int] = None,
               sinks: Optional[int] = None, *,
               lookahead: Optional[int] = None,
               page_size: Optional[int] = None) -> SessionView:
        """PUT /session/{id}: creates a session (defaults from the daemon's
        --budget/--sinks/--lookahead/--page-size). ``lookahead`` L gives the
        ring budget + L slots (the most positions one sub-step or the
        pending drafts may hold); ``page_size`` > 0 turns on the pages
        fields. An identical existing session is returned with
        ``created=False``; another config raises :class:`SessionExists`."""
        return self._call(_create_call(session, budget, sinks, lookahead,
                                       page_size))

    def step(self, session: str,
             pos: Union[int, Sequence[int], None] = None, *,
             positions: Optional[Sequence[int]] = None,
             attention: Any = None, budget: Optional[int] = None,
             sinks: Optional[int] = None, lookahead: Optional[int] = None,
             page_size: Optional[int] = None, tentative: bool = False,
             commit: Optional[int] = None,
             expect_newest: Optional[int] = None) -> StepResult:
        """POST /session/{id}/step: steps one position (``pos``) or several
        (``positions``, or a sequence as ``pos``), in sub-steps of up to the
        session's lookahead positions, each appended and then evicted down to
        the budget. Creates the session unless the daemon runs with
        --no-autocreate (budget/sinks/lookahead/page_size are used only
        then). ``attention`` is sent as is (the daemon ignores it today).

        ``tentative=True`` sends drafts: appended, nothing evicted, at most
        the lookahead pending (else :class:`TooManyPositions`); until they
        are committed, a plain step or an evict is
        :class:`TentativePending`. ``commit=P`` first accepts the pending
        drafts up to P and drops the others (``dropped``), then evicts to
        the budget (the first victims); it may come without positions (a
        commit-only step, empty ``slots``).

        ``expect_newest=N``: the newest position the engine believes the
        session has before this step; when the daemon's is another, the step
        is refused with :class:`Diverged` (nothing changes), and a missing
        session expected past 0 is :class:`UnknownSession` (not created).

        Retried once on a dropped connection: an exact retry is answered with
        the original response and ``replayed=True``.
        """
        return self._call(_step_call(
            session, pos, positions, attention,
            {"budget": budget, "sinks": sinks, "lookahead": lookahead,
             "page_size": page_size}, tentative, commit, expect_newest))

    def commit(self, session: str, newest: int, *,
               expect_newest: Optional[int] = None) -> CommitResult:
        """POST /session/{id}/commit: keeps the pending drafts up to
        ``newest``, drops the others and evicts down to the budget. Nothing
        pending is fine (empty lists); ``newest`` below the committed newest
        is :class:`InvalidPosition`. Never creates the session. With
        ``expect_newest``, :class:`Diverged` when the session's newest is
        another. Retried once on a dropped connection (an exact retry is
        replayed)."""
        return self._call(_commit_call(session, newest, expect_newest))

    def truncate(self, session: str, frm: Optional[int] = None, *,
                 from_: Optional[int] = None,
                 expect_newest: Optional[int] = None) -> TruncateResult:
        """POST /session/{id}/truncate: removes every held position >= the
        given one (``frm``, or ``from_`` by keyword; at least 1), pinned and
        drafts included, e.g. to roll back after a rejected branch; newest
        becomes ``frm - 1`` when it was at or above it. With
        ``expect_newest``, :class:`Diverged` when the session's newest is
        another. Retried once on a dropped connection (an exact retry is
        replayed)."""
        return self._call(_truncate_call(session, frm, from_, expect_newest))

    def fork(self, session: str, into: str, *,
             expect_newest: Optional[int] = None) -> SessionView:
        """POST /session/{id}/fork: copies the session (config, positions,
        slots, drafts) into a new session ``into`` and returns the child's
        view, ``created=True``. An identical existing child is returned with
        ``created=False``; a different one raises :class:`SessionExists`.
        With ``expect_newest`` (the parent's), :class:`Diverged` when the
        parent's newest is another. Retried once on a dropped connection."""
        return self._call(_fork_call(session, into, expect_newest))

    def evict(self, session: str, budget: Optional[int] = None, *,
              expect_newest: Optional[int] = None) -> EvictResult:
        """POST /session/{id}/evict: evicts until at most ``budget`` (default
        the session's own) positions remain. With ``expect_newest``,
        :class:`Diverged` when the session's newest is another. Not retried
        once sent."""
        return self._call(_evict_call(session, budget, expect_newest))

    def adopt(self, session: str, kept: Sequence[int], newest: int, *,
              slots: Optional[Sequence[int]] = None,
              pages: Optional[Sequence[int]] = None,
              budget: Optional[int] = None, sinks: Optional[int] = None,
              lookahead: Optional[int] = None,
              page_size: Optional[int] = None,
              replace: bool = False) -> SessionView:
        """POST /session/{id}/adopt: creates the session in the state the
        engine holds: the positions ``kept`` (ascending), ``newest`` and,
        optionally, their ``slots`` (else the canonical layout: where
        stepping every position one at a time puts them) and their
        ``pages`` (a check). No drafts: commit or drop them first. Returns
        its view, ``created=True``. The same state again returns the view
        with ``created=False`` and changes nothing; another state raises
        :class:`SessionExists` unless ``replace=True``, which replaces it
        (its replay record too). A state no session can be in raises
        :class:`InvalidState`, naming the rule. The configuration defaults
        as :meth:`create`'s. Retried once on a dropped connection (a resent
        adoption finds its state). See the module docstring for re-homing a
        session with it."""
        return self._call(_adopt_call(
            session, kept, newest, slots, pages,
            {"budget": budget, "sinks": sinks, "lookahead": lookahead,
             "page_size": page_size}, replace))

    def get(self, session: str) -> SessionView:
        """GET /session/{id}: the positions kept and their slots."""
        return self._call(_get_call(session))

    def delete(self, session: str, missing_ok: bool = False) -> bool:
        """DELETE /session/{id}. Returns True when deleted; with
        ``missing_ok`` an unknown session returns False instead of raising
        :class:`UnknownSession`."""
        return self._call(_delete_call(session, missing_ok))

    def batch(self, items: Union[StepBatch, Iterable[Mapping[str, Any]]]
              ) -> List[BatchOutcome]:
        """POST /step: many step requests in one. ``items`` are dicts with
        ``session``, ``pos``/``positions`` and optionally ``tentative``,
        ``commit``, ``attention``, ``budget``, ``sinks``, ``lookahead``,
        ``page_size``, ``expect_newest`` (see :func:`step_item`), or a
        :class:`StepBatch`.
        Returns one outcome per item, in order: a :class:`StepResult`, or the
        :class:`EvictdError` of that item (not raised). Errors of the request
        as a whole (e.g. :class:`TooManySteps`, :class:`BodyTooLarge`) raise.

        Retried once on a dropped connection when no session appears twice.
        """
        return self._call(_batch_call(items))
