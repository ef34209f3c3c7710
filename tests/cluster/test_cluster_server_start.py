"""A worker process on a Redis Cluster loads the cluster's slot map once at start,
however many threads it runs: they share it; each thread is thread_of shards of one master."""

from __future__ import annotations

import redis

import lowkiq
from lowkiq.embedded_cluster import EmbeddedCluster
from lowkiq.server import Server


class Spread(lowkiq.Worker):
    shards_count = 12


def slot_map_loads(cluster: EmbeddedCluster) -> int:
    """CLUSTER commands (a slot map load is one) every node has run so far."""
    total = 0
    for node in cluster.nodes:
        with node.client() as client:
            total += client.info("commandstats").get("cmdstat_cluster", {"calls": 0})["calls"]
    return total


def test_a_process_loads_the_slot_map_once_for_all_its_threads(
    redis_cluster: EmbeddedCluster, cluster_client: redis.RedisCluster
) -> None:
    lowkiq.settings.workers = [Spread]
    lowkiq.settings.threads_per_node = 6
    server = Server(lowkiq.settings)
    before = slot_map_loads(redis_cluster)
    server.start()
    try:
        assert len(server.lanes) == 6
        assert slot_map_loads(redis_cluster) - before == 1
    finally:
        server.request_stop()
        server.stop()


def test_each_thread_is_dealt_shards_of_one_master(cluster_client: redis.RedisCluster) -> None:
    lowkiq.settings.workers = [Spread]
    lowkiq.settings.threads_per_node = 5
    server = Server(lowkiq.settings)
    coordinator = server.build()
    try:
        coordinator.beat()
        for lane in server.lanes:
            lane.apply()
        served = [lane.handlers for lane in server.lanes]
        assert sorted(h.shard for handlers in served for h in handlers) == list(range(12))
        keys = Spread.queue(cluster_client).keys
        for handlers in served:
            masters = {
                cluster_client.get_node_from_key(keys.prefix(h.shard)).name for h in handlers
            }
            assert len(masters) == 1, [h.shard for h in handlers]
    finally:
        coordinator.close()
        for lane in server.lanes:
            lane.release_all()
        coordinator.leave()
        for lane in server.lanes:
            lane.client.close()
