"""A real Redis Cluster for the tests that need one: 3 masters started from the same
``redis-server`` binary as the single server (see :mod:`lowkiq.embedded_cluster`)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from lowkiq.embedded_cluster import EmbeddedCluster, start_cluster


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedCluster]:
    """A 3-master cluster for the whole session (no replicas)."""
    cluster = start_cluster(tmp_path_factory.mktemp("cluster"), masters=3)
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def cluster_client(redis_cluster: EmbeddedCluster) -> Iterator[redis.RedisCluster]:
    """A cluster client on a flushed cluster."""
    client = redis_cluster.client()
    client.flushall(target_nodes=redis.RedisCluster.PRIMARIES)
    try:
        yield client
    finally:
        client.close()
