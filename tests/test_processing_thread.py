"""A processing thread takes the coordinator's shard changes in the order they were made."""

from __future__ import annotations

import threading
import time

import pytest
import redis

import lowkiq
from lowkiq.ownership import leases
from tests.one_thread import one_thread


class OrderWorker(lowkiq.Worker):
    shards_count = 2


def test_a_shard_lost_and_acquired_again_before_the_thread_looks_is_served(redis_url, redis_client):
    with one_thread(redis_url, OrderWorker) as (_, coordinator, lane):
        old = next(h for h in lane.handlers if h.shard == 0)
        # The lease lapsed (e.g. Redis failed over) and was acquired again while the
        # thread was backing off: both changes wait for it.
        lane.remove(old.key, release=False)
        new = coordinator.make_handler(0, "OrderWorker", 0, "7 me")
        lane.add(new)
        assert lane.apply()
        assert [h for h in lane.handlers if h.shard == 0] == [new]

        lane.add(coordinator.make_handler(0, "OrderWorker", 0, "8 me"))
        lane.remove(new.key, release=False)  # added, then taken away: not served
        assert lane.apply()
        assert [h for h in lane.handlers if h.shard == 0] == []
        assert [h.shard for h in lane.handlers] == [1]


class Recording(lowkiq.Worker):
    shards_count = 2
    performed: list[str] = []

    @classmethod
    def perform(cls, payloads_by_id):
        cls.performed.extend(payloads_by_id)


def test_a_hand_over_completes_when_redis_drops_the_connection_while_acking(
    redis_url, redis_client
):
    with one_thread(redis_url, Recording) as (_, coordinator, lane):
        queue = Recording.queue(redis_client)
        job_id = next(str(i) for i in range(100) if queue.shard_of(str(i)) == 0)
        Recording.perform_async([{"id": job_id}])
        handler = next(h for h in lane.handlers if h.shard == 0)
        assert handler.process()  # performed; its ack waits for the next pop
        assert lane.deferred.pending == [handler]

        # The coordinator moves shard 0 away, and Redis drops the thread's connection
        # just before the thread acks the shard's last batch.
        assert coordinator.holdings.give_up({("Recording", 1)}) == {0}
        own_id = lane.client.execute_command("CLIENT", "ID")
        redis_client.execute_command("CLIENT", "KILL", "ID", own_id)
        with pytest.raises(redis.ConnectionError):
            lane.apply()

        # The hand-over happened all the same: the shard is given up, its lease released
        # (or left to lapse), the coordinator told, and the thread's wake-ups still match
        # its shards.
        assert [h.shard for h in lane.handlers] == [1]
        assert lane.wake_keys == [queue.keys.wake_list(1)]
        assert handler.key not in coordinator.holdings._releasing
        assert handler.key not in coordinator.holdings.owned()
        lane.wait()  # no ValueError: the thread goes on
        # The next owner restores the unacked batch: nothing is lost.
        redis_client.delete(queue.keys.lease(0))  # in case the release was lost too
        lease, restored, _ = leases.acquire(queue, 0, "next", 5)
        assert lease is not None and restored == 1


def test_an_idle_thread_asked_to_give_a_shard_up_stops_waiting_at_once(redis_url, redis_client):
    with one_thread(
        redis_url, OrderWorker, client_options={"socket_timeout": 60}, poll_interval=30.0
    ) as (_, coordinator, lane):
        assert len(lane.handlers) == 2
        waiting = threading.Thread(target=lane.wait)
        waiting.start()
        time.sleep(0.2)  # blocked on its shards' wake lists, for up to 30 s
        coordinator.quiet = True  # its shards go to other processes
        coordinator.beat()
        waiting.join(3)
        assert not waiting.is_alive()  # woken, not left waiting for poll_interval
        assert lane.apply() and lane.handlers == []
