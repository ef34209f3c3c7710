"""Lease renewals: a heartbeat carries them when they are due, the renewer's own timer
renews when no heartbeat comes, and a renewal tells a lease lost from one its own dispatcher
gave up (only the first is logged and taken from the dispatcher)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator

import pytest
import redis

import lowkiq
from lowkiq.ownership import leases
from lowkiq.ownership.coordinator import Coordinator
from lowkiq.runtime.server import Server
from tests.built_server import built_server

EXPIRED = "expired before it was renewed"


class OrderWorker(lowkiq.Worker):
    shards_count = 2


@pytest.fixture
def built(redis_url: str, redis_client: redis.Redis) -> Iterator[tuple[Server, Coordinator]]:
    """A one-thread server, built, holding both shards' leases."""
    with built_server(redis_url, OrderWorker) as (server, coordinator, _):
        assert coordinator.holdings.owned() == [("OrderWorker", 0), ("OrderWorker", 1)]
        yield server, coordinator


def test_leases_the_dispatcher_released_while_stopping_are_not_reported_lost(
    built: tuple[Server, Coordinator], caplog: pytest.LogCaptureFixture
) -> None:
    server, coordinator = built
    dispatcher = server.dispatcher
    assert dispatcher is not None
    coordinator.close()
    # The dispatcher gave its leases up at stop; the heartbeat read its list just before.
    leases.release_many(leases.Lease(h.queue, h.shard, h.token) for h in dispatcher.handlers)
    with caplog.at_level(logging.WARNING, logger="lowkiq"):
        assert coordinator.renewer.renew() == 0
    assert EXPIRED not in caplog.text


def test_a_lease_lost_while_held_is_reported_and_taken_from_the_dispatcher(
    built: tuple[Server, Coordinator], redis_client: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    server, coordinator = built
    dispatcher = server.dispatcher
    assert dispatcher is not None
    old = next(h for h in dispatcher.handlers if h.shard == 0)
    redis_client.delete(OrderWorker.queue().keys.lease(0))  # it expired
    with caplog.at_level(logging.WARNING, logger="lowkiq"):
        assert coordinator.renewer.renew() == 1
    assert f"OrderWorker:0: lease epoch {old.token.split()[0]} " + EXPIRED in caplog.text
    coordinator.beat()
    dispatcher.apply()
    # The dispatcher serves shard 0 under the lease the same heartbeat acquired again.
    (again,) = [h for h in dispatcher.handlers if h.shard == 0]
    assert again is not old and again.token != old.token


def test_a_heartbeat_carries_the_renewals_when_they_are_due(
    redis_url: str, redis_client: redis.Redis
) -> None:
    with built_server(redis_url, OrderWorker, lease_ttl=3.0, heartbeat_interval=1.0) as (
        _,
        coordinator,
        _,
    ):
        lease_key = OrderWorker.queue().keys.lease(0)
        renewer = coordinator.renewer
        assert renewer.rider() is None  # the first beat just carried a round
        time.sleep(0.6)  # more than half of the 1 s renewal interval
        assert redis_client.pttl(lease_key) < 2500
        held = {h.lease.shard: h for h in coordinator.holdings.leases()}
        before = held[0].term.confirmed_at
        coordinator.beat()
        assert redis_client.pttl(lease_key) > 2800
        assert held[0].term.confirmed_at > before
        # The renewer's own timer now waits past the next heartbeat.
        assert renewer.own_round_at() - time.monotonic() > renewer.interval


def test_the_renewer_renews_on_its_own_when_no_heartbeat_comes(
    redis_url: str, redis_client: redis.Redis
) -> None:
    with built_server(redis_url, OrderWorker, lease_ttl=1.5, heartbeat_interval=0.5) as (
        _,
        coordinator,
        _,
    ):
        lease_key = OrderWorker.queue().keys.lease(0)
        token = redis_client.get(lease_key)
        stop = threading.Event()
        renewing = threading.Thread(target=coordinator.renewer.run, args=(stop,))
        renewing.start()
        try:
            time.sleep(3.5)  # more than two lease TTLs, and no heartbeat
            assert redis_client.get(lease_key) == token
        finally:
            stop.set()
            renewing.join()
