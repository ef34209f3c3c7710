"""Operating groups at run time on a 3-master Redis Cluster: the settings hash lives in
the worker's claims slot, the shards in their own slots; a paused group stops starting
within a second on every process while another goes on, and a group's own cap holds."""

from __future__ import annotations

import time

import pytest
import redis

import lowkiq
from lowkiq.clients.embedded_cluster import EmbeddedCluster
from tests.apps.runner import WorkerProcess, eventually
from tests.conftest import lowkiq_on


class Tenants(lowkiq.Worker):
    """The app's worker (tests/apps/group_control.py), to enqueue and act from the test."""

    shards_count = 8


def starts(record: redis.Redis, group: str) -> list[float]:
    return [float(s) for s in record.lrange(f"test:starts:{group}", 0, -1)]


def redis_now(record: redis.Redis) -> float:
    seconds, micros = record.time()
    return seconds + micros / 1e6


def test_pause_resume_and_a_groups_cap_on_a_cluster(
    redis_cluster: EmbeddedCluster,
    redis_url: str,
    redis_client: redis.Redis,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url = redis_cluster.url.replace("redis://", "redis+cluster://")
    env = {"REDIS_URL": url, "RECORD_URL": redis_url, "TEST_GROUP_CAP": "3"}
    processes: list[WorkerProcess] = []
    with lowkiq_on(lambda: redis.RedisCluster.from_url(redis_cluster.url)):
        lowkiq.settings.workers = [Tenants]
        Tenants.perform_async(
            [
                {"id": f"{g}{n}", "group": g, "payload": {"g": g, "sleep": 0.02}}
                for g in ("A", "B")
                for n in range(2000)
            ]
        )
        actions = Tenants.actions()
        actions.group_limits("B", concurrency=1)
        try:
            for _ in range(2):
                processes.append(
                    WorkerProcess("-r", "tests/apps/group_control.py", "--threads", "3", env=env)
                )
            eventually(lambda: len(starts(redis_client, "A")) >= 20, timeout=30)
            paused_at = redis_now(redis_client)
            assert actions.pause_group("A") is True
            peak_b = 0
            deadline = time.monotonic() + 2.5
            while time.monotonic() < deadline:
                peak_b = max(peak_b, redis_client.scard("test:running:B"))
                time.sleep(0.01)
            late = [s for s in starts(redis_client, "A") if s > paused_at + 1.0]
            assert late == [], f"{len(late)} job(s) of A started more than 1 s after the pause"
            assert len([s for s in starts(redis_client, "B") if s > paused_at + 1.0]) > 10
            assert peak_b == 1  # B's own cap on every process
            resumed_at = redis_now(redis_client)
            assert actions.resume_group("A") is True
            eventually(lambda: [s for s in starts(redis_client, "A") if s > resumed_at], timeout=10)
        finally:
            for process in processes:
                process.close()
