"""Cancels in storage (``Worker.actions().cancel``, ``lua/jobs_cancel.lua``,
``lua/cancel_announce.lua``, ``lua/cancel_settle.lua``) and the reader every process runs
(:class:`lowkiq.ownership.cancels.CancelReader`), on a real Redis: what a cancel deletes
and announces, that only the lease holder settles a batch's cancelled jobs and only that
batch's, that the announcements expire, and that a reshard keeps the cancelled count."""

from __future__ import annotations

from typing import Any

import pytest
import redis

import lowkiq
from lowkiq.ownership.cancels import Cancelled, CancelReader
from lowkiq.ownership.resharding import reshard
from lowkiq.storage.keys import OwnershipKeys
from lowkiq.storage.scripts import Scripts
from tests.leasing import ack, batch, pop, token

STREAM = OwnershipKeys().cancels_stream


@pytest.fixture
def orders(redis_client: redis.Redis) -> type[lowkiq.Worker]:
    class Orders(lowkiq.Worker):
        shards_count = 2
        batch_size = 10
        track = True

    lowkiq.settings.workers = [Orders]
    return Orders


def shard_of(worker: type[lowkiq.Worker], job_id: str) -> int:
    return worker.queue().shard_of(job_id)


def settle(worker: type[lowkiq.Worker], shard: int, token_: str, batch_: int, *ids: str) -> Any:
    queue = worker.queue()
    scripts = Scripts.for_client(queue.client, queue.track_length)
    return scripts.cancel_settle(keys=[queue.keys.prefix(shard)], args=[token_, batch_, *ids])


def test_cancel_deletes_what_is_queued_and_announces_the_running_batch(
    orders: type[lowkiq.Worker], redis_client: redis.Redis
) -> None:
    queue = orders.queue()
    orders.perform_async([{"id": "run", "payload": 1}, {"id": "wait", "payload": 1}])
    shard = shard_of(orders, "run")
    popped = pop(queue, shard, 10)
    assert popped is not None and "run" in [job.id for job in popped]
    orders.perform_async([{"id": "run", "payload": 2}])  # queued behind its batch
    queued_before = orders.metrics()["length"]

    assert orders.actions().cancel(["run", "nobody"]) == 1
    assert orders.queries().fetch(["run"]) == []
    assert orders.metrics()["length"] == queued_before - 1
    assert orders.metrics()["busy"] == len(popped)  # the running batch is not touched
    entries = redis_client.xrange(STREAM)
    assert [fields for _, fields in entries] == [
        {
            b"queue": orders.queue_name.encode(),
            b"shard": str(shard).encode(),
            b"batch": str(batch(queue, shard)).encode(),
            b"ids": b"run",
        }
    ]
    assert 0 < redis_client.pttl(STREAM) <= 10 * 60 * 1000
    # Only the queued job of an id that is not running: nothing to announce.
    assert orders.actions().cancel(["wait"]) == (0 if "wait" in [j.id for j in popped] else 1)
    assert len(redis_client.xrange(STREAM)) == 1 + ("wait" in [j.id for j in popped])


def test_the_reader_notes_the_batches_of_its_own_queues_once(
    orders: type[lowkiq.Worker], redis_client: redis.Redis
) -> None:
    queue = orders.queue()
    orders.perform_async([{"id": "a", "payload": 1}])
    shard = shard_of(orders, "a")
    pop(queue, shard, 10)
    cancelled = Cancelled()
    reader = CancelReader([orders.queue_name], cancelled)
    other = Cancelled()
    CancelReader(["SomeOtherQueue"], other).follow(redis_client)
    orders.actions().cancel(["a"])
    reader.follow(redis_client)
    key = (orders.queue_name, shard, batch(queue, shard))
    assert cancelled.ids(key) == {"a"}
    assert len(other) == 0
    cancelled.forget(key, ["a"])
    reader.follow(redis_client)  # nothing new
    assert cancelled.ids(key) == frozenset()


def test_only_the_lease_holder_settles_and_only_its_batch(
    orders: type[lowkiq.Worker], redis_client: redis.Redis
) -> None:
    queue = orders.queue()
    orders.perform_async([{"id": "x", "payload": 1}])
    shard = shard_of(orders, "x")
    pop(queue, shard, 10)
    held, number = token(queue, shard), batch(queue, shard)
    with pytest.raises(redis.ResponseError, match="FENCED"):
        settle(orders, shard, "999 somebody", number, "x")
    with pytest.raises(redis.ResponseError, match="STALE"):
        settle(orders, shard, held, number + 1, "x")
    assert orders.metrics()["cancelled"] == 0
    assert settle(orders, shard, held, number, "x", "not-in-the-batch") == 1
    metrics = orders.metrics()
    assert (metrics["cancelled"], metrics["busy"], metrics["processed"]) == (1, 0, 0)
    assert [e.event for e in orders.history("x")][-1] == "cancelled"
    assert ack(queue, shard) == 0  # the rest of the batch: nothing left


def test_a_reshard_keeps_the_cancelled_count(orders: type[lowkiq.Worker]) -> None:
    queue = orders.queue()
    ids = [f"o{n}" for n in range(6)]
    orders.perform_async([{"id": i, "payload": 1} for i in ids])
    for shard in queue.shards:
        popped = pop(queue, shard, 10) or []
        settle(orders, shard, token(queue, shard), batch(queue, shard), *[j.id for j in popped])
    assert orders.metrics()["cancelled"] == 6
    reshard(queue, 3)
    assert orders.metrics()["cancelled"] == 6


def test_a_cancelled_batch_put_back_leaves_its_cancelled_jobs_out(
    orders: type[lowkiq.Worker],
) -> None:
    queue = orders.queue()
    orders.perform_async([{"id": i, "payload": 1} for i in ("k", "m", "n")])
    shard = shard_of(orders, "k")
    popped = [job.id for job in pop(queue, shard, 10) or []]
    assert "k" in popped
    orders.actions().cancel(["k"])
    # Its shard is handed over before the batch ran: it goes back, but for "k".
    restored = queue.restore(shard, token(queue, shard), batch(queue, shard), reason="given_up")
    assert restored == len(popped) - 1
    assert orders.queries().fetch(["k"]) == []
    assert orders.metrics()["cancelled"] == 1
    assert [e.event for e in orders.history("k")][-1] == "cancelled"
    # Popped again later, the id is not cancelled any more: its new payloads run.
    orders.perform_async([{"id": "k", "payload": 2}])
    again = pop(queue, shard, 10) or []
    assert "k" in [job.id for job in again]
    restored = queue.restore(shard, token(queue, shard), batch(queue, shard), reason="given_up")
    assert restored == len(again)
    assert orders.metrics()["cancelled"] == 1


def test_a_cancelled_batch_whose_process_died_is_not_run_again(
    orders: type[lowkiq.Worker],
) -> None:
    from lowkiq.ownership import leases

    queue = orders.queue()
    orders.perform_async([{"id": "d", "payload": 1}])
    shard = shard_of(orders, "d")
    assert [job.id for job in pop(queue, shard, 10) or []] == ["d"]
    orders.actions().cancel(["d"])
    queue.client.delete(queue.keys.lease(shard))  # its process died
    lease, restored, _ = leases.acquire(queue, shard, "next-owner", 10)
    assert lease is not None and restored == 0
    metrics = orders.metrics()
    assert (metrics["length"], metrics["busy"], metrics["cancelled"]) == (0, 0, 1)
    assert orders.metrics()["morgue_length"] == 0
