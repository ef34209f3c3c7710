"""What the cluster tests ask of a real cluster: whether it finished failing over a dead
master to its replica, and its masters' node ids."""

from __future__ import annotations

import redis

from lowkiq.embedded import EmbeddedServer
from lowkiq.embedded_cluster import EmbeddedCluster


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
