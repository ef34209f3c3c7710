"""A client with a small socket timeout: the coordinator's waits end before it, so the
heartbeat goes on and jobs keep running."""

from __future__ import annotations

import time

import redis

import lowkiq
from lowkiq.ownership.membership import Membership
from lowkiq.runtime.server import Server
from lowkiq.settings import Settings
from tests.apps.runner import eventually


def test_a_wait_for_a_nudge_ends_before_the_socket_times_out(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url, socket_timeout=0.3)
    membership = Membership(client, "host:1:abc", 10.0)
    assert membership.wait_for_nudge(1.0) is False  # no TimeoutError
    client.close()


class Steady(lowkiq.Worker):
    shards_count = 2
    done: list[str] = []

    @classmethod
    def perform(cls, payloads_by_id: dict) -> None:
        cls.done.extend(payloads_by_id)


def test_a_worker_whose_client_times_out_in_half_a_second_keeps_processing(
    redis_url: str, redis_client: redis.Redis
) -> None:
    config = Settings(
        workers=[Steady],
        threads_per_node=1,
        poll_interval=0.2,
        lease_ttl=2.0,
        heartbeat_interval=1.0,
        redis=lambda: redis.Redis.from_url(redis_url, socket_timeout=0.5),
    )
    Steady.done.clear()
    server = Server(config)
    server.start()
    try:
        # Longer than several lease TTLs: the heartbeat and renewals must go on.
        for number in range(6):
            Steady.perform_async([{"id": str(number)}])
            time.sleep(1.0)
        eventually(lambda: sorted(Steady.done) == [str(n) for n in range(6)], timeout=10)
        assert server.fatal is None
    finally:
        server.request_stop()
        server.stop()
