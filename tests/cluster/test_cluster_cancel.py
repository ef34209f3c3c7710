"""Cancels and superseded payloads on a real 3-master Redis Cluster, with real
``lowkiq worker`` processes on the app of ``tests/apps/cancellable.py`` (performs are
recorded on the single server)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

import pytest
import redis

import lowkiq
from lowkiq.clients.embedded_cluster import EmbeddedCluster
from tests.apps.runner import WorkerProcess, eventually
from tests.conftest import lowkiq_on

APP = "tests/apps/cancellable.py"


@pytest.fixture
def start(
    redis_cluster: EmbeddedCluster,
    redis_client: redis.Redis,
    redis_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Callable[[], WorkerProcess]]:
    """``start()`` starts a worker process on the cluster; all are killed after the test."""
    monkeypatch.setenv("REDIS_URL", redis_url)  # the app's records, read on import
    from tests.apps.cancellable import Long, Steps, Watch

    url = redis_cluster.url.replace("redis://", "redis+cluster://")
    started: list[WorkerProcess] = []
    with lowkiq_on(lambda: redis.RedisCluster.from_url(redis_cluster.url)):
        lowkiq.settings.workers = [Long, Steps, Watch]

        def run() -> WorkerProcess:
            process = WorkerProcess("-r", APP, env={"REDIS_URL": url, "RECORD_URL": redis_url})
            started.append(process)
            process.wait_started()
            return process

        yield run
        for process in started:
            process.close()


def test_cancel_on_a_cluster_reaches_every_process_and_shard(
    start: Callable[[], WorkerProcess], redis_client: redis.Redis
) -> None:
    from tests.apps.cancellable import Long

    start()
    start()
    masters = {
        lowkiq.settings.client().get_node_from_key(Long.queue().keys.prefix(shard)).name
        for shard in range(Long.shards_count)
    }
    assert len(masters) > 1, "the queue's shards spread over several masters"
    ids = [f"c{n}" for n in range(6)]
    Long.perform_async([{"id": i, "payload": {"n": 1}} for i in ids])
    cancelled: set[str] = set()
    while len(cancelled) < len(ids):
        done = frozenset(cancelled)
        running = eventually(
            lambda done=done: (
                {i.decode() for i in redis_client.lrange("test:started", 0, -1)} - done
            )
        )
        assert Long.actions().cancel(sorted(running)) == len(running)
        cancelled |= running
    eventually(lambda: redis_client.llen("test:stopped") == len(ids))
    stopped = [json.loads(e) for e in redis_client.lrange("test:stopped", 0, -1)]
    assert sorted(i for entry in stopped for i in entry["cancelled"]) == sorted(ids)
    eventually(lambda: Long.metrics()["cancelled"] == len(ids))
    metrics = Long.metrics()
    assert (metrics["length"], metrics["busy"], metrics["failed"]) == (0, 0, 0)
    assert [e.event for e in Long.history("c0")][-1] == "cancelled"
    # Enqueued after the cancel: new work, it runs.
    Long.perform_async([{"id": "c0", "payload": {"quick": True}}])
    eventually(lambda: redis_client.lrange("test:quick", 0, -1) == [b"c0"])


def test_superseded_on_a_cluster(
    start: Callable[[], WorkerProcess], redis_client: redis.Redis
) -> None:
    from tests.apps.cancellable import Watch

    Watch.perform_async([{"id": "h", "payload": {"v": 0}, "score": 0}])
    Watch.perform_async([{"id": "h", "payload": {"v": n}, "score": n} for n in range(1, 300)])
    start()
    eventually(lambda: redis_client.lrange("test:superseded_first:h", 0, -1) == [b"0"])
    Watch.perform_async([{"id": "h", "payload": {"v": 300}, "score": 300}])
    eventually(lambda: redis_client.exists("test:superseded_at:h"))
