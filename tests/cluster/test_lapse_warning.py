"""A lease that may have lapsed by the process's clock while Redis still holds it (its
renewals could not get through, e.g. a master failing over): its shard is not popped
again and again only to put each batch back, and the lapse is logged once; once a
renewal is confirmed, the shard is served again (and a later lapse is logged again)."""

from __future__ import annotations

import logging
import time

import pytest
import redis

import lowkiq
from lowkiq.ownership.leases import Term
from lowkiq.runtime.shard_handler import Request, ShardHandler
from tests.runtime.serving import dispatcher_of, handler_of, ids_by_shard, turn_for


class Lapsing(lowkiq.Worker):
    """Three shards; records the ids it performed."""

    shards_count = 3
    performed: list[str] = []

    @classmethod
    def perform(cls, payloads_by_id: dict) -> None:
        """Record the ids."""
        cls.performed += list(payloads_by_id)


def lapse_warnings(caplog: pytest.LogCaptureFixture, name: str) -> int:
    """How many warnings said ``name``'s lease may have lapsed."""
    return sum(
        record.levelno == logging.WARNING
        and record.getMessage().startswith(f"{name}: lease epoch")
        and "may have lapsed" in record.getMessage()
        for record in caplog.records
    )


def counting_pops(handler: ShardHandler) -> list[int]:
    """Count the pops of ``handler``'s shard from now on (in the list's one item)."""
    count = [0]
    pop_command = handler.pop_command

    def counted(packed: bool = True) -> Request:
        count[0] += 1
        return pop_command(packed)

    handler.pop_command = counted  # type: ignore[method-assign]
    return count


def test_a_lapsed_lease_is_logged_once_and_its_shard_waits_for_the_renewal(
    cluster_client: redis.RedisCluster, caplog: pytest.LogCaptureFixture
) -> None:
    lowkiq.settings.workers = [Lapsing]
    Lapsing.performed = []
    queue = Lapsing.queue(cluster_client)
    ids = ids_by_shard(queue, 3)
    with dispatcher_of(cluster_client, Lapsing, poll_interval=0.05) as (dispatcher, _):
        for shard in queue.shards:
            handler_of(dispatcher, shard).term = Term(10.0, time.monotonic())
        lapsed = handler_of(dispatcher, 0)
        # The last renewal confirmed is older than the TTL; Redis still holds the lease.
        lapsed.term.confirmed_at -= 60
        pops = counting_pops(lapsed)
        Lapsing.perform_async([{"id": i} for shard_ids in ids.values() for i in shard_ids])
        with caplog.at_level(logging.WARNING):
            turn_for(dispatcher, 1.0)
        assert lapse_warnings(caplog, lapsed.name) == 1
        # Its jobs wait, not popped to be put back in a loop; the other shards' ran.
        assert pops == [0]
        assert not set(ids[0]) & set(Lapsing.performed)
        assert set(ids[1] + ids[2]) <= set(Lapsing.performed)
        # A renewal is confirmed: its jobs run.
        lapsed.term.confirm(time.monotonic())
        turn_for(dispatcher, 0.5)
        assert set(ids[0]) <= set(Lapsing.performed)
        # A second lapse is a second warning.
        lapsed.term.confirmed_at -= 60
        Lapsing.perform_async([{"id": ids[0][0]}])
        turn_for(dispatcher, 0.5)
        assert lapse_warnings(caplog, lapsed.name) == 2
