"""The test cluster is a real Redis Cluster: slots split over 3 masters, keys of
different hash tags land on different masters, and a replica takes over a dead master."""

from __future__ import annotations

import time
from pathlib import Path

import redis
from redis.exceptions import RedisClusterException

from lowkiq.clients.embedded import EmbeddedServer
from lowkiq.clients.embedded_cluster import SLOTS, EmbeddedCluster, start_cluster


def test_three_masters_share_the_slots_and_the_keys(
    redis_cluster: EmbeddedCluster, cluster_client: redis.RedisCluster
) -> None:
    masters = cluster_client.get_primaries()
    assert len(masters) == 3 and len(redis_cluster.nodes) == 3
    slots = cluster_client.cluster_slots()
    assert sum(end - start + 1 for start, end in slots) == SLOTS
    for n in range(30):
        cluster_client.set(f"{{tag{n}}}:key", n)
    holding = [node for node in masters if cluster_client.dbsize(target_nodes=node) > 0]
    assert len(holding) == 3
    assert cluster_client.get("{tag7}:key") == b"7"


def test_a_replica_takes_over_when_its_master_dies(tmp_path: Path) -> None:
    cluster = start_cluster(tmp_path, masters=3, replicas=1, node_timeout_ms=500)
    try:
        client = cluster.client()
        client.set("{a}", "kept")
        slot = client.keyslot("{a}")
        dead = next(m for m in cluster.masters if slot in _slots_of(m))
        time.sleep(0.5)  # the replica has the write (asynchronous replication)
        dead.stop()
        deadline = time.monotonic() + 20
        while True:
            try:
                fresh = redis.RedisCluster.from_url(
                    next(m for m in cluster.masters if m is not dead).url
                )
                if fresh.get("{a}") == b"kept":
                    break
            except (redis.RedisError, RedisClusterException):
                pass
            assert time.monotonic() < deadline, "no replica took over"
            time.sleep(0.2)
    finally:
        cluster.stop()


def _slots_of(node: EmbeddedServer) -> set[int]:
    with node.client() as client:
        myid = client.execute_command("CLUSTER MYID").decode()
        owned: set[int] = set()
        for start, end, *nodes in client.execute_command("CLUSTER SLOTS"):
            if nodes[0][2].decode() == myid:
                owned.update(range(start, end + 1))
        return owned
