"""``Worker.group_concurrency`` and per-group rate limits on a 3-master Redis Cluster: the
claims are in a slot of their own, claimed after each pop; at most N batches of a group
still run at once across the processes, and each group keeps to its rate."""

from __future__ import annotations

from collections.abc import Callable

import redis

import lowkiq
from lowkiq.clients.embedded_cluster import EmbeddedCluster
from tests.apps.runner import WorkerProcess, eventually
from tests.conftest import lowkiq_on
from tests.test_group_concurrency import GROUPS, JOBS, Capped, enqueue_groups, peaks, starts


def run_on_cluster(
    redis_cluster: EmbeddedCluster,
    redis_client: redis.Redis,
    redis_url: str,
    enqueue: Callable[[], int],
    **env: str,
) -> None:
    """Two processes of the capped app on the cluster (counting on the test's server)
    until the jobs ``enqueue`` enqueued (it returns how many) are all performed."""
    url = redis_cluster.url.replace("redis://", "redis+cluster://")
    processes: list[WorkerProcess] = []
    with lowkiq_on(lambda: redis.RedisCluster.from_url(redis_cluster.url)):
        lowkiq.settings.workers = [Capped]
        env = {"REDIS_URL": url, "RECORD_URL": redis_url, **env}
        try:
            for _ in range(2):
                processes.append(
                    WorkerProcess("-r", "tests/apps/capped.py", "--threads", "4", env=env)
                )
            for process in processes:
                process.wait_started()
            total = enqueue()
            eventually(lambda: redis_client.llen("test:finished") >= total, timeout=60)
            assert Capped.metrics()["length"] == 0
        finally:
            for process in processes:
                process.close()


def test_the_cap_holds_over_processes_on_a_cluster(
    redis_cluster: EmbeddedCluster, redis_url: str, redis_client: redis.Redis
) -> None:
    def enqueue() -> int:
        enqueue_groups()
        return len(GROUPS) * JOBS

    run_on_cluster(redis_cluster, redis_client, redis_url, enqueue, TEST_GROUP_CAP="2")
    found = peaks(redis_client)
    assert max(found.values()) <= 2, found
    assert 2 in found.values(), found


def test_a_per_group_rate_holds_over_processes_on_a_cluster(
    redis_cluster: EmbeddedCluster, redis_url: str, redis_client: redis.Redis
) -> None:
    def enqueue() -> int:
        jobs = [
            {"id": f"{g}{n}", "group": g, "payload": {"g": g}} for g in GROUPS for n in range(20)
        ]
        Capped.perform_async(jobs)
        return len(jobs)

    run_on_cluster(redis_cluster, redis_client, redis_url, enqueue, TEST_GROUP_RATE="10")
    for group in GROUPS:
        times = starts(redis_client, group)
        assert len(times) == 20
        for first in times:  # any second holds at most 10 starts, and the burst of 1
            assert sum(1 for t in times if first <= t < first + 1.0) <= 11, (group, times)
