"""Shard leases: the only right to change a shard, with a TTL and a fencing epoch.

A lease's token is ``"<epoch> <owner>"``.  The epoch grows on every
acquisition and never expires, so a process that was paused past its lease
holds a token that no script accepts any more (see ``lua/lease_*.lua``).
Acquiring a shard restores the batch its previous owner left in processing,
in the same script, so that batch is put back exactly once, by the new owner.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from lowkiq.storage import blob
from lowkiq.storage.queue import Queue


@dataclass(frozen=True)
class Lease:
    """A lease held on one shard of one queue."""

    queue: Queue
    shard: int
    token: str
    #: Jobs the acquisition moved to the morgue, their process having died running them
    #: ``max_restores`` times: ``{"id", "payloads", "error"}`` for ``retries_exhausted``.
    buried: tuple[dict[str, Any], ...] = field(default=(), compare=False, repr=False)

    @property
    def epoch(self) -> int:
        """The number of this acquisition of the shard: more than every earlier one's, and
        at least Redis's time in milliseconds when it was taken (so it never goes back,
        also after Redis lost its data)."""
        return int(self.token.split(" ", 1)[0])

    def __repr__(self) -> str:
        return f"<Lease {self.queue.name}:{self.shard} epoch {self.epoch}>"


#: A thread performs no batch once its lease has less than this share of its TTL left
#: by the local clock (renewals come every third of the TTL).
DEADLINE_MARGIN = 0.1

#: An epoch weighs this much in a fence: time (the epoch, milliseconds of Redis's time,
#: ``lua/lease_acquire.lua``) dominates it, so a later owner's fence is higher in any
#: layout, also after Redis lost its data and the queue's layout with it.  Epochs stay
#: below 2**43 until the year 2248, so a fence fits a signed 64-bit integer.  The
#: factor puts every fence above every fence of the former formula
#: ``shard * 2**43 + epoch`` for shard numbers below 200,000 (see the fencing guide).
FENCE_EPOCH = 2**20


@dataclass
class Term:
    """When a held lease runs out by this process's clock: the last renewal Redis
    confirmed (or the acquisition) was *sent* at ``confirmed_at`` (``time.monotonic``)."""

    ttl: float
    confirmed_at: float

    def confirm(self, sent_at: float) -> None:
        """A renewal sent at ``sent_at`` was confirmed."""
        self.confirmed_at = max(self.confirmed_at, sent_at)

    def remaining(self) -> float:
        """Seconds the lease is surely still held, less a margin (negative: maybe lapsed)."""
        return self.confirmed_at + self.ttl * (1 - DEADLINE_MARGIN) - time.monotonic()


@dataclass
class HeldLease:
    """A lease this process holds and its term."""

    lease: Lease
    term: Term


def fence_of(shard: int, epoch: int) -> int:
    """A number that only grows for a given job id: ``epoch * 2**20``.  Epochs grow
    with every owner of a shard and are at least Redis's time in milliseconds; a
    reshard's new shard runs no job before its lease's epoch is above every epoch of the
    old shards its jobs came from (``lua/reshard_open.lua``).  ``shard`` does not weigh:
    after Redis lost its data a queue starts again from shard 0."""
    return epoch * FENCE_EPOCH


def parse_owner(token: str) -> str:
    """The owner (process id) of a lease token."""
    return token.split(" ", 1)[1]


def died_error(times: int) -> str:
    """The error of a job moved to the morgue because its process died running it."""
    return (
        f"the process died running this job {times} times (max_restores); "
        "moved to the morgue without running it again"
    )


def acquire(
    queue: Queue, shard: int, owner: str, ttl: float, now: float | None = None
) -> tuple[Lease | None, int, int]:
    """Take ``shard`` when nobody else holds it (``owner`` holding it already gets a
    new epoch at once: its first call's reply was lost, see ``lua/lease_acquire.lua``).

    Returns the lease and how many jobs its previous owner left in processing
    (now restored; those restored ``queue.max_restores`` times are in the lease's
    ``buried`` instead), or ``None`` and how many milliseconds the current lease
    has left.
    """
    # The restore's time is Redis's, unless a test fixes ``now``.
    at = "" if now is None else now
    times = queue.max_restores
    error = died_error(times) if times else ""
    death = queue.codec.error_bytes(error) if times else b""
    reply = queue.write(
        "lease_acquire", [queue.keys.prefix(shard)], owner, _ms(ttl), at, times or "", death
    )
    if reply[0] is None:
        return None, 0, int(reply[1])
    dead = reply[2]
    buried = tuple(
        {
            "id": dead[i].decode(),
            "payloads": queue.load_pairs(blob.unpack(dead[i + 1])),
            "error": error,
        }
        for i in range(0, len(dead), 2)
    )
    return Lease(queue, shard, reply[0].decode(), buried), int(reply[1]), 0


#: The owner an operator's restore of orphaned batches takes the leases under.
ORPHANS_OWNER = "restore-orphaned"
#: How long it holds each of them (it releases them at once).
ORPHANS_TTL = 30.0


def restore_orphaned(queue: Queue) -> tuple[int, list[dict[str, Any]]]:
    """Put back into the queue the batches left in processing in shards no process holds
    (their process died, and no live process serves the queue, e.g. its worker class was
    removed from ``settings.workers``): each shard's lease is taken, which restores its
    batch, fenced like any new owner's, then released.  A shard a live process holds is
    left alone.  Returns how many jobs went back, and those moved to the morgue instead
    (restored ``max_restores`` times)."""
    pipe = queue.client.pipeline(transaction=False)
    shards = list(queue.shards)
    for shard in shards:
        pipe.exists(queue.keys.processing_hash(shard))
        pipe.exists(queue.keys.lease(shard))
    flags = pipe.execute()
    restored, buried = 0, list[dict[str, Any]]()
    for index, shard in enumerate(shards):
        if not flags[2 * index] or flags[2 * index + 1]:
            continue
        lease, count, _ = acquire(queue, shard, ORPHANS_OWNER, ORPHANS_TTL)
        if lease is None:  # a process took it meanwhile: it restored the batch
            continue
        release(queue, [lease])
        restored += count
        buried += lease.buried
    return restored, buried


def renew(queue: Queue, leases: Sequence[Lease], ttl: float) -> list[Lease]:
    """Extend ``leases`` (all of ``queue``) by ``ttl`` seconds, in one round trip; returns
    those no longer held."""
    if not leases:
        return []
    renewed = queue.run_pipelined(
        [("lease_renew", lease.shard, (_ms(ttl), lease.token)) for lease in leases]
    )
    return [lease for lease, ok in zip(leases, renewed, strict=True) if not ok]


def release(queue: Queue, leases: Sequence[Lease]) -> int:
    """Give up ``leases`` (all of ``queue``) still held, in one round trip; returns how
    many were."""
    if not leases:
        return 0
    calls = [("lease_release", lease.shard, (lease.token,)) for lease in leases]
    return sum(queue.run_pipelined(calls))


def _by_queue(held: Iterable[Lease]) -> list[list[Lease]]:
    by_queue: dict[str, list[Lease]] = {}
    for lease in held:
        by_queue.setdefault(lease.queue.name, []).append(lease)
    return list(by_queue.values())


def renew_many(held: Iterable[Lease], ttl: float) -> list[Lease]:
    """Extend leases of any queues, a round trip per queue; returns those no longer held."""
    return [lost for same in _by_queue(held) for lost in renew(same[0].queue, same, ttl)]


def release_many(held: Iterable[Lease]) -> int:
    """Give up leases of any queues, a round trip per queue; returns how many were held."""
    return sum(release(same[0].queue, same) for same in _by_queue(held))


def tokens(queue: Queue) -> list[str | None]:
    """The current lease token of each shard of ``queue`` (``None``: nobody holds it)."""
    pipe = queue.client.pipeline(transaction=False)
    for shard in queue.shards:
        pipe.get(queue.keys.lease(shard))
    return [token.decode() if token else None for token in pipe.execute()]


def lease_ms(seconds: float) -> int:
    """A TTL in whole milliseconds, at least 1."""
    return max(1, round(seconds * 1000))


def evict(queue: Queue, shard: int, owner: str) -> bool:
    """Free ``shard``'s lease when ``owner`` (a process known to be dead) holds it."""
    return bool(queue.write("lease_evict", [queue.keys.prefix(shard)], owner))


def _ms(seconds: float) -> int:
    return max(1, round(seconds * 1000))
