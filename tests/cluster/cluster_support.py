"""What the cluster tests ask of a real cluster: a private one of their own, whether it
finished failing over a dead master to its replica, its masters' node ids, and which
master serves each shard of a worker."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import redis

import lowkiq
from lowkiq.clients.embedded import EmbeddedServer
from lowkiq.clients.embedded_cluster import EmbeddedCluster, start_cluster
from tests.conftest import lowkiq_on


@contextmanager
def private_cluster(
    directory: Path, masters: int
) -> Iterator[tuple[EmbeddedCluster, redis.RedisCluster]]:
    """A cluster of this test's own (it may break it), ``lowkiq.settings`` pointed at it,
    and a client of it; stopped afterwards."""
    cluster = start_cluster(directory, masters=masters)
    try:
        with lowkiq_on(lambda: redis.RedisCluster.from_url(cluster.url)) as client:
            assert isinstance(client, redis.RedisCluster)
            yield cluster, client
    finally:
        cluster.stop()


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


def node_ids(client: redis.RedisCluster) -> dict[str, str]:
    """host:port -> node id of every master."""
    return {
        node.name: client.execute_command("CLUSTER MYID", target_nodes=node).decode()
        for node in client.get_primaries()
    }


def shards_by_master(
    client: redis.RedisCluster, worker: type[lowkiq.Worker]
) -> dict[str, list[int]]:
    """The shards of ``worker``, by the name of the master serving each."""
    queue = worker.queue(client)
    by_master: dict[str, list[int]] = {}
    for shard in range(worker.shards_count):
        master = client.get_node_from_key(queue.keys.prefix(shard)).name
        by_master.setdefault(master, []).append(shard)
    return by_master
