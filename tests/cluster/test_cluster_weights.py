"""``Worker.weight`` on a 3-master Redis Cluster, where the dispatcher blocks on no wake
list: a worker with no batch in flight still starts next beside a flood that fills the
process's threads."""

from __future__ import annotations

import pytest
import redis

import lowkiq
from lowkiq.clients.embedded_cluster import EmbeddedCluster
from tests.apps.runner import WorkerProcess
from tests.conftest import lowkiq_on
from tests.test_weights_processes import FLOOD, assert_starts_next


def test_a_worker_with_no_batch_in_flight_starts_next_beside_a_flood_on_a_cluster(
    redis_cluster: EmbeddedCluster,
    redis_url: str,
    redis_client: redis.Redis,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url = redis_cluster.url.replace("redis://", "redis+cluster://")
    monkeypatch.setenv("REDIS_URL", url)
    monkeypatch.setenv("RECORD_URL", redis_url)
    with lowkiq_on(lambda: redis.RedisCluster.from_url(redis_cluster.url)):
        import tests.apps.weighted as app

        app.Heavy.perform_async([{"id": str(n)} for n in range(1000)])
        process = WorkerProcess(
            "-r",
            "tests/apps/weighted.py",
            "--threads",
            "1",
            env={"REDIS_URL": url, "RECORD_URL": redis_url, **FLOOD},
        )
        try:
            process.wait_started()
            assert_starts_next(redis_client, app.Light)
        finally:
            process.close()
            lowkiq.settings.workers = []
