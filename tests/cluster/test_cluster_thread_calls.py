"""A pop that acks another shard on a Redis Cluster: in a call of its own, on the same
or another master."""

from __future__ import annotations

import redis

import lowkiq
from lowkiq.clients.cluster import ClusterThreadClient
from lowkiq.storage.queue import ACK_FENCED, Queue
from tests.cluster.cluster_support import shards_by_master
from tests.leasing import batch, token

NOW = 1_000_000_000.0


class Spread(lowkiq.Worker):
    shards_count = 12


def thread_queue(thread: ClusterThreadClient, client: redis.RedisCluster) -> Queue:
    """Spread's queue on a thread's client, its layout read as a server reads it."""
    queue = Spread.queue(thread)
    queue.refresh_layout(Spread.queue(client).layout)
    return queue


def test_a_pop_acks_another_shard_on_the_same_or_another_master(
    cluster_client: redis.RedisCluster,
) -> None:
    lowkiq.settings.workers = [Spread]
    Spread.perform_async([{"id": n, "perform_in": NOW - 1} for n in range(200)])
    thread = ClusterThreadClient(cluster_client)
    queue = thread_queue(thread, cluster_client)
    masters = list(shards_by_master(cluster_client, Spread).values())
    first, same, other = masters[0][0], masters[0][1], masters[1][0]
    assert queue.pop(first, token(queue, first), 2, now=NOW).jobs
    # The same master.
    popped = queue.pop(
        same,
        token(queue, same),
        2,
        now=NOW,
        ack_shard=first,
        ack_token=token(queue, first),
        ack_batch=batch(queue, first),
    )
    assert (popped.acked, len(popped.jobs)) == (2, 2)
    # Another master.
    popped = queue.pop(
        other,
        token(queue, other),
        2,
        now=NOW,
        ack_shard=same,
        ack_token=token(queue, same),
        ack_batch=batch(queue, same),
    )
    assert (popped.acked, len(popped.jobs)) == (2, 2)
    assert all(queue.shard_of(job.id) == other for job in popped.jobs)
    # A stale ack token: nothing acked, the pop still happens.
    popped = queue.pop(first, token(queue, first), 2, now=NOW, ack_shard=other, ack_token="9 x")
    assert popped.acked == ACK_FENCED and len(popped.jobs) == 2
    assert Spread.metrics()["processed"] == 4
    cluster_client.execute_command("SCRIPT FLUSH", target_nodes=redis.RedisCluster.PRIMARIES)
    popped = queue.pop(
        same,
        token(queue, same),
        2,
        now=NOW,
        ack_shard=other,
        ack_token=token(queue, other),
        ack_batch=batch(queue, other),
    )
    assert (popped.acked, len(popped.jobs)) == (2, 2)
    thread.close()
