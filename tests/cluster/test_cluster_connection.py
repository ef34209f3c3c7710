"""A processing thread's cluster client follows the cluster when a slot moves: a MOVED
(the slot changed master) and an ASK (the slot is being migrated) are followed, and the
command runs once."""

from __future__ import annotations

from pathlib import Path

import redis

from lowkiq.clients.cluster import ClusterThreadClient
from lowkiq.clients.embedded_cluster import start_cluster
from tests.cluster.cluster_support import node_ids


def test_moved_and_ask_redirections_are_followed(tmp_path: Path) -> None:
    cluster = start_cluster(tmp_path, masters=2)
    try:
        admin = redis.RedisCluster.from_url(cluster.url)
        thread = ClusterThreadClient(redis.RedisCluster.from_url(cluster.url))
        key = "{moving}:counter"
        slot = admin.keyslot(key)
        source = admin.get_node_from_key(key)
        target = next(node for node in admin.get_primaries() if node.name != source.name)
        ids = node_ids(admin)

        def setslot(node: redis.cluster.ClusterNode, *args: object) -> None:
            admin.execute_command("CLUSTER SETSLOT", slot, *args, target_nodes=node)

        assert thread.incr(key) == 1  # the route to the source is now known
        admin.delete(key)

        # The slot (empty) moves to the other master: the thread's route is stale.
        for node in admin.get_primaries():
            admin.execute_command(
                "CLUSTER SETSLOT", slot, "NODE", ids[target.name], target_nodes=node
            )
        assert thread.incr(key) == 1
        assert thread.route(key) is thread._master(target.name)
        assert admin.execute_command("GET", key, target_nodes=target) == b"1"

        # Now it migrates back: the source still owns it, the key is not there yet.
        admin.execute_command(
            "CLUSTER SETSLOT", slot, "IMPORTING", ids[target.name], target_nodes=source
        )
        admin.execute_command(
            "CLUSTER SETSLOT", slot, "MIGRATING", ids[source.name], target_nodes=target
        )
        other = f"{{moving}}:{'x'}"
        assert thread.set(other, "via ask")  # absent on the owner: ASK to the importing master
        assert admin.execute_command("EXISTS", other, target_nodes=source) == 1
        thread.close()
    finally:
        cluster.stop()
