"""A pool of evictd instances, routed as nginx routes them: :class:`EvictdPool`.

Standard library only, next to ``evictd_client.py``. Behind
``deploy/nginx-shard.conf`` (``hash $evictd_session consistent``) a batch
cannot go through nginx (421): a pool client computes nginx's consistent
hash itself, so each iteration's batch is split per instance and the parts
are sent straight to the instances, concurrently, one request per instance.

The ring is nginx's (ngx_http_upstream_hash_module, ``consistent``): each
instance, under the name written in the upstream block (``host:port``),
gets 160 points; point j is ``crc32(HOST, 0 byte, PORT, le32(point j-1))``
with point -1 taken as 0 (the crc runs on, unfinished, from the same
``HOST \\0 PORT`` prefix). The points are sorted (a hash taken twice keeps
its first owner); a key's instance is the owner of the first point at or
above ``crc32(key)``, wrapping to the first point. The key is what
nginx-shard.conf hashes: the session id up to its first ``~``.

What the pool does not do, as nginx's configuration does not: move a session
when its instance fails. A failed instance's items come back as
:class:`InstanceFailed` (which instance, and why); the others' are answered.
``deploy/SCALING.md`` says more.
"""

import concurrent.futures
import struct
import urllib.parse
import zlib
from typing import (Any, Callable, Dict, Iterable, List, Mapping, Optional,
                    Sequence, Tuple, Union)

from evictd_client import (BatchOutcome, EvictdClient, EvictdError,
                           StepBatch)

__all__ = ["EvictdPool", "HashRing", "InstanceFailed", "Unroutable",
           "shard_key", "instance_name"]

POINTS_PER_WEIGHT = 160  # nginx's points per unit of weight


class InstanceFailed(EvictdError):
    """An item whose instance did not answer its part of a batch (or
    refused it whole). ``code``/``status`` are the cause's; ``instance`` is
    the instance's ring name, ``url`` its URL, ``cause`` the error."""

    def __init__(self, instance: str, url: str, cause: EvictdError) -> None:
        super().__init__("instance %s (%s) failed: %s" % (instance, url, cause),
                         cause.status, cause.code, cause.error)
        self.instance, self.url, self.cause = instance, url, cause


class Unroutable(EvictdError):
    """A session id nginx cannot route by hash: its key (the id before its
    first ``~``) is empty, and nginx sends such requests round-robin."""
    code = "unroutable_session"


def shard_key(session: str) -> str:
    """nginx-shard.conf's key: the id up to its first ``~``."""
    return session.split("~", 1)[0]


def instance_name(url: str) -> str:
    """The name an instance has in nginx's upstream block, read from its
    URL: ``host:port`` as written (``[v6]:port`` too), or ``unix:/path``."""
    if url.startswith("unix:"):
        return url
    parsed = urllib.parse.urlsplit(url if "//" in url else "http://" + url)
    if not parsed.netloc:
        raise ValueError("no host in instance URL %r" % url)
    return parsed.netloc.rsplit("@", 1)[-1]


def _base_hash_input(name: str) -> bytes:
    """HOST \\0 PORT, split as nginx splits the server name: ``unix:`` and
    the rest; else the digits after the last ``:`` are the port (none when
    anything but digits follows it)."""
    raw = name.encode()
    if raw[:5].lower() == b"unix:":
        return raw[5:] + b"\0"
    host, sep, port = raw.rpartition(b":")
    if sep and all(48 <= c <= 57 for c in port):
        return host + b"\0" + port
    return raw + b"\0"


class HashRing:
    """nginx's ``hash ... consistent`` ring over instance names (in the
    order of the upstream block, each with weight 1 unless weights say)."""

    def __init__(self, names: Sequence[str],
                 weights: Optional[Sequence[int]] = None) -> None:
        if not names:
            raise ValueError("a ring needs at least one instance")
        weights = list(weights or [1] * len(names))
        if len(weights) != len(names) or any(w < 1 for w in weights):
            raise ValueError("one weight >= 1 per instance")
        self.names = list(names)
        points: List[Tuple[int, int, int]] = []  # hash, order, instance
        for index, (name, weight) in enumerate(zip(self.names, weights)):
            base = zlib.crc32(_base_hash_input(name))  # crc running on
            prev = 0
            for _ in range(weight * POINTS_PER_WEIGHT):
                # zlib.crc32(b, start) continues a crc: the same as nginx's
                # update of the unfinished base hash, then final.
                prev = zlib.crc32(struct.pack("<I", prev), base)
                points.append((prev, len(points), index))
        points.sort()
        self._hashes: List[int] = []
        self._owners: List[int] = []
        for h, _, index in points:
            if not self._hashes or self._hashes[-1] != h:
                self._hashes.append(h)
                self._owners.append(index)

    def index(self, session: str) -> int:
        """The instance (its index in ``names``) nginx sends session to.
        Raises :class:`Unroutable` for an empty key."""
        if not isinstance(session, str):
            raise TypeError("session ids are str, not %s"
                            % type(session).__name__)
        if len(self.names) == 1:
            return 0  # nginx: a single peer takes every request
        key = shard_key(session)
        if not key:
            raise Unroutable("session %r: its shard key (the id before its "
                             "first '~') is empty, and nginx routes such "
                             "requests round-robin" % (session,))
        h = zlib.crc32(key.encode())
        lo, hi = 0, len(self._hashes)
        while lo < hi:  # the first point >= h
            mid = (lo + hi) // 2
            if self._hashes[mid] < h:
                lo = mid + 1
            else:
                hi = mid
        return self._owners[lo % len(self._hashes)]


