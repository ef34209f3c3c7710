"""Real ``lowkiq worker`` processes on a 3-master Redis Cluster: they share the shards,
never run one id twice at a time, lose nothing, and take over a killed process's shards."""

from __future__ import annotations

import signal
from collections.abc import Callable

import pytest
import redis

import lowkiq
from lowkiq.clients.embedded_cluster import EmbeddedCluster
from lowkiq.ownership.membership import live_processes
from tests.apps.runner import WorkerProcess, eventually
from tests.conftest import lowkiq_on
from tests.test_scaleout import assert_all_seen_in_order, feed


@pytest.fixture
def record(redis_client: redis.Redis) -> redis.Redis:
    """Where the recorder app records performs: the single server (flushed)."""
    return redis_client


def test_workers_on_a_cluster_share_shards_lose_nothing_and_take_over(
    redis_cluster: EmbeddedCluster,
    redis_url: str,
    record: redis.Redis,
    worker_processes: Callable[..., WorkerProcess],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url = redis_cluster.url.replace("redis://", "redis+cluster://")
    monkeypatch.setenv("REDIS_URL", redis_url)
    from tests.apps.recorder import Recorder

    with lowkiq_on(lambda: redis.RedisCluster.from_url(redis_cluster.url)) as cluster:
        lowkiq.settings.workers = [Recorder]
        env = {"REDIS_URL": url, "RECORD_URL": redis_url}
        # Two threads each: a thread serves several shards and pops them together.
        first, second = (worker_processes("--threads", "2", **env) for _ in range(2))
        ids = [f"order{n}" for n in range(30)]
        feed(Recorder, ids, range(1, 11), sleep=0.002)
        done = lambda: Recorder.metrics()["length"] == 0 and Recorder.metrics()["busy"] == 0  # noqa: E731
        eventually(done, 60)
        assert_all_seen_in_order(record, ids, range(1, 11))
        assert record.llen("test:overlaps") == 0

        def shards() -> dict[int, list[str]]:
            _, processes = live_processes(cluster)
            return {p.info["pid"]: p.info["shards"] for p in processes}

        def balanced() -> dict[int, list[str]] | None:
            now = shards()
            return now if sorted(len(v) for v in now.values()) == [2, 3] else None

        first_shards, second_shards = eventually(balanced).values()
        assert not set(first_shards) & set(second_shards)
        masters = {
            cluster.get_node_from_key(Recorder.queue().keys.prefix(shard)).name
            for shard in range(Recorder.shards_count)
        }
        assert len(masters) > 1, "the queue's shards spread over several masters"

        first.signal(signal.SIGKILL)
        first.wait(10)
        eventually(lambda: len(shards().get(second.process.pid, [])) == 5, 10)
        feed(Recorder, ids, range(11, 16))
        eventually(done, 60)
        assert_all_seen_in_order(record, ids, range(1, 16))
        assert record.llen("test:overlaps") == 0
