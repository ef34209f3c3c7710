"""Storage calls for tests, holding the shard's lease as a worker process would.

Tests of the storage rules call pop, ack, fail and restore as the one owner of
each shard: the lease is acquired on first use (with a long TTL) and reused.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from lowkiq.ownership import leases
from lowkiq.storage.queue import PoppedJob, Queue

OWNER = "tests"
TTL = 3600.0


def token(queue: Queue, shard: int) -> str:
    """This test's lease token on ``shard``, acquired when nobody holds it."""
    held = queue.client.get(queue.keys.lease(shard))
    if held is not None:
        return held.decode()
    lease, _, _ = leases.acquire(queue, shard, OWNER, TTL)
    assert lease is not None
    return lease.token


def pop(
    queue: Queue, shard: int, limit: int, now: float | None = None, ack_shard: int | None = None
) -> list[PoppedJob] | None:
    """Pop up to ``limit`` due jobs of ``shard``, acking ``ack_shard`` first.

    An empty list when none is due; ``None`` while the processing area is occupied.
    """
    ack_token = "" if ack_shard is None else token(queue, ack_shard)
    ack_batch = 0 if ack_shard is None else batch(queue, ack_shard)
    popped = queue.pop(
        shard,
        token(queue, shard),
        limit,
        now=now,
        ack_shard=ack_shard,
        ack_token=ack_token,
        ack_batch=ack_batch,
    )
    assert not popped.fenced, popped
    return None if popped.occupied else popped.jobs


def batch(queue: Queue, shard: int) -> int:
    """The number of the batch in ``shard``'s processing area (its last pop's)."""
    return int(queue.client.get(queue.keys.batch_counter(shard)) or 0)


def ack(queue: Queue, shard: int) -> int:
    """Ack ``shard``'s batch."""
    return queue.ack(shard, token(queue, shard), batch(queue, shard))


def fail(
    queue: Queue,
    shard: int,
    jobs: Sequence[PoppedJob],
    error: str,
    retry_in: Callable[[int], float],
    max_retry_count: int,
    now: float | None = None,
) -> list[dict[str, Any]]:
    """Fail ``shard``'s batch."""
    number = batch(queue, shard)
    return queue.fail(
        shard, token(queue, shard), number, jobs, error, retry_in, max_retry_count, now=now
    )


def restore(queue: Queue, shard: int, now: float | None = None) -> int:
    """Restore ``shard``'s processing area."""
    return queue.restore(shard, token(queue, shard), now=now)
