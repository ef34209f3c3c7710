"""An idle processing thread's round reads its shards' due times once, and its wait still
ends when the earliest job is due (on one server: on a Redis Cluster it polls)."""

from __future__ import annotations

import threading
import time

import redis

import lowkiq
from lowkiq.cluster_connection import thread_client
from lowkiq.processing_thread import ProcessingThread
from lowkiq.schedulers import LagScheduler
from lowkiq.shard_handler import DeferredAck, ShardHandler
from tests.leasing import token


class Idle(lowkiq.Worker):
    shards_count = 4
    performed: list[str] = []

    @classmethod
    def perform(cls, payloads_by_id: dict[str, list[object]]) -> None:
        cls.performed.extend(payloads_by_id)


def script_calls(client: redis.Redis) -> int:
    """Scripts Redis has run so far."""
    return int(client.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0))


def test_an_idle_round_reads_the_due_times_once_and_wakes_when_a_job_is_due(
    redis_client: redis.Redis,
) -> None:
    lowkiq.settings.workers = [Idle]
    Idle.performed = []
    thread = thread_client(redis_client)
    queue = Idle.queue(thread)
    deferred = DeferredAck()
    handlers = [
        ShardHandler(Idle, shard, queue, token(queue, shard), deferred)
        for shard in range(Idle.shards_count)
    ]
    processing = ProcessingThread(thread, handlers, deferred, 30.0, threading.Event())
    step = LagScheduler()(processing)
    try:
        processing.due_in()  # Redis has the script now
        due = time.time() + 0.4
        Idle.perform_async([{"id": "soon", "perform_in": due}])
        thread.delete(*processing.wake_keys)  # the thread starts waiting after the enqueue
        before = script_calls(redis_client)
        step()  # nothing due: waits until "soon" is
        assert script_calls(redis_client) - before == Idle.shards_count
        assert time.time() >= due - 0.01
        step()
        assert Idle.performed == ["soon"]
    finally:
        thread.close()
