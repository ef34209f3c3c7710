"""Fixtures of the cluster tests (the cluster itself is ``redis_cluster``, in the root
conftest)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from lowkiq.clients.embedded_cluster import EmbeddedCluster
from tests.conftest import lowkiq_on


@pytest.fixture
def cluster_client(redis_cluster: EmbeddedCluster) -> Iterator[redis.RedisCluster]:
    """A cluster client on a flushed cluster, ``lowkiq.settings`` pointed at it."""
    with lowkiq_on(lambda: redis.RedisCluster.from_url(redis_cluster.url)) as client:
        assert isinstance(client, redis.RedisCluster)
        yield client
