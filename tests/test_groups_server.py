"""Groups through a running worker server: the jobs of a group enqueued behind another
group's backlog are performed within the first turns, not after the backlog."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis

import lowkiq
from lowkiq.runtime.server import Server
from tests.apps.runner import eventually


class Tenants(lowkiq.Worker):
    shards_count = 2
    order: list[str] = []

    @classmethod
    def perform(cls, payloads_by_id: dict[str, list[Any]]) -> None:
        cls.order.extend(payloads_by_id)


@pytest.fixture
def tenants(redis_client: redis.Redis) -> Iterator[type[Tenants]]:
    Tenants.order = []
    lowkiq.settings.workers = [Tenants]
    lowkiq.settings.threads_per_node = 1
    yield Tenants


def test_a_server_takes_the_groups_in_turn(tenants: type[Tenants]) -> None:
    tenants.perform_async([{"id": f"a{n}", "group": "A"} for n in range(200)])
    tenants.perform_async([{"id": f"b{n}", "group": "B"} for n in range(6)])
    server = Server(lowkiq.settings)
    server.start()
    try:
        eventually(lambda: len(tenants.order) == 206, timeout=30)
    finally:
        server.request_stop()
        server.stop()
    queue = tenants.queue()
    for shard in queue.shards:
        in_shard = [job_id for job_id in tenants.order if queue.shard_of(job_id) == shard]
        b_jobs = [job_id for job_id in in_shard if job_id.startswith("b")]
        # A and B take turns in the shard: B's jobs alternate with A's from the first.
        assert in_shard[: 2 * len(b_jobs)][1::2] == b_jobs, in_shard[:20]
    assert tenants.metrics()["length"] == 0
