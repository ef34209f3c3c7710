"""perform_async on a Redis Cluster, a write per master: a slot that moved (MOVED), a slot
being migrated (ASK) and a master that lost its scripts still enqueue every job once."""

from __future__ import annotations

from pathlib import Path

import lowkiq
from tests.cluster.cluster_support import node_ids, private_cluster


class Spread(lowkiq.Worker):
    shards_count = 12


def test_push_follows_moved_and_ask_and_reloads_lost_scripts(tmp_path: Path) -> None:
    with private_cluster(tmp_path, masters=2) as (_, admin):
        lowkiq.settings.workers = [Spread]
        queue = Spread.queue()
        Spread.perform_async([{"id": f"w{n}"} for n in range(60)])  # routes and scripts known
        assert Spread.metrics()["length"] == 60
        ids = node_ids(admin)

        # A shard's slot (empty: a shard of a fresh queue name) moves: MOVED.
        prefix = queue.keys.prefix(0)
        slot = admin.keyslot(prefix)
        source = queue.client.get_node_from_key(prefix)
        target = next(n for n in admin.get_primaries() if n.name != source.name)
        for key in admin.scan_iter(match="*"):  # empty the slot first
            if admin.keyslot(key) == slot:
                admin.delete(key)
        for node in admin.get_primaries():
            admin.execute_command(
                "CLUSTER SETSLOT", slot, "NODE", ids[target.name], target_nodes=node
            )
        # And the other master lost its scripts: NOSCRIPT.
        admin.execute_command("SCRIPT FLUSH", target_nodes=target)
        jobs = [f"m{n}" for n in range(60)]
        Spread.perform_async([{"id": j} for j in jobs])
        zero = [j for j in jobs if queue.shard_of(j) == 0]
        assert zero
        for j in zero:
            assert (
                admin.execute_command(
                    "ZSCORE", queue.keys.perform_in_zset(0), j, target_nodes=target
                )
                is not None
            )

        # Now it migrates back: the target owns it, the source imports; keys not moved: ASK
        # (the push's key, its prefix, is never a key itself).
        queue.client.nodes_manager.initialize()
        admin.execute_command(
            "CLUSTER SETSLOT", slot, "IMPORTING", ids[target.name], target_nodes=source
        )
        admin.execute_command(
            "CLUSTER SETSLOT", slot, "MIGRATING", ids[source.name], target_nodes=target
        )
        asked = [f"a{n}" for n in range(60)]
        Spread.perform_async([{"id": j} for j in asked])
        on_source = source.redis_connection.pipeline(transaction=False)
        on_source.execute_command("ASKING")
        on_source.zrange(queue.keys.perform_in_zset(0), 0, -1)
        landed = {m.decode() for m in on_source.execute()[1]}
        assert landed == {j for j in asked if queue.shard_of(j) == 0}
