"""A processing thread's round: the due shards' pops go out together (one write per
master), then each batch runs in turn and is acked by that shard's next pop; on one
server and on a Redis Cluster."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

import lowkiq
from lowkiq.cluster_connection import thread_client
from lowkiq.connection import Client
from lowkiq.ownership import leases
from lowkiq.processing_thread import ProcessingThread
from lowkiq.shard_handler import DeferredAck, ShardHandler
from lowkiq.storage.queue import Queue
from tests.both_redis import server_or_cluster_client  # noqa: F401  (redis_client)
from tests.leasing import token

NOW = 1_000_000.0


class Rounds(lowkiq.Worker):
    shards_count = 4
    batch_size = 1
    #: (shard, job id) of every performed job, in order.
    performed: list[tuple[int, str]] = []
    #: Set by the job whose perform stops the lane.
    stop_at: tuple[str, threading.Event] | None = None

    @classmethod
    def perform(cls, payloads_by_id: dict[str, list[object]]) -> None:
        for job_id in payloads_by_id:
            cls.performed.append((Rounds.queue(lowkiq.settings.client()).shard_of(job_id), job_id))
            if cls.stop_at is not None and cls.stop_at[0] == job_id:
                cls.stop_at[1].set()


@pytest.fixture(autouse=True)
def rounds_worker(redis_client: Client) -> Iterator[None]:
    lowkiq.settings.workers = [Rounds]
    Rounds.performed, Rounds.stop_at = [], None
    yield
    Rounds.stop_at = None


def ids_by_shard(queue: Queue, per_shard: int) -> dict[int, list[str]]:
    """``per_shard`` job ids of each shard of Rounds."""
    ids: dict[int, list[str]] = {shard: [] for shard in range(Rounds.shards_count)}
    number = 0
    while any(len(found) < per_shard for found in ids.values()):
        shard = queue.shard_of(str(number))
        if len(ids[shard]) < per_shard:
            ids[shard].append(str(number))
        number += 1
    return ids


def lane_of(client: Client, stop: threading.Event) -> tuple[ProcessingThread, Queue]:
    """A lane serving every shard of Rounds, in order, on a thread's own client."""
    thread = thread_client(client)
    queue = Rounds.queue(thread)
    queue.refresh_layout(Rounds.queue(client).layout)
    deferred = DeferredAck()
    handlers = [
        ShardHandler(Rounds, shard, queue, token(queue, shard), deferred)
        for shard in range(Rounds.shards_count)
    ]
    return ProcessingThread(thread, handlers, deferred, 1.0, stop), queue


def enqueue(queue: Queue, per_shard: int) -> dict[int, list[str]]:
    ids = ids_by_shard(queue, per_shard)
    Rounds.perform_async(
        [
            {"id": job_id, "perform_in": NOW + rank}
            for shard_ids in ids.values()
            for rank, job_id in enumerate(shard_ids)
        ]
    )
    return ids


def in_processing(client: Client, queue: Queue) -> int:
    return sum(client.hlen(queue.keys.processing_hash(s)) for s in range(Rounds.shards_count))


def test_a_round_runs_each_shards_batch_in_turn_and_the_next_round_acks_them(
    redis_client: Client,
) -> None:
    lane, queue = lane_of(redis_client, threading.Event())
    ids = enqueue(queue, 2)
    order = [lane.handlers[i] for i in (2, 0, 3, 1)]
    try:
        assert lane.process(order) == 4
        assert Rounds.performed == [(s, ids[s][0]) for s in (2, 0, 3, 1)]
        # Each finished batch waits for its ack, which rides on its shard's next pop.
        assert in_processing(redis_client, queue) == 4 and Rounds.metrics()["processed"] == 0
        assert lane.process(order) == 4
        assert Rounds.performed[4:] == [(s, ids[s][1]) for s in (2, 0, 3, 1)]
        assert Rounds.metrics()["processed"] == 4
        assert lane.process(order) == 0  # nothing left: the pops ack the last batches
        assert Rounds.metrics()["processed"] == 8
        assert in_processing(redis_client, queue) == 0
    finally:
        lane.client.close()


def test_a_lane_stopping_mid_round_puts_the_batches_not_yet_run_back(
    redis_client: Client,
) -> None:
    stop = threading.Event()
    lane, queue = lane_of(redis_client, stop)
    ids = enqueue(queue, 1)
    Rounds.stop_at = (ids[1][0], stop)  # the stop arrives while shard 1's batch runs
    try:
        assert lane.process(lane.handlers) == 2
        assert Rounds.performed == [(0, ids[0][0]), (1, ids[1][0])]
        # Shards 2 and 3 were popped with the others, but their batches went back unrun.
        for shard in (2, 3):
            assert redis_client.hlen(queue.keys.processing_hash(shard)) == 0
            assert redis_client.zcard(queue.keys.perform_in_zset(shard)) == 1
        stop.clear()
        Rounds.stop_at = None
        lane.process(lane.handlers)
        lane.flush_acks()
        performed = sorted(Rounds.performed)
        assert performed == sorted((s, i[0]) for s, i in ids.items())  # each exactly once
        assert Rounds.metrics()["processed"] == 4
    finally:
        lane.client.close()


def test_a_shard_taken_over_drops_out_of_the_round_and_the_others_run(
    redis_client: Client,
) -> None:
    lane, queue = lane_of(redis_client, threading.Event())
    ids = enqueue(queue, 1)
    redis_client.delete(queue.keys.lease(2))  # shard 2's lease lapsed; another process took it
    other, _, _ = leases.acquire(Rounds.queue(redis_client), 2, "another process", 60.0)
    assert other is not None
    try:
        assert lane.process(lane.handlers) == 3
        assert Rounds.performed == [(s, ids[s][0]) for s in (0, 1, 3)]
        assert lane.handlers[2].lost and not any(
            h.lost for i, h in enumerate(lane.handlers) if i != 2
        )
        assert redis_client.zcard(queue.keys.perform_in_zset(2)) == 1  # left to its new owner
    finally:
        lane.client.close()
