"""A processing thread's calls on a Redis Cluster: a pop that acks another shard (in a
call of its own), and a thread reading its shards' earliest jobs in one write per
master."""

from __future__ import annotations

import threading
import time

import redis

import lowkiq
from lowkiq.cluster_connection import ClusterThreadClient
from lowkiq.processing_thread import ProcessingThread
from lowkiq.schedulers import build_lag_scheduler
from lowkiq.shard_handler import DeferredAck, ShardHandler
from lowkiq.storage.queue import ACK_FENCED, Queue
from tests.leasing import token

NOW = 1_000_000.0


class Spread(lowkiq.Worker):
    shards_count = 12


def thread_queue(thread: ClusterThreadClient, client: redis.RedisCluster) -> Queue:
    """Spread's queue on a thread's client, its layout read as a server reads it."""
    queue = Spread.queue(thread)
    queue.refresh_layout(Spread.queue(client).layout)
    return queue


def shards_by_master(client: redis.RedisCluster) -> dict[str, list[int]]:
    """The shards of Spread, by the master serving each."""
    queue = Spread.queue(client)
    by_master: dict[str, list[int]] = {}
    for shard in range(Spread.shards_count):
        master = client.get_node_from_key(queue.keys.prefix(shard)).name
        by_master.setdefault(master, []).append(shard)
    return by_master


def test_a_pop_acks_another_shard_on_the_same_or_another_master(
    cluster_client: redis.RedisCluster,
) -> None:
    lowkiq.settings.workers = [Spread]
    Spread.perform_async([{"id": n, "perform_in": NOW - 1} for n in range(200)])
    thread = ClusterThreadClient(cluster_client)
    queue = thread_queue(thread, cluster_client)
    masters = list(shards_by_master(cluster_client).values())
    first, same, other = masters[0][0], masters[0][1], masters[1][0]
    assert queue.pop(first, token(queue, first), 2, now=NOW).jobs
    # The same master.
    popped = queue.pop(
        same, token(queue, same), 2, now=NOW, ack_shard=first, ack_token=token(queue, first)
    )
    assert (popped.acked, len(popped.jobs)) == (2, 2)
    # Another master.
    popped = queue.pop(
        other, token(queue, other), 2, now=NOW, ack_shard=same, ack_token=token(queue, same)
    )
    assert (popped.acked, len(popped.jobs)) == (2, 2)
    assert all(queue.shard_of(job.id) == other for job in popped.jobs)
    # A stale ack token: nothing acked, the pop still happens.
    popped = queue.pop(first, token(queue, first), 2, now=NOW, ack_shard=other, ack_token="9 x")
    assert popped.acked == ACK_FENCED and len(popped.jobs) == 2
    assert Spread.metrics()["processed"] == 4
    cluster_client.execute_command("SCRIPT FLUSH", target_nodes=redis.RedisCluster.PRIMARIES)
    popped = queue.pop(
        same, token(queue, same), 2, now=NOW, ack_shard=other, ack_token=token(queue, other)
    )
    assert (popped.acked, len(popped.jobs)) == (2, 2)
    thread.close()


def test_a_lane_reads_its_shards_earliest_jobs_across_masters(
    cluster_client: redis.RedisCluster,
) -> None:
    lowkiq.settings.workers = [Spread]
    thread = ClusterThreadClient(cluster_client)
    queue = thread_queue(thread, cluster_client)
    later = time.time() + 1000  # Redis's clock is this host's
    Spread.perform_async([{"id": n, "perform_in": later + n} for n in range(40)])
    handlers = [ShardHandler(Spread, shard, queue, token(queue, shard)) for shard in range(12)]
    lane = ProcessingThread(thread, handlers, DeferredAck(), 1.0, threading.Event())
    expected = [
        min((later + n for n in range(40) if queue.shard_of(str(n)) == shard), default=None)
        for shard in range(12)
    ]
    before = time.time()
    due_in = lane.due_in()
    after = time.time()
    assert [delay is None for delay in due_in] == [at is None for at in expected]
    for delay, at in zip(due_in, expected, strict=True):
        assert delay is None or at is None or at - after - 0.5 <= delay <= at - before + 0.5
    thread.close()


def test_each_shards_ack_rides_on_its_own_next_pop(cluster_client: redis.RedisCluster) -> None:
    class Blank(Spread):
        queue_name = "Spread"

        @classmethod
        def perform(cls, payloads_by_id: dict[str, list[object]]) -> None:
            pass

    lowkiq.settings.workers = [Blank]
    Blank.perform_async([{"id": n, "perform_in": NOW - 1} for n in range(200)])
    thread = ClusterThreadClient(cluster_client)
    queue = thread_queue(thread, cluster_client)
    deferred = DeferredAck()
    first, second = (ShardHandler(Blank, s, queue, token(queue, s), deferred) for s in (0, 1))
    processing = lambda shard: cluster_client.hlen(queue.keys.processing_hash(shard))  # noqa: E731

    assert first.process() and second.process()
    # Two slots: neither pop acked the other shard's batch; both wait for an ack.
    assert deferred.pending == [first, second]
    done = [processing(0), processing(1)]
    assert all(done) and Blank.metrics()["processed"] == 0
    assert first.process()  # acks its own last batch in the same script
    assert Blank.metrics()["processed"] == done[0]
    assert deferred.pending == [second, first]
    again = processing(0)
    deferred.flush()  # the thread goes idle: every held batch is acked
    assert deferred.pending == [] and processing(0) == processing(1) == 0
    assert Blank.metrics()["processed"] == done[0] + done[1] + again
    thread.close()


def test_a_shard_with_nothing_due_has_its_last_batch_acked_while_the_others_work(
    cluster_client: redis.RedisCluster,
) -> None:
    class Blank(Spread):
        queue_name = "Spread"
        batch_size = 1

        @classmethod
        def perform(cls, payloads_by_id: dict[str, list[object]]) -> None:
            pass

    lowkiq.settings.workers = [Blank]
    thread = ClusterThreadClient(cluster_client)
    queue = thread_queue(thread, cluster_client)
    ids = {
        shard: [str(n) for n in range(500) if queue.shard_of(str(n)) == shard] for shard in (0, 1)
    }
    Blank.perform_async([{"id": i, "perform_in": NOW} for i in ids[0][:1] + ids[1][:20]])
    deferred = DeferredAck()
    # Shard 2 has nothing: no round gives every shard a batch, each reads the earliest jobs.
    handlers = [ShardHandler(Blank, s, queue, token(queue, s), deferred) for s in (0, 1, 2)]
    lane = ProcessingThread(thread, handlers, deferred, 1.0, threading.Event())
    step = build_lag_scheduler()(lane)
    for _ in range(4):
        step()
    # Shard 0 had one job; shard 1 still has work, so the thread never idled.
    assert cluster_client.zcard(queue.keys.perform_in_zset(1)) > 0
    assert cluster_client.hlen(queue.keys.processing_hash(0)) == 0
    thread.close()
