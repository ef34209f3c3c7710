"""A reshard's moved jobs run under fences above those they ran under in the old shards,
also when an old shard changed hands after its new shard was leased (fences are the
epoch, time, first: ``lowkiq.ownership.leases.fence_of``); on one server and a cluster."""

from __future__ import annotations

import time

import redis

import lowkiq
from lowkiq.ownership import leases, resharding
from lowkiq.ownership.resharding import Progress
from lowkiq.storage.queue import Queue
from tests.both_redis import server_or_cluster_client

__all__ = ["server_or_cluster_client"]


class Moved(lowkiq.Worker):
    """Two shards, resharded to four."""

    shards_count = 2


def test_a_new_shard_leased_before_an_old_one_changed_hands_is_taken_again_higher(
    redis_client: redis.Redis,
) -> None:
    lowkiq.settings.workers = [Moved]
    queue: Queue = Moved.queue()
    Moved.perform_async([{"id": f"job-{n}"} for n in range(20)])
    for shard in range(6):  # every shard leased once: epochs are Redis's milliseconds
        lease, _, _ = leases.acquire(queue, shard, "first", 0.001)
        assert lease is not None
        leases.release(queue, [lease])
    early: dict[int, str] = {}
    late: dict[int, int] = {}

    def on_progress(progress: Progress) -> None:
        if not progress.event.startswith("began"):
            return
        # The new shards are leased first, then the old ones change hands later.
        for new in progress.layout.new_shards:
            lease, _, _ = leases.acquire(queue, new, "early", 30)
            assert lease is not None
            early[new] = lease.token
        time.sleep(0.01)
        for old in progress.layout.old_shards:
            lease, _, _ = leases.acquire(queue, old, "late", 0.05)
            assert lease is not None
            late[old] = lease.epoch
        time.sleep(0.1)  # the old shards' leases expire: the reshard takes none of them

    resharding.reshard(queue, 4, on_progress)
    old_fence = max(leases.fence_of(old, epoch) for old, epoch in late.items())
    assert Moved.queue().shards == range(2, 6)
    for new, token in early.items():
        # The lease taken before the old shards changed hands is gone: nothing is popped
        # under its lower fence.
        assert redis_client.get(queue.keys.lease(new)) is None, token
        lease, _, _ = leases.acquire(queue, new, "next", 30)
        assert lease is not None
        assert leases.fence_of(new, lease.epoch) > old_fence
