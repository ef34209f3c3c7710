"""A schedule's revision (what was changed at run time) follows its id across a reshard:
a process following an older definition is still refused in the id's new shard, both
once the reshard carried the state over and while it has not yet."""

from __future__ import annotations

import pytest

import lowkiq
from lowkiq.ownership.resharding import _Resharding, reshard
from lowkiq.storage import schedules as store
from lowkiq.storage.queue import Queue


class Shipments(lowkiq.Worker):
    shards_count = 5


@pytest.fixture
def queue(redis_client) -> Queue:
    lowkiq.settings.workers = [Shipments]
    return Shipments.queue()


def redis_ms(queue: Queue) -> int:
    seconds, micros = queue.client.time()
    return seconds * 1000 + micros // 1000


def revised(queue: Queue, names: list[str], rev: int) -> int:
    """Record revision ``rev`` of each schedule; returns its ``last`` (the same for all
    within a second: the latest whole second before them)."""
    for name in names:
        assert store.revise(queue, name, rev)
    return max(store.read_state(queue, name).last or 0 for name in names)


def test_a_reshard_carries_the_revision_over(queue):
    names = [f"s{n}" for n in range(8)]
    revised(queue, names, 5)
    reshard(queue, 7)
    moved = Shipments.queue()
    for name in names:
        state = store.read_state(moved, name)
        assert state.rev == 5 and state.revised_at == state.last, name
        due = (redis_ms(moved) // 1000 - 1) * 1000
        old = store.pass_ticks(moved, name, state.last, due + 5_000, [], "old:1", 0)
        assert old.status == store.STALE, name
    assert store.read_state(moved, "s0").rev == 5


def test_during_a_reshard_the_new_shard_starts_from_the_retired_ones_revision(queue):
    store.revise(queue, "s", 5)
    old = queue.shard_of("s")
    last = store.read_state(queue, "s").last
    _Resharding(queue, "test", lambda: None, lambda progress: None).begin(7)
    queue.write("reshard_hold", [queue.keys.prefix(old)], "retired")
    queue.client.sadd(queue.keys.retired_set, old)
    during = Shipments.queue()
    during.refresh_layout()
    assert during.locator()("s") != old
    tick = redis_ms(during) + 60_000
    stale = store.pass_ticks(during, "s", last, tick, [], "old:1", 0)
    assert stale.status == store.STALE
    assert store.pass_ticks(during, "s", last, tick, [], "new:1", 5).status == store.NOT_DUE
