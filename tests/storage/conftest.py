"""Worker classes and helpers shared by the storage tests.

Every storage test runs twice: on a single Redis server and on a 3-master
Redis Cluster (``redis_client`` is then a ``redis.RedisCluster``).  Every
fixture here depends on ``redis_client``, so each test starts on a flushed
database with ``lowkiq.settings`` pointed at it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import redis
from storage_support import NOW, retry_in

import lowkiq
from lowkiq.storage.queue import Queue
from tests.both_redis import server_or_cluster_client  # noqa: F401  (redis_client)
from tests.leasing import fail, pop


@pytest.fixture
def worker(redis_client: redis.Redis) -> type[lowkiq.Worker]:
    """A one-shard worker (every id in shard 0), batch size 10, three tries, registered."""

    class OrderWorker(lowkiq.Worker):
        shards_count = 1
        batch_size = 10
        max_retry_count = 3

        @classmethod
        def retry_in(cls, retry_count: int) -> float:
            return retry_in(retry_count)

    lowkiq.settings.workers = [OrderWorker]
    return OrderWorker


@pytest.fixture
def sharded_worker(redis_client: redis.Redis) -> type[lowkiq.Worker]:
    """A five-shard worker, batch size 3, registered."""

    class ShipmentWorker(lowkiq.Worker):
        shards_count = 5
        batch_size = 3

    lowkiq.settings.workers = [ShipmentWorker]
    return ShipmentWorker


@pytest.fixture
def queue(worker: type[lowkiq.Worker]) -> Queue:
    """The storage of :func:`worker`'s queue."""
    return worker.queue()


@pytest.fixture
def fail_batch(queue: Queue, worker: type[lowkiq.Worker]) -> Callable[..., list[dict[str, Any]]]:
    """Pop shard 0 of :func:`worker` at ``now`` and fail the batch with ``error``."""

    def fail_shard_0(now: float = NOW, error: str = "boom") -> list[dict[str, Any]]:
        batch = pop(queue, 0, worker.batch_size, now=now)
        assert batch, "nothing was due"
        return fail(queue, 0, batch, error, retry_in, worker.max_retry_count, now=now)

    return fail_shard_0
