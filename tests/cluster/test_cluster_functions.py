"""lowkiq's functions on a Redis 7 Cluster: each master loads the library when a call
there first finds it missing (a new master, one whose functions were flushed), and
nothing is lost.  A private cluster of Redis 7 (skipped where none is found, but under
``CI=true``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

import lowkiq
from lowkiq.clients.cluster import ClusterThreadClient
from lowkiq.clients.embedded_cluster import EmbeddedCluster, start_cluster
from lowkiq.storage.queue import Queue
from lowkiq.storage.scripts import library
from tests.cluster.cluster_support import shards_by_master
from tests.conftest import lowkiq_on
from tests.functions_support import REDIS_7, calls, lowkiq_libraries, required
from tests.leasing import batch, token

NOW = 1_000_000_000.0


class Spread(lowkiq.Worker):
    shards_count = 12
    batch_size = 50


@pytest.fixture
def cluster7(tmp_path: Path) -> Iterator[EmbeddedCluster]:
    """A 3-master Redis 7 Cluster of the test's own."""
    cluster = start_cluster(tmp_path, masters=3, binary=required(REDIS_7, "Redis 7"))
    try:
        yield cluster
    finally:
        cluster.stop()


def masters(client: redis.RedisCluster) -> dict[str, redis.Redis]:
    """Each master's own client, by name."""
    return {node.name: node.redis_connection for node in client.get_primaries()}


def take_all(queue: Queue, shards: list[int]) -> list[str]:
    """Pop then ack each of ``shards`` once; the ids that came out."""
    ids: list[str] = []
    for shard in shards:
        popped = queue.pop(shard, token(queue, shard), Spread.batch_size, now=NOW)
        ids += [job.id for job in popped.jobs]
        queue.ack(shard, token(queue, shard), batch(queue, shard))
    return ids


def test_each_master_loads_the_library_when_a_call_there_first_needs_it(cluster7):
    with lowkiq_on(lambda: redis.RedisCluster.from_url(cluster7.url)) as client:
        lowkiq.settings.workers = [Spread]
        nodes = masters(client)
        by_master = shards_by_master(client, Spread)
        first, second, third = by_master
        thread = ClusterThreadClient(client)
        queue = Spread.queue(thread)
        queue.refresh_layout(Spread.queue(client).layout)
        assert all(lowkiq_libraries(node) == [] for node in nodes.values())
        assert take_all(queue, by_master[first]) == []
        assert lowkiq_libraries(nodes[first]) == [library().name]
        assert lowkiq_libraries(nodes[second]) == lowkiq_libraries(nodes[third]) == []
        # An enqueue to every shard: one write per master (FCALL), each loading it.
        Spread.perform_async([{"id": n, "perform_in": NOW - 1} for n in range(120)])
        assert all(lowkiq_libraries(node) == [library().name] for node in nodes.values())
        # A master whose functions are gone (restarted, a new one) loads them again.
        nodes[second].function_flush()
        done = take_all(queue, by_master[first] + by_master[second] + by_master[third])
        assert sorted(done, key=int) == [str(n) for n in range(120)]
        assert lowkiq_libraries(nodes[second]) == [library().name]
        for node in nodes.values():
            assert calls(node, "fcall") > 0
        assert calls(nodes[second], "function|load") == 2
        thread.close()
