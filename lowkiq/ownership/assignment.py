"""Which live process owns which shard: a pure function, tested without Redis.

Every process computes the same assignment from the same membership, so no
coordinator is needed.  Each shard ranks the processes that serve its queue by
weighted rendezvous hashing (highest random weight, HRW); the shards of a
queue then go, in index order, to the best-ranked process that is still under
its fair share (``ceil(shards * weight / total weight)``), so the load stays
balanced by threads while a process joining or leaving moves few shards:
a shard changes hands only when its owner left, or when the newcomer ranks
first for it and the previous owner no longer has room for it.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

#: A shard as ownership knows it: ``(queue name, shard number)``.
ShardKey = tuple[str, int]


@dataclass(frozen=True)
class Member:
    """A live process as the assignment sees it."""

    id: str
    weight: int
    queues: frozenset[str]


def _rank(member_id: str, queue: str, shard: int, weight: int) -> float:
    """Weighted rendezvous score of one member for one shard: higher wins."""
    digest = hashlib.blake2b(f"{queue}\0{shard}\0{member_id}".encode(), digest_size=8).digest()
    unit = (int.from_bytes(digest, "big") + 0.5) / 2.0**64  # in (0, 1)
    return -weight / math.log(unit)


def assign(
    members: Sequence[Member],
    shards_by_queue: Mapping[str, Sequence[int]],
    previous: Mapping[ShardKey, str] | None = None,
) -> dict[ShardKey, str]:
    """``(queue, shard) -> member id`` for every shard (by number) some live member serves.

    Members with weight 0 (quiet) take nothing; a queue no member serves is
    left out (its shards have no owner).
    """
    owners: dict[tuple[str, int], str] = {}
    for queue, shards in shards_by_queue.items():
        candidates = sorted(
            (m for m in members if m.weight > 0 and queue in m.queues), key=lambda m: m.id
        )
        if not candidates:
            continue
        total = sum(m.weight for m in candidates)
        room = {m.id: math.ceil(len(shards) * m.weight / total) for m in candidates}
        for shard in shards:
            ranked = sorted(
                candidates, key=lambda m: _rank(m.id, queue, shard, m.weight), reverse=True
            )
            owner = next(m for m in ranked if room[m.id] > 0)
            room[owner.id] -= 1
            owners[(queue, shard)] = owner.id
    return owners


def deal_sticky(
    wanted: Sequence[tuple[str, int]],
    current: Mapping[tuple[str, int], int],
    lanes: int,
    group: Callable[[tuple[str, int]], object] | None = None,
) -> dict[tuple[str, int], int]:
    """Deal ``wanted`` shards to ``lanes`` threads, keeping each already dealt one in place.

    New shards go, in order, to the thread with the fewest shards (ties: the
    lowest number), so dealing from scratch is the default splitter's
    round-robin, and a shard never moves between threads of one process.

    With ``group`` (on a Redis Cluster: the master of a shard's slot), a new
    shard goes to the least loaded thread that serves only its group, else to
    an empty thread, else to the least loaded one, never past the round-robin's
    largest load: a thread whose shards share a master pops them all in one
    write to it (:meth:`lowkiq.lane.Lane.process`).
    """
    wanted_set = set(wanted)
    dealt = {shard: lane for shard, lane in current.items() if shard in wanted_set}
    load = [0] * lanes
    groups: list[set[object]] = [set() for _ in range(lanes)]
    for shard, lane in dealt.items():
        load[lane] += 1
        if group is not None:
            groups[lane].add(group(shard))
    cap = max(-(-len(wanted) // lanes), max(load, default=0))
    for shard in wanted:
        if shard in dealt:
            continue
        if group is None:
            lane = min(range(lanes), key=lambda index: (load[index], index))
        else:
            own = group(shard)
            lane = min(
                range(lanes),
                key=lambda index: (
                    load[index] >= cap,
                    groups[index] != {own} and bool(groups[index]),
                    groups[index] != {own},
                    load[index],
                    index,
                ),
            )
            groups[lane].add(own)
        dealt[shard] = lane
        load[lane] += 1
    return dealt