def split_items(ring: HashRing,
                items: Union[StepBatch, Iterable[Mapping[str, Any]]]
                ) -> Tuple[List[Mapping[str, Any]], Dict[int, List[int]],
                           Dict[int, EvictdError]]:
    """The batch's items, which item indices go to each instance (in item
    order), and the items that cannot be routed, with their error."""
    if isinstance(items, StepBatch):
        items = items.items()
    items = list(items)
    parts: Dict[int, List[int]] = {}
    bad: Dict[int, EvictdError] = {}
    for i, item in enumerate(items):
        try:
            parts.setdefault(ring.index(item.get("session")), []).append(i)
        except (Unroutable, TypeError) as e:
            bad[i] = e if isinstance(e, EvictdError) else Unroutable(str(e))
    return items, parts, bad


def merge_parts(n: int, parts: Dict[int, List[int]],
                answers: Dict[int, Union[List[BatchOutcome], EvictdError]],
                bad: Dict[int, EvictdError],
                failed: Callable[[int, EvictdError], EvictdError]
                ) -> List[BatchOutcome]:
    """Puts each instance's outcomes back in request order; an instance's
    whole-request error becomes failed(instance, error) for each item."""
    out: List[Optional[BatchOutcome]] = [None] * n
    for i, e in bad.items():
        out[i] = e
    for inst, indices in parts.items():
        got = answers[inst]
        if isinstance(got, EvictdError):
            err = failed(inst, got)
            for i in indices:
                out[i] = err
        else:
            for i, res in zip(indices, got):
                out[i] = res
    return out  # type: ignore[return-value]


def instances(urls: Sequence[str], names: Optional[Sequence[str]] = None
              ) -> Tuple[List[str], List[str], "HashRing"]:
    """The pools' instance list: the URLs, their names (as the upstream
    block writes them; by default taken from the URLs), checked one per
    URL and all different, and the ring over the names."""
    urls = list(urls)
    if names is None:
        names = [instance_name(u) for u in urls]
    if len(names) != len(urls):
        raise ValueError("one name per instance URL")
    if len(set(names)) != len(names):
        raise ValueError("instance names must differ: %r" % (names,))
    return urls, list(names), HashRing(list(names))


# A batch's split: its length, each instance's item indices, the items that
# cannot be routed.
_Split = Tuple[int, Dict[int, List[int]], Dict[int, EvictdError]]


class _Pool:
    """What :class:`EvictdPool` and ``evictd_pool_aio.AsyncEvictdPool``
    share besides how they send: the instances and their ring, one client
    per instance (``client_class``), the routing of a session, and a batch
    split per instance and put back together (:meth:`_split`,
    :meth:`_merge`). No I/O here."""

    def __init__(self, urls: Sequence[str], names: Optional[Sequence[str]],
                 client_class: type, client_args: Mapping[str, Any]) -> None:
        self.urls, self.names, self.ring = instances(urls, names)
        self.clients = [client_class(u, **client_args) for u in self.urls]

    def instance_of(self, session: str) -> int:
        """The index (in ``urls``) of the instance holding session."""
        return self.ring.index(session)

    def client_for(self, session: str) -> Any:
        """The client of session's instance, for any single-session call
        (``pool.client_for(sid).step(sid, 5)``)."""
        return self.clients[self.ring.index(session)]

    def failed(self, inst: int, cause: EvictdError) -> InstanceFailed:
        return InstanceFailed(self.names[inst], self.urls[inst], cause)

    def _split(self, items: Union[StepBatch, Iterable[Mapping[str, Any]]]
               ) -> Tuple[_Split, List[Tuple[int, List[Mapping[str, Any]]]]]:
        """A batch split per instance: what :meth:`_merge` needs, and each
        instance's part (its items, in item order), in instance order."""
        items, parts, bad = split_items(self.ring, items)
        return ((len(items), parts, bad),
                [(inst, [items[i] for i in idx])
                 for inst, idx in parts.items()])

    def _merge(self, split: _Split,
               answers: Dict[int, Union[List[BatchOutcome], EvictdError]]
               ) -> List[BatchOutcome]:
        """The outcomes in the items' order, from each instance's answer
        (its outcomes, or the error that failed its whole part)."""
        n, parts, bad = split
        return merge_parts(n, parts, answers, bad, self.failed)


