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
from dataclasses import dataclass

from lowkiq.storage.queue import Queue


@dataclass(frozen=True)
class Lease:
    """A lease held on one shard of one queue."""

    queue: Queue
    shard: int
    token: str

    @property
    def epoch(self) -> int:
        """How many times the shard had been acquired when this lease was taken."""
        return int(self.token.split(" ", 1)[0])

    def __repr__(self) -> str:
        return f"<Lease {self.queue.name}:{self.shard} epoch {self.epoch}>"


#: A thread performs no batch once its lease has less than this share of its TTL left
#: by the local clock (renewals come every third of the TTL).
DEADLINE_MARGIN = 0.1

#: Shard numbers weigh this much in a fence: a reshard's new shards have higher
#: numbers than every old one, so a fence grows across reshards too.
FENCE_SHARD = 2**32


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
    """A lease this process holds, the thread that serves its shard, and its term."""

    lease: Lease
    thread: int
    term: Term


def fence_of(shard: int, epoch: int) -> int:
    """A number that only grows for a given job id: across hand-overs (the epoch) and
    across reshards (the shard numbers of a new layout are higher)."""
    return shard * FENCE_SHARD + epoch


def parse_owner(token: str) -> str:
    """The owner (process id) of a lease token."""
    return token.split(" ", 1)[1]


def acquire(
    queue: Queue, shard: int, owner: str, ttl: float, now: float | None = None
) -> tuple[Lease | None, int, int]:
    """Take ``shard`` when nobody holds it.

    Returns the lease and how many jobs its previous owner left in processing
    (now restored), or ``None`` and how many milliseconds the current lease
    has left.
    """
    # The restore's time is Redis's, unless a test fixes ``now``.
    at = "" if now is None else now
    reply = queue.write("lease_acquire", [queue.keys.prefix(shard)], owner, _ms(ttl), at)
    if reply[0] is None:
        return None, 0, int(reply[1])
    return Lease(queue, shard, reply[0].decode()), int(reply[1]), 0


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
    groups: dict[str, list[Lease]] = {}
    for lease in held:
        groups.setdefault(lease.queue.name, []).append(lease)
    return list(groups.values())


def renew_many(held: Iterable[Lease], ttl: float) -> list[Lease]:
    """Extend leases of any queues, a round trip per queue; returns those no longer held."""
    return [lost for group in _by_queue(held) for lost in renew(group[0].queue, group, ttl)]


def release_many(held: Iterable[Lease]) -> int:
    """Give up leases of any queues, a round trip per queue; returns how many were held."""
    return sum(release(group[0].queue, group) for group in _by_queue(held))


def holders(queue: Queue) -> list[str | None]:
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
