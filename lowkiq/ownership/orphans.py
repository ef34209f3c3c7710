"""Orphans go to the youngest processes: a pure step of the assignment, no Redis.

An **orphan** is a shard whose previous owner is no longer a member at all: its
process died and its beat lapsed (a process that stops on TERM goes quiet first
and hands its shards over while still a member).  An orphan is served again only
once its dead owner's lease expires, so it must not go to a process that leaves
before then: a rolling restart stops the oldest processes first, and an orphan
placed on the next one to go waits out a second lease, and a third.

:func:`~lowkiq.ownership.assignment.assign` deals orphans to the youngest
processes with room first; :func:`shelter` then moves each orphan still placed on
an older process to a younger one, which gives that older process a shard of its
own in exchange (of the same queue, or of another where the counts allow): every
process keeps its count of every queue, so the assignment stays balanced, and each
exchange moves at most one live shard, served again within a hand-over.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Sequence
from functools import cached_property
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lowkiq.ownership.assignment import ShardKey

#: How many younger members an orphan tries to exchange with across queues.
TAKERS = 8

#: The least and most shards of a queue a member may own (``None``: it does not serve
#: the queue), by the member's number and the queue's name.
Bounds = Callable[[int, str], "tuple[int, int] | None"]


def shelter(
    owner_of: dict[ShardKey, int],
    orphans: Sequence[ShardKey],
    kept: Collection[ShardKey],
    joined: Sequence[int],
    bounds: Bounds,
) -> int:
    """Exchange each orphan placed on a member for a shard of a younger member, oldest
    owners first and youngest takers first, in place; returns how many kept shards
    moved to make room (shards moving anyway are given first).

    ``owner_of`` maps every shard to its member's number; ``joined`` is each member's
    join time (a larger one is younger; members that joined at the same time exchange
    nothing).  No member's count of any queue leaves its ``bounds``, and no member's
    total changes.
    """
    if len(set(joined)) < 2 or not orphans:
        return 0
    youngest_first = sorted(range(len(joined)), key=lambda i: -joined[i])
    exchange = _Exchange(owner_of, orphans, kept, joined, bounds)
    oldest_owners_first = sorted(orphans, key=lambda key: (joined[owner_of[key]], key))
    left = exchange.within_queues(oldest_owners_first, youngest_first)
    exchange.across_queues(left, youngest_first)
    return exchange.live_moves


class _Exchange:
    """The shards each member can give in exchange for an orphan, and the counts."""

    def __init__(
        self,
        owner_of: dict[ShardKey, int],
        orphans: Sequence[ShardKey],
        kept: Collection[ShardKey],
        joined: Sequence[int],
        bounds: Bounds,
    ) -> None:
        self.owner_of = owner_of
        self.joined = joined
        self.bounds = bounds
        self.kept = kept
        self.live_moves = 0
        lost = set(orphans)
        #: Per member, per queue: the shards it can give, popped from the end: those
        #: moving anyway first, its kept ones last.
        self.offers: dict[int, dict[str, list[ShardKey]]] = {}
        moving: dict[int, dict[str, list[ShardKey]]] = {}
        for key, i in owner_of.items():
            if key not in lost:
                into = self.offers if key in kept else moving
                into.setdefault(i, {}).setdefault(key[0], []).append(key)
        for i, queues in moving.items():
            mine = self.offers.setdefault(i, {})
            for queue, keys in queues.items():
                mine[queue] = [*mine.get(queue, ()), *keys]

    @cached_property
    def counts(self) -> Counter[tuple[int, str]]:
        """How many shards of each queue each member owns (kept up to date by swaps)."""
        return Counter((i, key[0]) for key, i in self.owner_of.items())

    def within_queues(
        self, orphans: Sequence[ShardKey], youngest_first: Sequence[int]
    ) -> list[ShardKey]:
        """Exchange orphans for shards of their own queue: the oldest owners' orphans for
        the youngest members' shards, while the taker is the younger; returns the rest."""
        by_queue: dict[str, list[ShardKey]] = {}
        for key in orphans:
            by_queue.setdefault(key[0], []).append(key)
        left: list[ShardKey] = []
        for queue, waiting in by_queue.items():
            givers = [i for i in youngest_first for _ in self.offers.get(i, {}).get(queue, ())]
            paired = 0
            for orphan, taker in zip(waiting, givers, strict=False):
                if self.joined[taker] <= self.joined[self.owner_of[orphan]]:
                    break
                self._swap(orphan, taker, self.offers[taker][queue].pop())
                paired += 1
            left += waiting[paired:]
        return left

    def across_queues(self, orphans: Sequence[ShardKey], youngest_first: Sequence[int]) -> None:
        """Exchange each orphan still on an older member for a younger member's shard of
        another queue, where both members' counts of both queues stay in bounds; each
        orphan tries the :data:`TAKERS` youngest members that may own one more of its
        queue (the cost stays linear in the orphans)."""
        takers: dict[str, list[int]] = {}
        for orphan in orphans:
            owner, queue = self.owner_of[orphan], orphan[0]
            if not self._may_own(owner, queue, -1):
                continue
            if queue not in takers:
                takers[queue] = [i for i in youngest_first if self._may_own(i, queue, +1)]
            candidates = takers[queue]
            for taker in list(candidates[:TAKERS]):
                if self.joined[taker] <= self.joined[owner]:
                    break
                given = self._offer(taker, owner)
                if given is not None:
                    self._swap(orphan, taker, given)
                    if not self._may_own(taker, queue, +1):
                        candidates.remove(taker)
                    break

    def _may_own(self, i: int, queue: str, change: int) -> bool:
        """Whether member ``i`` may own ``change`` more shards of ``queue``."""
        bounds = self.bounds(i, queue)
        if bounds is None:
            return False
        low, high = bounds
        return low <= self.counts[(i, queue)] + change <= high

    def _offer(self, taker: int, owner: int) -> ShardKey | None:
        """A shard ``taker`` can give ``owner`` from a queue where ``taker`` may own one
        less and ``owner`` one more; ``None`` if it has none."""
        for queue, offered in self.offers.get(taker, {}).items():
            if offered and self._may_own(taker, queue, -1) and self._may_own(owner, queue, +1):
                return offered.pop()
        return None

    def _swap(self, orphan: ShardKey, taker: int, given: ShardKey) -> None:
        owner = self.owner_of[orphan]
        self.owner_of[orphan] = taker
        self.owner_of[given] = owner
        if orphan[0] != given[0]:
            counts = self.counts
            counts[(owner, orphan[0])] -= 1
            counts[(taker, orphan[0])] += 1
            counts[(taker, given[0])] -= 1
            counts[(owner, given[0])] += 1
        self.live_moves += given in self.kept
