"""On a Redis Cluster every master's maxmemory-policy is read: one evicting master is
enough for a worker to refuse to start, naming that master, and for a running worker and
a producer to notice it within seconds; a worker drains a cluster whose masters are
full."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import redis

import lowkiq
from lowkiq.clients.embedded_cluster import EmbeddedCluster
from lowkiq.clients.memory_policy import PRODUCER_GATE, check_eviction, policies
from lowkiq.errors import ConfigurationError, RedisFull
from tests.apps.runner import WorkerProcess, eventually
from tests.conftest import lowkiq_on


def test_one_evicting_master_of_three_is_refused_by_name(
    cluster_client: redis.RedisCluster,
) -> None:
    masters = cluster_client.get_primaries()
    assert len(policies(cluster_client)) == len(masters) == 3
    evicting = masters[1]
    evicting.redis_connection.config_set("maxmemory-policy", "volatile-lru")
    try:
        with pytest.raises(ConfigurationError) as refused:
            check_eviction(cluster_client, allow_eviction=False)
        message = str(refused.value)
        assert f"{evicting.name} has maxmemory-policy volatile-lru" in message
        assert all(m.name not in message for m in masters if m is not evicting)
        found = check_eviction(cluster_client, allow_eviction=True)
        assert [entry.evicts for entry in found].count(True) == 1
    finally:
        evicting.redis_connection.config_set("maxmemory-policy", "noeviction")


@pytest.fixture
def on_cluster(
    redis_cluster: EmbeddedCluster,
    redis_url: str,
    redis_client: redis.Redis,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[tuple[redis.RedisCluster, dict[str, str]]]:
    """The cluster, flushed, with ``lowkiq.settings`` on it and the recorder app
    registered; the environment of a worker on it.  Every master's policy and maxmemory
    are put back after the test."""
    monkeypatch.setenv("REDIS_URL", redis_url)
    from tests.apps.recorder import Recorder

    with lowkiq_on(lambda: redis.RedisCluster.from_url(redis_cluster.url)) as cluster:
        assert isinstance(cluster, redis.RedisCluster)
        lowkiq.settings.workers = [Recorder]
        url = redis_cluster.url.replace("redis://", "redis+cluster://")
        try:
            yield cluster, {"REDIS_URL": url, "RECORD_URL": redis_url}
        finally:
            for master in cluster.get_primaries():
                master.redis_connection.config_set("maxmemory-policy", "noeviction")
                master.redis_connection.config_set("maxmemory", 0)


@pytest.mark.parametrize("rate", [None, "1000"], ids=["unlimited", "rate-limited"])
def test_a_worker_drains_a_full_cluster(
    on_cluster: tuple[redis.RedisCluster, dict[str, str]],
    redis_client: redis.Redis,
    worker_processes: Callable[..., WorkerProcess],
    rate: str | None,
) -> None:
    from tests.apps.recorder import Recorder

    cluster, env = on_cluster
    Recorder.perform_async([{"id": str(n), "payload": {"v": n}} for n in range(20)])
    for master in cluster.get_primaries():
        master.redis_connection.config_set("maxmemory", 1)
    with pytest.raises(RedisFull):
        Recorder.perform_async([{"id": "late", "payload": {"v": 0}}])
    # A rate limit's bucket is on a master of its own: its reservations run there too.
    worker = worker_processes(wait=False, **env, **({"TEST_RATE": rate} if rate else {}))
    eventually(lambda: redis_client.llen("test:started") > 0, timeout=10)
    eventually(lambda: redis_client.llen("test:started") == 20, timeout=30)
    assert "Redis is full (maxmemory 1B, used" in worker.output()
    assert worker.process.poll() is None


def test_a_policy_changed_on_one_master_is_noticed_by_a_running_worker(
    on_cluster: tuple[redis.RedisCluster, dict[str, str]],
    worker_processes: Callable[..., WorkerProcess],
) -> None:
    from tests.apps.recorder import Recorder

    cluster, env = on_cluster
    worker = worker_processes(**env)
    PRODUCER_GATE.forget()
    Recorder.perform_async([{"id": "before", "payload": {"v": 1}}])
    evicting = cluster.get_primaries()[2]
    evicting.redis_connection.config_set("maxmemory-policy", "allkeys-lru")
    named = f"{evicting.name} has maxmemory-policy allkeys-lru"

    def refused() -> bool:
        try:
            Recorder.perform_async([{"id": "after", "payload": {"v": 2}}])
        except ConfigurationError as error:
            return named in str(error)
        return False

    eventually(refused, timeout=10, interval=0.5)
    eventually(lambda: named in worker.output(), timeout=10)
    assert worker.process.poll() is None
