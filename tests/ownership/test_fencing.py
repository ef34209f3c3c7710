"""The lease a batch runs under, as ``perform`` sees it (``current_batch().lease``), and
the local deadline that keeps a thread from performing a batch whose lease may be gone."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
import redis

import lowkiq
from lowkiq.ownership import leases
from lowkiq.ownership.coordinator import Coordinator
from lowkiq.runtime.server import Server
from tests.built_server import built_server
from tests.runtime.serving import process

seen: list[Any] = []


class Fenced(lowkiq.Worker):
    shards_count = 1

    @classmethod
    def perform(cls, payloads_by_id: dict) -> None:
        batch = lowkiq.current_batch()
        assert batch is not None and batch.lease is not None
        seen.append((batch.lease.epoch, batch.lease.fence, batch.lease.remaining()))
        if "check" in payloads_by_id:
            batch.lease.check()  # held: no error
            queue = batch.lease.queue
            queue.client.set(queue.keys.lease(0), "9 another:1:x")  # taken over meanwhile
            try:
                batch.lease.check()
            except lowkiq.LeaseLost as exc:
                seen.append(exc)
                raise


class AsyncFenced(lowkiq.Worker):
    shards_count = 1

    @classmethod
    async def perform(cls, payloads_by_id: dict) -> None:
        await asyncio.sleep(0)
        batch = lowkiq.current_batch()
        assert batch is not None and batch.lease is not None
        seen.append(("async", batch.lease.fence))


@pytest.fixture
def built(redis_url: str, redis_client: redis.Redis) -> Iterator[tuple[Server, Coordinator]]:
    seen.clear()
    with built_server(redis_url, Fenced, AsyncFenced) as (server, coordinator, _):
        yield server, coordinator


def handler_of(server: Server, worker: type[lowkiq.Worker]) -> Any:
    return next(h for h in server.dispatcher.handlers if h.worker is worker)


def test_perform_sees_its_lease_and_a_fence_that_grows_with_every_owner(
    built: tuple[Server, Coordinator], redis_client: redis.Redis
) -> None:
    server, coordinator = built
    Fenced.perform_async([{"id": "a"}])
    AsyncFenced.perform_async([{"id": "a"}])
    assert process(handler_of(server, Fenced))
    assert process(handler_of(server, AsyncFenced))
    (epoch, fence, remaining), (tag, async_fence) = seen
    assert epoch > 0 and fence == leases.fence_of(0, epoch)
    async_epoch = int(handler_of(server, AsyncFenced).token.split()[0])
    assert 0 < remaining <= coordinator.lease_ttl and tag == "async"
    assert async_fence == leases.fence_of(0, async_epoch)
    assert lowkiq.current_batch() is None  # outside perform

    # Another owner takes the shard: the fence a later batch sees is higher.
    queue = Fenced.queue(redis_client)
    redis_client.delete(queue.keys.lease(0))
    lease, _, _ = leases.acquire(queue, 0, "another:1:x", 10.0)
    assert lease is not None and lease.epoch > epoch
    assert leases.fence_of(0, lease.epoch) > fence
    # Time (the epoch) dominates a fence in any layout: a later owner's is higher whatever
    # the shard numbers (a queue starts again at shard 0 after Redis lost its data).
    assert leases.fence_of(0, lease.epoch) > leases.fence_of(2**19, lease.epoch - 1)
    # Every fence is above every fence of the former formula ``shard * 2**43 + epoch``
    # for shard numbers below 200,000, and fits a signed 64-bit integer until 2248.
    assert leases.fence_of(0, lease.epoch) > 200_000 * 2**43 + lease.epoch
    assert leases.fence_of(0, 2**43 - 1) < 2**63


def test_check_raises_lease_lost_when_another_process_took_the_shard(
    built: tuple[Server, Coordinator], redis_client: redis.Redis
) -> None:
    server, _ = built
    handler = handler_of(server, Fenced)
    Fenced.perform_async([{"id": "check"}])
    assert process(handler)
    assert isinstance(seen[-1], lowkiq.LeaseLost)
    # The batch's failure is refused as well: the new owner restores and runs it.
    assert handler.lost
    assert Fenced.queries().fetch(["check"]) == []


def test_a_shard_whose_lease_may_have_lapsed_performs_nothing_until_renewed(
    built: tuple[Server, Coordinator], redis_client: redis.Redis
) -> None:
    server, _ = built
    handler = handler_of(server, Fenced)
    Fenced.perform_async([{"id": "late"}])
    # The process was frozen: no renewal was confirmed for longer than the TTL.
    handler.term.confirmed_at -= 60
    assert not process(handler)  # not popped until a renewal is confirmed
    assert seen == []
    (job,) = Fenced.queries().fetch(["late"])
    assert job["retry_count"] == -1  # queued again, as it was
    # Once a renewal is confirmed, the batch runs.
    handler.term.confirm(__import__("time").monotonic())
    assert process(handler)
    assert len(seen) == 1
