"""Reads of one queue for an async web handler.

* :func:`async_queue_metrics` (``await Worker.ametrics()``): the queue's metrics on the
  loop's ``redis.asyncio`` client, the ``metrics.lua`` script on every shard in one
  round trip (one per master, side by side, on a Redis Cluster) after the layout's
  read, as :meth:`Worker.metrics` does.
* :class:`AsyncQueries` (``Worker.aqueries()``): every read of
  :class:`~lowkiq.storage.queries.Queries` (``fetch``, ``morgue_fetch``,
  ``range_by_*``, ``processing_data``, ``payloads``, ``groups``, ...) as a coroutine,
  which runs the synchronous read on a thread of the loop's default executor, on the
  process's shared pooled client: the loop goes on serving while Redis answers.
  (These reads are several dependent round trips each, written once in
  :mod:`lowkiq.storage.queries`; they are not written twice.)
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import redis
from redis.exceptions import RedisClusterException

from lowkiq.aio.calls import LuaScript, run_calls
from lowkiq.aio.client import async_client
from lowkiq.aio.server import read_layout
from lowkiq.errors import RedisUnavailable
from lowkiq.storage.keys import QueueKeys
from lowkiq.storage.metrics import QueueMetrics, _decode
from lowkiq.storage.queries import Queries

if TYPE_CHECKING:
    from lowkiq.worker import Worker


async def async_queue_metrics(worker: type[Worker]) -> QueueMetrics:
    """``worker``'s queue metrics (see :class:`~lowkiq.storage.metrics.QueueMetrics`),
    read from the running loop; Redis out of reach raises
    :class:`~lowkiq.errors.RedisUnavailable`."""
    worker.validate()
    try:
        redis_ = await async_client()
        layout = await read_layout(redis_, worker.queue_name, worker.shards_count)
        script = LuaScript.named("metrics", worker.track_length if worker.track else 0)
        keys = QueueKeys(worker.queue_name)
        replies = await run_calls(redis_, [(script, keys.prefix(s), ()) for s in layout.shards])
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply
    except (redis.ConnectionError, redis.TimeoutError, RedisClusterException) as exc:
        raise RedisUnavailable(
            f"{worker.__name__}.ametrics(): Redis is unreachable: {exc}"
        ) from exc
    return _decode(replies, None)


#: The reads :class:`AsyncQueries` offers: the public methods of ``Queries``.
QUERY_METHODS = frozenset(
    name for name, value in vars(Queries).items() if not name.startswith("_") and callable(value)
)


class AsyncQueries:
    """``Worker.queries(payloads_limit)``'s reads as coroutines (see the module):
    ``await OrderWorker.aqueries().fetch(["42"])``.  Each call reads the queue's layout
    afresh, as ``queries()`` does; Redis out of reach raises
    :class:`~lowkiq.errors.RedisUnavailable`."""

    def __init__(self, worker: type[Worker], payloads_limit: int | None = None) -> None:
        self.worker = worker
        self.payloads_limit = payloads_limit

    def __getattr__(self, name: str) -> Callable[..., Awaitable[Any]]:
        if name not in QUERY_METHODS:
            raise AttributeError(f"{type(self).__name__} has no read {name!r}")
        worker, limit = self.worker, self.payloads_limit

        def read(*args: Any, **kwargs: Any) -> Any:
            return getattr(worker.queries(limit), name)(*args, **kwargs)

        @functools.wraps(getattr(Queries, name))
        async def call(*args: Any, **kwargs: Any) -> Any:
            return await asyncio.to_thread(read, *args, **kwargs)

        return call

    def __dir__(self) -> list[str]:
        return sorted({*super().__dir__(), *QUERY_METHODS})
