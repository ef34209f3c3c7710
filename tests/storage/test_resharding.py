"""Changing a queue's shards_count online (lowkiq.ownership.resharding), on a server and a
cluster."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from storage_support import NOW, hot_layout, retry_in

import lowkiq
from lowkiq.ownership import leases
from lowkiq.ownership.resharding import RECORD_FIELDS, Progress, ReshardError, reshard
from lowkiq.storage import layout as layouts
from lowkiq.storage.layout import Layout
from lowkiq.storage.queries import Queries
from lowkiq.storage.queue import REROUTES, Queue
from tests.leasing import ack, fail, pop

IDS = [f"order{n}" for n in range(60)]


class Stop(Exception):
    """Raised from a progress callback: the command is interrupted there."""


@pytest.fixture
def orders(redis_client: Any) -> type[lowkiq.Worker]:
    class OrderWorker(lowkiq.Worker):
        shards_count = 3
        batch_size = 100
        max_retry_count = 1

    lowkiq.settings.workers = [OrderWorker]
    return OrderWorker


def enqueue(worker: type[lowkiq.Worker], ids: list[str], version: int) -> None:
    worker.perform_async([{"id": i, "payload": version, "score": NOW + version} for i in ids])


def snapshot(queue: Queue) -> tuple[list[Any], list[Any]]:
    """Every queued and dead job of IDS, as the queries show them."""
    queries = Queries(queue)
    return queries.fetch(IDS), queries.morgue_fetch(IDS)


def test_every_job_moves_to_its_new_shard_with_its_payloads_schedule_and_errors(
    orders: type[lowkiq.Worker],
) -> None:
    queue = orders.queue()
    enqueue(orders, IDS[:10], 0)
    for shard in range(3):  # retries, with their error
        fail(queue, shard, pop(queue, shard, 100) or [], "boom", retry_in, 1, now=NOW)
    fail(queue, 0, pop(queue, 0, 100) or [], "dead", retry_in, 0, now=NOW)  # dead jobs
    enqueue(orders, IDS[10:13], 0)
    ack(queue, 1) if pop(queue, 1, 100) else None
    enqueue(orders, IDS, 1)
    enqueue(orders, IDS[:20], 2)
    processed_before = orders.metrics()["processed"]
    queued_before, dead_before = snapshot(queue)
    assert len(queued_before) == 60 and dead_before
    assert {job["retry_count"] for job in queued_before} == {-1, 0}

    events: list[Progress] = []
    final = reshard(queue, 7, events.append)

    assert final == Layout(base=3, count=7)
    assert orders.queue().shards == range(3, 10)
    queued_after, dead_after = snapshot(orders.queue())
    assert queued_after == queued_before
    for job in queued_after:
        assert orders.queue().shard_of(job["id"]) in range(3, 10)
    for old in range(3):
        assert queue.client.get(queue.keys.hold(old)) == b"retired"
        assert queue.client.zcard(queue.keys.perform_in_zset(old)) == 0
    for new in range(3, 10):
        assert queue.client.get(queue.keys.hold(new)) is None
    assert orders.metrics()["processed"] == processed_before
    assert dead_after == dead_before
    assert events[-1].event == "done" and events[-1].moved == 60 + len(dead_before)
    assert any("old shard 2 emptied" in str(e) for e in events)


def test_a_stale_enqueue_into_a_retired_shard_is_sent_to_the_new_shards(
    orders: type[lowkiq.Worker],
) -> None:
    stale = Queue(orders.queue().client, orders.queue_name, 3, layout=Layout(0, 3))
    reshard(orders.queue(), 5)
    stale.push([("late", b'"x"', NOW, NOW, None)])
    queue = orders.queue()
    job = queue.shard_of("late")
    assert job in range(3, 8)
    assert [j["id"] for j in Queries(queue).fetch(["late"])] == ["late"]
    for old in range(3):
        assert queue.client.zcard(queue.keys.perform_in_zset(old)) == 0


def test_an_enqueue_refused_at_every_reroute_names_what_is_and_is_not_enqueued(
    orders: type[lowkiq.Worker],
) -> None:
    # A retired shard whose layout is never replaced: pushes into it are refused
    # every time, so the enqueue gives up after REROUTES tries.
    queue = orders.queue()
    retired = queue.shard_of(IDS[0])
    queue.write("reshard_hold", [queue.keys.prefix(retired)], "retired")
    refused = [i for i in IDS if queue.shard_of(i) == retired]
    accepted = [i for i in IDS if queue.shard_of(i) != retired]

    with pytest.raises(lowkiq.EnqueueIncomplete) as raised:
        enqueue(orders, IDS, 1)

    assert sorted(raised.value.enqueued) == sorted(accepted)
    assert sorted(raised.value.not_confirmed) == sorted(refused)
    assert f"resharded {REROUTES} times" in str(raised.value)
    assert sorted(job["id"] for job in Queries(queue).fetch(IDS)) == sorted(accepted)
    assert queue.client.zcard(queue.keys.perform_in_zset(retired)) == 0


def test_new_shards_stay_closed_until_their_old_shards_are_emptied_and_merge_in_order(
    orders: type[lowkiq.Worker],
) -> None:
    queue = orders.queue()
    enqueue(orders, ["a"], 1)
    old_shard = queue.shard_of("a")
    seen: list[str] = []

    def during(progress: Progress) -> None:
        seen.append(progress.event)
        if progress.event.startswith("began"):
            # New jobs go to the new, closed shard: none of them is popped yet.
            enqueue(orders, ["a"], 2)
            new_queue = orders.queue()
            new = new_queue.shard_of("a")
            token = leases.acquire(new_queue, new, "t", 60)[0]
            assert token is not None
            popped = new_queue.pop(new, token.token, 10)
            assert popped.held and popped.jobs == []
            leases.release(new_queue, [token])

    reshard(queue, 6, during)
    queue = orders.queue()
    new = queue.shard_of("a")
    assert new != old_shard
    batch = pop(queue, new, 10)
    assert batch is not None and [job.payloads for job in batch] == [[1, 2]]


def test_the_old_jobs_schedule_retry_count_and_error_win_over_jobs_pushed_meanwhile(
    orders: type[lowkiq.Worker],
) -> None:
    queue = orders.queue()
    enqueue(orders, ["a"], 1)
    shard = queue.shard_of("a")
    fail(queue, shard, pop(queue, shard, 10) or [], "boom", retry_in, 5, now=NOW)
    before = Queries(queue).fetch(["a"])[0]

    def during(progress: Progress) -> None:
        if progress.event.startswith("began"):
            enqueue(orders, ["a"], 2)

    reshard(queue, 4, during)
    after = Queries(orders.queue()).fetch(["a"])[0]
    assert after["retry_count"] == before["retry_count"] == 0
    assert after["perform_in"] == before["perform_in"]
    assert after["error"] == before["error"] == "boom"
    assert [payload for payload, _ in after["payloads"]] == [1, 2]


def test_an_interrupted_reshard_goes_on_when_run_again(orders: type[lowkiq.Worker]) -> None:
    queue = orders.queue()
    enqueue(orders, IDS, 1)
    before = snapshot(queue)

    def crash(progress: Progress) -> None:
        if progress.event == "old shard 1 emptied":
            raise Stop

    with pytest.raises(Stop):
        reshard(queue, 8, crash)
    assert orders.queue().layout.previous == (0, 3)
    with pytest.raises(ReshardError, match="a reshard to 8 shards is running"):
        reshard(orders.queue(), 9)
    reshard(orders.queue(), 8)
    assert snapshot(orders.queue()) == before
    assert orders.queue().layout == Layout(3, 8)


def test_merging_a_chunk_twice_changes_nothing(orders: type[lowkiq.Worker]) -> None:
    queue = orders.queue()
    with hot_layout(SPILL_PAYLOADS=2):
        enqueue(orders, IDS[:5], 1)
        enqueue(orders, IDS[:5], 2)
        enqueue(orders, IDS[:5], 3)  # hot ids: their payloads in a sorted set
        before = snapshot(queue)
        old = queue.shard_of(IDS[0])
        queue.write("reshard_hold", [queue.keys.prefix(old)], "retired")
        records = queue.run("reshard_take", old, 100)
        assert len(records) == RECORD_FIELDS * sum(1 for i in IDS[:5] if queue.shard_of(i) == old)
        for _ in range(2):
            queue.run("reshard_put", 20, NOW, *records)
        fetched = Queries(Queue(queue.client, queue.name, 1, layout=Layout(20, 1))).fetch(IDS[:5])
        assert fetched == [job for job in before[0] if queue.shard_of(job["id"]) == old]


def test_a_running_batch_is_waited_for_and_an_unserved_one_restored(
    orders: type[lowkiq.Worker],
) -> None:
    queue = orders.queue()
    enqueue(orders, IDS, 1)
    before = snapshot(queue)
    running = pop(queue, 0, 100)
    assert running
    # Shard 1's batch was left by a process that died: nobody holds its lease.
    left = pop(queue, 1, 100)
    assert left
    queue.client.delete(queue.keys.lease(1))

    def finish_later() -> None:
        time.sleep(0.3)
        fail(queue, 0, running, "boom", retry_in, 1, now=NOW)

    threading.Thread(target=finish_later).start()
    reshard(queue, 5)
    after_queued, _ = snapshot(orders.queue())
    assert {job["id"] for job in after_queued} == {job["id"] for job in before[0]}
    failed = {job["id"] for job in after_queued if job["retry_count"] == 0}
    assert failed == {job.id for job in running}


def test_bad_requests_change_nothing(orders: type[lowkiq.Worker]) -> None:
    queue = orders.queue()
    with pytest.raises(ReshardError, match="has 3 shard"):
        reshard(queue, 3)
    with pytest.raises(ReshardError, match="at least 1"):
        reshard(queue, 0)
    queue.client.set(queue.keys.reshard_lock, "reshard:elsewhere:1")
    with pytest.raises(ReshardError, match="another command"):
        reshard(queue, 4)
    assert queue.refresh_layout() == Layout(0, 3)
    assert queue.client.exists(queue.keys.retired_set) == 0
    assert all(queue.client.get(queue.keys.hold(shard)) is None for shard in range(3, 10))


def test_the_first_use_pins_the_class_count_and_a_changed_class_does_not_split_ids(
    orders: type[lowkiq.Worker],
) -> None:
    enqueue(orders, IDS, 1)
    orders.shards_count = 9  # a deploy changed the class without a reshard
    layouts.read(orders.queue().client, orders.queue_name, 9)  # no cached layout
    enqueue(orders, IDS, 2)
    queue = orders.queue()
    assert queue.layout == Layout(0, 3)
    assert [job["payloads"] for job in Queries(queue).fetch(IDS[:2])] == [
        [[1, NOW + 1], [2, NOW + 2]]
    ] * 2
