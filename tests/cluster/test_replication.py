"""``settings.wait_replicas``: every write waits (Redis WAIT) until replicas have it, so a
failover right after keeps it; a write that reaches fewer replicas is logged."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import redis

import lowkiq
from lowkiq.clients.embedded_cluster import start_cluster
from tests.apps.runner import eventually
from tests.cluster.cluster_support import failed_over
from tests.conftest import lowkiq_on
from tests.leasing import ack, pop


class DurableWorker(lowkiq.Worker):
    """Six shards, over every master."""

    shards_count = 6


def test_jobs_enqueued_with_wait_replicas_survive_their_masters_failover(tmp_path: Path) -> None:
    cluster = start_cluster(tmp_path, masters=3, replicas=1, node_timeout_ms=500)
    try:
        with lowkiq_on(lambda: redis.RedisCluster.from_url(cluster.url)):
            lowkiq.settings.workers = [DurableWorker]
            lowkiq.settings.wait_replicas = 1
            for start in range(0, 300, 50):
                DurableWorker.perform_async([{"id": n} for n in range(start, start + 50)])
            dead = cluster.masters[1]
            dead.stop()  # at once: whatever its replica lacks is lost
            eventually(lambda: failed_over(cluster, dead), 30, interval=0.2)
            fresh = redis.RedisCluster.from_url(cluster.masters[0].url)
            lowkiq.settings.redis = lambda: fresh
            ids = {job["id"] for job in DurableWorker.queries().range_by_id("-", "+", 1000)}
            assert ids == {str(n) for n in range(300)}
    finally:
        cluster.stop()


def test_a_write_no_replica_confirms_is_logged_and_kept(
    redis_client: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    lowkiq.settings.workers = [DurableWorker]
    lowkiq.settings.wait_replicas = 1
    lowkiq.settings.wait_timeout = 0.05
    queue = DurableWorker.queue()
    with caplog.at_level(logging.WARNING, logger="lowkiq.storage"):
        DurableWorker.perform_async([{"id": "a"}])
        assert [job["id"] for job in DurableWorker.queries().fetch(["a"])] == ["a"]
        [job] = pop(queue, queue.shard_of("a"), 10)
        ack(queue, queue.shard_of("a"))
    for write in ("push", "lease_acquire", "pop", "ack"):
        assert f"{write} reached 0 of 1 replica(s) within 50 ms" in caplog.text
    assert job.id == "a" and DurableWorker.metrics()["processed"] == 1
