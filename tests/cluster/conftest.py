"""Fixtures of the cluster tests (the cluster itself is ``redis_cluster``, in the root
conftest)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from lowkiq.embedded import EmbeddedServer
from lowkiq.embedded_cluster import EmbeddedCluster
from tests.conftest import lowkiq_on


@pytest.fixture
def cluster_client(redis_cluster: EmbeddedCluster) -> Iterator[redis.RedisCluster]:
    """A cluster client on a flushed cluster, ``lowkiq.settings`` pointed at it."""
    with lowkiq_on(lambda: redis.RedisCluster.from_url(redis_cluster.url)) as client:
        assert isinstance(client, redis.RedisCluster)
        yield client


def failed_over(cluster: EmbeddedCluster, dead: EmbeddedServer) -> bool:
    """Whether every live node says the cluster is ok and no slot is ``dead``'s any
    more (its replica was promoted)."""
    dead_port = int(dead.url.rsplit(":", 1)[1])
    for node in cluster.nodes:
        if node is dead:
            continue
        with node.client() as one:
            if one.cluster("info").get("cluster_state") != "ok":
                return False
            ranges = one.execute_command("CLUSTER SLOTS")
            if any(int(master[1]) == dead_port for _, _, master, *_ in ranges):
                return False
    return True
