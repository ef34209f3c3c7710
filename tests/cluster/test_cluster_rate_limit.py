"""A rate limit on a 3-master Redis Cluster: the bucket is in a slot of its own, so shards
reserve tokens apart (rate_take) and the limit still holds summed over processes."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import redis

import lowkiq
from lowkiq.clients.embedded_cluster import EmbeddedCluster
from tests.apps.runner import WorkerProcess, eventually
from tests.conftest import lowkiq_on
from tests.test_rate_limit_processes import per_window, starts


def test_the_limit_holds_over_processes_on_a_cluster(
    redis_cluster: EmbeddedCluster,
    redis_url: str,
    redis_client: redis.Redis,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url = redis_cluster.url.replace("redis://", "redis+cluster://")
    monkeypatch.setenv("REDIS_URL", redis_url)
    from tests.apps.limited import Limited

    processes: list[WorkerProcess] = []
    with lowkiq_on(lambda: redis.RedisCluster.from_url(redis_cluster.url)):
        lowkiq.settings.workers = [Limited]
        ids = [f"order{n}" for n in range(800)]
        Limited.perform_async([{"id": i, "payload": {"v": 1}} for i in ids])
        env = {"REDIS_URL": url, "RECORD_URL": redis_url, "TEST_RATE": "100"}
        try:
            for _ in range(2):
                processes.append(
                    WorkerProcess("-r", "tests/apps/limited.py", "--threads", "2", env=env)
                )
            done: Callable[[], bool] = lambda: Limited.metrics()["length"] == 0  # noqa: E731
            eventually(done, 40, interval=0.2)
        finally:
            for process in processes:
                process.close()
    rows = starts(redis_client)
    assert sorted(job_id for _, job_id, _ in rows) == sorted(ids)
    times = sorted(at for at, _, _ in rows)
    windows = per_window(times, times[0] + 1.0, times[-1])
    assert windows
    for count in windows:
        assert 400 <= count <= 560, windows