class EvictdPool(_Pool):
    """Blocking client for a pool of evictd instances that nginx would
    route with ``hash $evictd_session consistent``.

    Args:
        urls: the instances' URLs, in the order of nginx's upstream block.
        names: each instance's name as written in that block (``host:port``);
            by default read from its URL (:func:`instance_name`). The ring
            depends on these names, so they must be nginx's.
        **client_args: passed to every :class:`EvictdClient` (timeout,
            token, cafile, ...).

    One client (one keep-alive connection) per instance, and one worker
    thread per instance that :meth:`batch` sends its parts on. Like
    :class:`EvictdClient`, a pool is for one thread at a time.
    """

    def __init__(self, urls: Sequence[str], *,
                 names: Optional[Sequence[str]] = None,
                 **client_args: Any) -> None:
        super().__init__(urls, names, EvictdClient, client_args)
        self._workers: Optional[concurrent.futures.ThreadPoolExecutor] = None

    def __enter__(self) -> "EvictdPool":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        if self._workers is not None:
            self._workers.shutdown(wait=True)
            self._workers = None
        for c in self.clients:
            c.close()

    def _send(self, inst: int, part: List[Mapping[str, Any]]
              ) -> Union[List[BatchOutcome], EvictdError]:
        try:
            return self.clients[inst].batch(part)
        except EvictdError as e:
            return e

    def batch(self, items: Union[StepBatch, Iterable[Mapping[str, Any]]]
              ) -> List[BatchOutcome]:
        """One decode iteration: the items (as for
        :meth:`EvictdClient.batch`) split per instance, each part one
        ``POST /step`` to its instance, all parts in flight at once. Returns
        one outcome per item, in the items' order: a ``StepResult``, the
        item's ``EvictdError``, :class:`InstanceFailed` when its instance
        failed the whole part, or :class:`Unroutable`. Never raises for an
        instance's failure."""
        split, jobs = self._split(items)
        answers: Dict[int, Union[List[BatchOutcome], EvictdError]] = {}
        if len(jobs) == 1:  # nothing to overlap: no thread hop
            inst, part = jobs[0]
            answers[inst] = self._send(inst, part)
        elif jobs:
            if self._workers is None:
                self._workers = concurrent.futures.ThreadPoolExecutor(
                    max_workers=len(self.clients),
                    thread_name_prefix="evictd-pool")
            # The caller's thread sends the first part itself.
            futures = [(inst, self._workers.submit(self._send, inst, part))
                       for inst, part in jobs[1:]]
            inst, part = jobs[0]
            answers[inst] = self._send(inst, part)
            for inst, fut in futures:
                answers[inst] = fut.result()
        return self._merge(split, answers)

    # Single-session calls go to the session's instance (a fork to its
    # parent's, where nginx sends it too).
    def create(self, session: str, *args: Any, **kw: Any) -> Any:
        return self.client_for(session).create(session, *args, **kw)

    def step(self, session: str, *args: Any, **kw: Any) -> Any:
        return self.client_for(session).step(session, *args, **kw)

    def commit(self, session: str, *args: Any, **kw: Any) -> Any:
        return self.client_for(session).commit(session, *args, **kw)

    def truncate(self, session: str, *args: Any, **kw: Any) -> Any:
        return self.client_for(session).truncate(session, *args, **kw)

    def adopt(self, session: str, *args: Any, **kw: Any) -> Any:
        return self.client_for(session).adopt(session, *args, **kw)

    def fork(self, session: str, into: str, **kw: Any) -> Any:
        return self.client_for(session).fork(session, into, **kw)

    def evict(self, session: str, *args: Any, **kw: Any) -> Any:
        return self.client_for(session).evict(session, *args, **kw)

    def get(self, session: str) -> Any:
        return self.client_for(session).get(session)

    def delete(self, session: str, missing_ok: bool = False) -> Any:
        return self.client_for(session).delete(session, missing_ok)
