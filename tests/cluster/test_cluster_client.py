"""lowkiq on a Redis Cluster: the ``redis+cluster://`` convention, a queue's shards spread
over the masters, the dashboard, and a failed master during perform_async reported job by job."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

import lowkiq
from lowkiq.clients.connection import describe_redis
from lowkiq.clients.default_redis import default_redis
from lowkiq.clients.embedded import EmbeddedServer
from lowkiq.clients.embedded_cluster import EmbeddedCluster
from lowkiq_web import create_app
from tests.cluster.cluster_support import private_cluster


class SpreadWorker(lowkiq.Worker):
    """Twelve shards: enough to land on every master."""

    shards_count = 12


def cluster_url(cluster: EmbeddedCluster) -> str:
    return cluster.url.replace("redis://", "redis+cluster://")


def test_a_redis_cluster_url_makes_a_cluster_client(
    redis_cluster: EmbeddedCluster, cluster_client: redis.RedisCluster, monkeypatch
) -> None:
    monkeypatch.setenv("REDIS_URL", cluster_url(redis_cluster))
    client = default_redis()
    assert isinstance(client, redis.RedisCluster)
    lowest = min(node.url.removeprefix("redis://") for node in redis_cluster.masters)
    assert describe_redis(client) == f"redis+cluster://{lowest} (3 masters)"


def test_a_queues_shards_spread_over_the_masters(cluster_client: redis.RedisCluster) -> None:
    lowkiq.settings.workers = [SpreadWorker]
    SpreadWorker.perform_async([{"id": n, "payload": n} for n in range(120)])
    holding = [
        node for node in cluster_client.get_primaries() if cluster_client.dbsize(target_nodes=node)
    ]
    assert len(holding) == 3
    assert lowkiq.stats()["by_worker"]["SpreadWorker"]["length"] == 120
    page = SpreadWorker.queries().range_by_id("-", "+", limit=200)
    assert [job["id"] for job in page] == sorted(str(n) for n in range(120))


def test_the_dashboard_runs_on_a_cluster(cluster_client: redis.RedisCluster) -> None:
    lowkiq.settings.workers = [SpreadWorker]
    SpreadWorker.perform_async([{"id": n} for n in range(7)])
    html = create_app().test_client().get("/").get_data(as_text=True)
    assert 'id="total-enqueued"><span class="num" title="7">7<' in html
    assert "(3 masters)</code>" in html


def test_a_master_failing_during_perform_async_is_reported_job_by_job(tmp_path: Path) -> None:
    with private_cluster(tmp_path, masters=3) as (cluster, client):
        lowkiq.settings.workers = [SpreadWorker]
        queue = SpreadWorker.queue()
        dead = _master_of(cluster, client, queue.keys.prefix(0))
        dead.stop()
        ids = [str(n) for n in range(60)]
        with pytest.raises(lowkiq.EnqueueIncomplete) as raised:
            SpreadWorker.perform_async([{"id": job_id} for job_id in ids])
        error = raised.value
        assert sorted(error.enqueued + error.not_confirmed, key=int) == ids
        assert error.enqueued and error.not_confirmed
        for job_id in error.enqueued:
            shard = queue.shard_of(job_id)
            assert _master_of(cluster, client, queue.keys.prefix(shard)) is not dead
            assert client.zscore(queue.keys.perform_in_zset(shard), job_id) is not None
        assert all(queue.shard_of(job_id) != 0 for job_id in error.enqueued)
        assert "not confirmed" in str(error) and "enqueueing them again is safe" in str(error)


def _master_of(cluster: EmbeddedCluster, client: redis.RedisCluster, key: str) -> EmbeddedServer:
    node = client.get_node_from_key(key)
    return next(m for m in cluster.masters if m.url.endswith(f":{node.port}"))
