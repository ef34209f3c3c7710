"""A processing thread takes the coordinator's shard changes in the order they were made."""

from __future__ import annotations

import redis

import lowkiq
from lowkiq.server import Server
from lowkiq.settings import Settings


class OrderWorker(lowkiq.Worker):
    shards_count = 2


def test_a_shard_lost_and_acquired_again_before_the_thread_looks_is_served(redis_url, redis_client):
    config = Settings(
        workers=[OrderWorker], threads_per_node=1, redis=lambda: redis.Redis.from_url(redis_url)
    )
    server = Server(config)
    coordinator = server.build()
    (lane,) = server.lanes
    try:
        coordinator.beat()
        lane.apply()
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
    finally:
        coordinator.leave()
        lane.client.close()
