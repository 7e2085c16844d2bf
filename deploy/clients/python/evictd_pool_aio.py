"""The asyncio twin of :class:`evictd_pool.EvictdPool`: :class:`AsyncEvictdPool`.

Next to ``evictd_pool.py`` and ``evictd_aio.py``, which it imports: the same
ring (nginx's ``hash ... consistent``), the same split of a batch per
instance and the same per-item :class:`evictd_pool.InstanceFailed`; the
parts go out with ``asyncio.gather``, one ``AsyncEvictdClient`` per
instance.
"""

import asyncio
from typing import (Any, Iterable, List, Mapping, Optional, Sequence,
                    Union)

from evictd_aio import AsyncEvictdClient
from evictd_client import BatchOutcome, EvictdError, StepBatch
from evictd_pool import _Pool

__all__ = ["AsyncEvictdPool"]


class AsyncEvictdPool(_Pool):
    """Asyncio client for a pool of evictd instances routed as nginx's
    ``hash $evictd_session consistent`` routes them.

    Args: those of :class:`evictd_pool.EvictdPool`; ``**client_args`` go to
    every :class:`evictd_aio.AsyncEvictdClient` (``max_connections`` too).
    Safe for concurrent coroutines of one event loop, as its clients are.
    """

    def __init__(self, urls: Sequence[str], *,
                 names: Optional[Sequence[str]] = None,
                 **client_args: Any) -> None:
        super().__init__(urls, names, AsyncEvictdClient, client_args)

    async def __aenter__(self) -> "AsyncEvictdPool":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def close(self) -> None:
        for c in self.clients:
            await c.close()

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
        split, jobs = self._split(items)
        got = await asyncio.gather(*(self._send(inst, part)
                                     for inst, part in jobs))
        return self._merge(split, {inst: answer for (inst, _), answer
                                   in zip(jobs, got)})

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
