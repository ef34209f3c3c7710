"""Whether a cluster has finished failing over a dead master to its replica."""

from __future__ import annotations

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
