"""Lease renewals do not wait on anything else: on a client of their own they go on
while every connection of the coordinator's pool is held by a blocking wait, and the
renewer stops at once when told to, even while Redis does not answer."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

import lowkiq
from lowkiq.clients.embedded import EmbeddedServer, redis_server_binary, start_server
from lowkiq.ownership import leases
from lowkiq.ownership.leases import HeldLease, Term
from lowkiq.ownership.renewer import Renewer
from lowkiq.settings import pooled_client
from tests.ownership.stand_in import coordinator_of


class Orders(lowkiq.Worker):
    shards_count = 2


#: The name of the coordinator pool's connections (other tests' may block too).
POOL_NAME = "renewal-apart-pool"


def blocked_in_blpop(client: redis.Redis) -> int:
    """How many connections of the coordinator's pool wait in a ``BLPOP`` now."""
    return sum(
        entry.get("cmd") == "blpop" and entry.get("name") == POOL_NAME
        for entry in client.client_list()
    )


def test_renewals_go_on_while_the_coordinators_pool_is_blocked(
    redis_url: str, redis_client: redis.Redis
) -> None:
    client = pooled_client(redis.Redis.from_url(redis_url, client_name=POOL_NAME), 2, 10.0)
    renewal_client = redis.Redis.from_url(redis_url)
    coordinator = coordinator_of(
        client, "host:1:renewing", Orders, 1.5, 0.5, renewal_client=renewal_client
    )
    coordinator.beat()
    held = {h.lease.shard: h for h in coordinator.holdings.leases()}
    assert sorted(held) == [0, 1]
    tokens = leases.tokens(Orders.queue())
    # The coordinator's wait for a nudge and a slow call hold both of its connections
    # for longer than two lease TTLs.
    blocking = [
        threading.Thread(target=coordinator.membership.wait_for_nudge, args=(4.0,)),
        threading.Thread(target=client.blpop, args=(["elsewhere"],), kwargs={"timeout": 4}),
    ]
    while coordinator.membership.wait_for_nudge(0.01):
        pass  # the nudges of the first beat: the wait below blocks
    for thread in blocking:
        thread.start()
    deadline = time.monotonic() + 2.0
    while blocked_in_blpop(redis_client) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert blocked_in_blpop(redis_client) == 2  # the coordinator's pool is exhausted
    stop = threading.Event()
    renewing = threading.Thread(target=coordinator.renewer.run, args=(stop,))
    renewing.start()
    try:
        time.sleep(3.0)
        assert leases.tokens(Orders.queue()) == tokens  # never lapsed
        for shard in (0, 1):
            assert redis_client.pttl(Orders.queue().keys.lease(shard)) > 500
            assert held[shard].term.remaining() > 0
    finally:
        stop.set()
        renewing.join(5.0)
        for thread in blocking:
            thread.join(10.0)
    assert not renewing.is_alive()
    coordinator.leave()
    renewal_client.close()
    client.close()


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[EmbeddedServer]:
    """A Redis server of this test's own (it is paused, then stopped)."""
    server = start_server(tmp_path / "redis", binary=redis_server_binary(prefer_path=True))
    try:
        yield server
    finally:
        server.stop()


def test_the_renewer_stops_at_once_while_redis_does_not_answer(
    own_redis: EmbeddedServer,
) -> None:
    client = redis.Redis.from_url(own_redis.url)  # no socket timeout: a call may hang
    queue = Orders.queue(client)
    lease, _, _ = leases.acquire(queue, 0, "host:1:renewing", 0.6)
    assert lease is not None
    held = HeldLease(lease, Term(0.6, time.monotonic()))
    renewer = Renewer(client, 0.6, lambda: [held], lambda lost: None)
    client.execute_command("CLIENT", "PAUSE", 10_000, "ALL")  # Redis hangs
    stop = threading.Event()
    renewing = threading.Thread(target=renewer.run, args=(stop,))
    renewing.start()
    time.sleep(0.6)  # a round is sent by now, and waits for its reply
    assert held.term.remaining() < 0.3
    stopped_at = time.monotonic()
    stop.set()
    renewing.join(3.0)
    assert not renewing.is_alive()
    assert time.monotonic() - stopped_at < 0.5
    client.close()
