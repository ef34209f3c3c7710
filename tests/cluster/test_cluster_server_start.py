"""A worker process on a Redis Cluster loads the cluster's slot map three times at start,
however many threads it runs: for the settings' client, for the client of lowkiq's own
calls (coordinator, metrics), and for the dispatcher's, whose calls give up sooner (a hung
master holds up only its own shards); the threads share them."""

from __future__ import annotations

import redis

import lowkiq
from lowkiq.clients.embedded_cluster import EmbeddedCluster
from lowkiq.runtime.server import Server
from tests.runtime.serving import turn_until


class Spread(lowkiq.Worker):
    shards_count = 12

    @classmethod
    def perform(cls, payloads_by_id: dict[str, list[object]]) -> None:
        pass


def slot_map_loads(cluster: EmbeddedCluster) -> int:
    """CLUSTER commands (a slot map load is one) every node has run so far."""
    total = 0
    for node in cluster.nodes:
        with node.client() as client:
            total += client.info("commandstats").get("cmdstat_cluster", {"calls": 0})["calls"]
    return total


def test_a_process_loads_the_slot_map_three_times_for_all_its_threads(
    redis_cluster: EmbeddedCluster, cluster_client: redis.RedisCluster
) -> None:
    lowkiq.settings.workers = [Spread]
    lowkiq.settings.threads_per_node = 6
    server = Server(lowkiq.settings)
    before = slot_map_loads(redis_cluster)
    server.start()
    try:
        assert server.dispatcher is not None and server.dispatcher.executor.size == 6
        assert slot_map_loads(redis_cluster) - before == 3
    finally:
        server.request_stop()
        server.stop()


def test_the_dispatcher_serves_every_shard_of_every_master(
    cluster_client: redis.RedisCluster,
) -> None:
    lowkiq.settings.workers = [Spread]
    lowkiq.settings.threads_per_node = 5
    server = Server(lowkiq.settings)
    coordinator = server.build()
    dispatcher = server.dispatcher
    assert dispatcher is not None
    dispatcher.executor.start()
    try:
        coordinator.beat()
        dispatcher.apply()
        assert sorted(h.shard for h in dispatcher.handlers) == list(range(12))
        Spread.perform_async([{"id": n} for n in range(100)])
        dispatcher.turn()
        assert len(dispatcher.in_flight) == 10  # two per thread: the room it has
        turn_until(dispatcher, lambda: Spread.metrics()["processed"] == 100)
    finally:
        coordinator.close()
        dispatcher.shutdown()
        coordinator.leave()
        dispatcher.client.close()
