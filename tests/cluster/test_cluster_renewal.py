"""Lease renewals on a Redis Cluster whose slots move or whose master hangs: a renewal
redirected to a slot's new master is renewed there in the same round, and a master that
does not answer costs a round 1/24 of the TTL (a read timeout) or two (and one asking it
for the slot map), brings the next round forward to a twelfth of the TTL, and costs the
leases on the other masters nothing."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

import lowkiq
from lowkiq.clients.cluster import bounded_client
from lowkiq.clients.embedded import EmbeddedServer
from lowkiq.clients.embedded_cluster import EmbeddedCluster
from lowkiq.ownership import leases
from lowkiq.ownership.leases import HeldLease, Term
from lowkiq.ownership.renewer import RETRY_PER_TTL, Renewer
from tests.cluster.cluster_support import node_ids, private_cluster

#: The leases' TTL, seconds: a renewal gives up after 1/24 of it.
TTL = 2.4


class Spread(lowkiq.Worker):
    """Six shards, over every master."""

    shards_count = 6


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[EmbeddedCluster, redis.RedisCluster]]:
    """A 3-master cluster of this test's own (a master is paused or loses a slot)."""
    with private_cluster(tmp_path, 3) as (cluster, client):
        lowkiq.settings.workers = [Spread]
        try:
            yield cluster, client
        finally:
            for node in cluster.nodes:  # a stopped node would not end on SIGTERM
                if node.process is not None:
                    node.process.send_signal(signal.SIGCONT)


def held_leases(client: redis.RedisCluster) -> list[HeldLease]:
    """Every shard of :class:`Spread` leased for :data:`TTL`."""
    queue = Spread.queue(client)
    held = []
    for shard in queue.shards:
        lease, _, _ = leases.acquire(queue, shard, "host:1:renewing", TTL)
        assert lease is not None
        held.append(HeldLease(lease, Term(TTL, time.monotonic())))
    return held


def prefix_of(held: HeldLease) -> str:
    """The key a lease's slot is known by."""
    return held.lease.queue.keys.prefix(held.lease.shard)


def server_of(cluster: EmbeddedCluster, node: Any) -> EmbeddedServer:
    """The server of a cluster client's node."""
    port = node.port
    return next(server for server in cluster.masters if server.url.endswith(f":{port}"))


def move_slot(client: redis.RedisCluster, key: str, target: Any) -> None:
    """Move ``key``'s slot, and its keys, to the master ``target`` (a node of ``client``)."""
    slot = client.keyslot(key)
    source = client.get_node_from_key(key)
    ids = node_ids(client)
    source_id, target_id = ids[source.name], ids[target.name]
    to_source = source.redis_connection
    to_target = target.redis_connection
    to_target.execute_command("CLUSTER SETSLOT", slot, "IMPORTING", source_id)
    to_source.execute_command("CLUSTER SETSLOT", slot, "MIGRATING", target_id)
    keys = to_source.execute_command("CLUSTER GETKEYSINSLOT", slot, 1000)
    host, port = target.host, target.port
    to_source.execute_command("MIGRATE", host, port, "", 0, 5000, "KEYS", *keys)
    for node in client.get_primaries():
        node.redis_connection.execute_command("CLUSTER SETSLOT", slot, "NODE", target_id)


def test_a_renewal_redirected_to_the_slots_new_master_is_renewed_there_at_once(
    cluster: tuple[EmbeddedCluster, redis.RedisCluster],
) -> None:
    _, client = cluster
    held = held_leases(client)
    renewer = Renewer(client, TTL, lambda: held, lambda lost: pytest.fail(f"{lost} lost"))
    assert renewer.renew() == len(held)  # the renewer's slot map is read now
    moving = held[0]
    source = client.get_node_from_key(prefix_of(moving))
    target = next(node for node in client.get_primaries() if node.name != source.name)
    move_slot(client, prefix_of(moving), target)  # the slot maps still say: source
    before = moving.term.confirmed_at
    assert renewer.renew() == len(held)
    assert moving.term.confirmed_at > before
    assert renewer.own_round_at() - renewer.last_round > TTL / RETRY_PER_TTL  # no failure
    assert target.redis_connection.pttl(moving.lease.queue.keys.lease(moving.lease.shard)) > 0
    renewer.close()


def test_a_hung_master_costs_a_round_a_twelfth_of_the_ttl_and_no_other_masters_lease(
    cluster: tuple[EmbeddedCluster, redis.RedisCluster],
) -> None:
    servers, client = cluster
    held = held_leases(client)
    renewer = Renewer(client, TTL, lambda: held, lambda lost: pytest.fail(f"{lost} lost"))
    assert renewer.renew() == len(held)
    node = client.get_node_from_key(prefix_of(held[0]))
    hung = [h for h in held if client.get_node_from_key(prefix_of(h)).name == node.name]
    stopped = server_of(servers, node)
    assert stopped.process is not None
    stopped.process.send_signal(signal.SIGSTOP)
    started = time.monotonic()
    renewed = renewer.renew()
    took = time.monotonic() - started
    assert renewed == len(held) - len(hung)
    # A read timeout, and one on the slot map's reload when it asks the hung node first:
    # bounded by those timeouts, never by the lease's TTL (a loaded host adds its delays).
    assert took < TTL / 3, took
    assert renewer.own_round_at() - renewer.last_round == pytest.approx(TTL / RETRY_PER_TTL)
    stopped.process.send_signal(signal.SIGCONT)
    assert renewer.renew() == len(held)
    assert renewer.own_round_at() - renewer.last_round > TTL / RETRY_PER_TTL
    renewer.close()


def test_the_renewers_own_client_keeps_the_settings_and_bounds_each_call(
    cluster: tuple[EmbeddedCluster, redis.RedisCluster],
) -> None:
    servers, _ = cluster
    client = redis.RedisCluster.from_url(servers.url, socket_timeout=0.05, client_name="app")
    try:
        bounded = bounded_client(client, 1.0)
        kwargs = bounded.get_connection_kwargs()
        assert kwargs["socket_timeout"] == 0.05  # the client's own, shorter
        assert kwargs["socket_connect_timeout"] == 1.0
        assert kwargs["client_name"] == "app"
        assert bounded.set("{x}", 1) and client.get("{x}") == b"1"
        bounded.close()
    finally:
        client.close()
