"""A lease renewal tells a lease lost from one its own thread gave up: only
the first is logged and taken from the thread."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
import redis

import lowkiq
from lowkiq.ownership import leases
from lowkiq.ownership.coordinator import Coordinator
from lowkiq.server import Server
from tests.one_thread import one_thread

EXPIRED = "expired before it was renewed"


class OrderWorker(lowkiq.Worker):
    shards_count = 2


@pytest.fixture
def built(redis_url: str, redis_client: redis.Redis) -> Iterator[tuple[Server, Coordinator]]:
    """A one-thread server, built, holding both shards' leases."""
    with one_thread(redis_url, OrderWorker) as (server, coordinator, _):
        assert coordinator.owned() == [("OrderWorker", 0), ("OrderWorker", 1)]
        yield server, coordinator


def test_leases_the_threads_released_while_stopping_are_not_reported_lost(
    built: tuple[Server, Coordinator], caplog: pytest.LogCaptureFixture
) -> None:
    server, coordinator = built
    (lane,) = server.lanes
    coordinator.close()
    # The thread gave its leases up at stop; the heartbeat read its list just before.
    leases.release_many(leases.Lease(h.queue, h.shard, h.token) for h in lane.handlers)
    with caplog.at_level(logging.WARNING, logger="lowkiq"):
        assert coordinator.renewer.renew() == 0
    assert EXPIRED not in caplog.text


def test_a_lease_lost_while_held_is_reported_and_taken_from_its_thread(
    built: tuple[Server, Coordinator], redis_client: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    server, coordinator = built
    (lane,) = server.lanes
    old = next(h for h in lane.handlers if h.shard == 0)
    redis_client.delete(OrderWorker.queue().keys.lease(0))  # it expired
    with caplog.at_level(logging.WARNING, logger="lowkiq"):
        assert coordinator.renewer.renew() == 1
    assert "OrderWorker:0: lease epoch 1 " + EXPIRED in caplog.text
    coordinator.beat()
    lane.apply()
    # The thread serves shard 0 under the lease the same heartbeat acquired again.
    (again,) = [h for h in lane.handlers if h.shard == 0]
    assert again is not old and again.token != old.token
