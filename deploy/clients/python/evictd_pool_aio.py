"""The asyncio twin of :class:`evictd_pool.EvictdPool`: :class:`AsyncEvictdPool`.

Next to ``evictd_pool.py`` and ``evictd_aio.py``, which it imports: the same
ring (nginx's ``hash ... consistent``), the same split of a batch per
instance and the same per-item :class:`evictd_pool.InstanceFailed`; the
parts go out with ``asyncio.gather``, one ``AsyncEvictdClient`` per
instance.
"""

import asyncio
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Union

from evictd_aio import AsyncEvictdClient
from evictd_client import BatchOutcome, EvictdError, StepBatch
from evictd_pool import (InstanceFailed, instances, merge_parts,
                         split_items)

__all__ = ["AsyncEvictdPool"]


class AsyncEvictdPool:
    """Asyncio client for a pool of evictd instances routed as nginx's
    ``hash $evictd_session consistent`` routes them.

    Args: those of :class:`evictd_pool.EvictdPool`; ``**client_args`` go to
    every :class:`evictd_aio.AsyncEvictdClient` (``max_connections`` too).
    Safe for concurrent coroutines of one event loop, as its clients are.
    """

    def __init__(self, urls: Sequence[str], *,
                 names: Optional[Sequence[str]] = None,
                 **client_args: Any) -> None:
        self.urls, self.names, self.ring = instances(urls, names)
        self.clients = [AsyncEvictdClient(u, **client_args)
                        for u in self.urls]

    async def __aenter__(self) -> "AsyncEvictdPool":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def close(self) -> None:
        for c in self.clients:
            await c.close()

    def instance_of(self, session: str) -> int:
        return self.ring.index(session)

    def client_for(self, session: str) -> AsyncEvictdClient:
        return self.clients[self.ring.index(session)]

    async def _send(self, inst: int, part: List[Mapping[str, Any]]
                    ) -> Union[List[BatchOutcome], EvictdError]:
        try:
            return await self.clients[inst].batch(part)
        except EvictdError as e:
            return e

    async def batch(self, items: Union[StepBatch,
                                       Iterable[Mapping[str, Any]]]
                    ) -> List[BatchOutcome]:
        """Coroutine of :meth:`evictd_pool.EvictdPool.batch`: the parts are
        awaited together (``asyncio.gather``)."""
        items, parts, bad = split_items(self.ring, items)
        order = list(parts)
        got = await asyncio.gather(*(self._send(inst, [items[i] for i in
                                                       parts[inst]])
                                     for inst in order))
        answers: Dict[int, Union[List[BatchOutcome], EvictdError]] = dict(
            zip(order, got))
        return merge_parts(len(items), parts, answers, bad,
                           lambda inst, e: InstanceFailed(
                               self.names[inst], self.urls[inst], e))

    async def create(self, session: str, *args: Any, **kw: Any) -> Any:
        return await self.client_for(session).create(session, *args, **kw)

    async def step(self, session: str, *args: Any, **kw: Any) -> Any:
        return await self.client_for(session).step(session, *args, **kw)

    async def commit(self, session: str, *args: Any, **kw: Any) -> Any:
        return await self.client_for(session).commit(session, *args, **kw)

    async def truncate(self, session: str, *args: Any, **kw: Any) -> Any:
        return await self.client_for(session).truncate(session, *args, **kw)

    async def adopt(self, session: str, *args: Any, **kw: Any) -> Any:
        return await self.client_for(session).adopt(session, *args, **kw)

    async def fork(self, session: str, into: str, **kw: Any) -> Any:
        return await self.client_for(session).fork(session, into, **kw)

    async def evict(self, session: str, *args: Any, **kw: Any) -> Any:
        return await self.client_for(session).evict(session, *args, **kw)

    async def get(self, session: str) -> Any:
        return await self.client_for(session).get(session)

    async def delete(self, session: str, missing_ok: bool = False) -> Any:
        return await self.client_for(session).delete(session, missing_ok)
