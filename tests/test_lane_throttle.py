"""A processing thread under a rate limit: a shard waiting for tokens is not popped before
its time, counts as due no sooner, and a thread whose every shard waits sleeps without
calling Redis."""

from __future__ import annotations

import time

import redis

import lowkiq
from lowkiq.server import Server
from lowkiq.settings import Settings


class Paced(lowkiq.Worker):
    shards_count = 1
    rate_limit = lowkiq.RateLimit(5, burst=1)  # a token every 200 ms

    @classmethod
    def perform(cls, payloads_by_id):
        pass


def calls(client: redis.Redis) -> int:
    """Commands Redis has run so far (this call's INFO included)."""
    return sum(stat["calls"] for stat in client.info("commandstats").values())


def test_a_thread_waits_for_its_shards_tokens_without_calling_redis(redis_url, redis_client):
    config = Settings(
        workers=[Paced], threads_per_node=1, redis=lambda: redis.Redis.from_url(redis_url)
    )
    server = Server(config)
    coordinator = server.build()
    (lane,) = server.lanes
    try:
        coordinator.beat()
        lane.apply()
        (handler,) = lane.handlers
        Paced.perform_async([{"id": n} for n in range(5)])
        assert handler.process()  # the bucket's one token; the next one is reserved
        assert not handler.ready()  # not popped before the reserved token is due
        (delay,) = lane.due_in()
        # 200 ms of refill, paid on the next step of the 50 ms grid (PACE_SECONDS).
        assert delay is not None and 0.1 < delay <= 0.25
        assert lane.throttled(lane.handlers) == 1

        before = calls(redis_client)
        started = time.monotonic()
        lane.wait()
        slept = time.monotonic() - started
        assert calls(redis_client) - before == 1  # the INFO above: nothing from the thread
        assert 0.1 < slept < 0.3
        assert handler.ready() and handler.process()
        assert Paced.metrics()["length"] == 3
    finally:
        coordinator.leave()
        lane.client.close()
