"""On a Redis Cluster every master's maxmemory-policy is read: one evicting master is
enough for a worker to refuse to start, naming that master."""

from __future__ import annotations

import pytest
import redis

from lowkiq.clients.memory_policy import check_eviction, policies
from lowkiq.errors import ConfigurationError


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
