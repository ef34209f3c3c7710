"""The groups of a queue (SPEC §14) as the dashboard lists them: the groups with the
most queued jobs across its shards, with their earliest ``perform_in`` and their jobs
in flight.

The cost is bounded: each shard's groups are read up to :data:`SCANNED_GROUPS` of its
turns (the groups with due jobs, next served first) and as many of its waits (the
groups not yet due, soonest first); a queue with more groups is counted over those
(:attr:`GroupRows.complete` is then ``False``)."""

from __future__ import annotations

from collections import Counter
from typing import TypedDict

from lowkiq.storage.processing import processing_group
from lowkiq.storage.queue import Queue

#: The most groups of each shard's turns, and of its waits, one reading counts.
SCANNED_GROUPS = 1000


class GroupRows(list["GroupRow"]):
    """The rows of :func:`group_rows`, and whether every group of every shard was
    counted (``False``: a shard had more than :data:`SCANNED_GROUPS` groups due or
    waiting, and only those were)."""

    complete: bool = True
    #: How many groups of each shard's turns, and of its waits, were read at most.
    scanned: int = SCANNED_GROUPS


class GroupRow(TypedDict):
    """One group of a queue as :func:`group_rows` lists it."""

    #: The group's name; ``None``: the default group (the jobs without one).
    name: str | None
    #: How many of its jobs are queued.
    length: int
    #: The earliest ``perform_in`` of its queued jobs (unix seconds); ``None`` when none
    #: is queued (all of its jobs are in flight).
    oldest_due: float | None
    #: How many of its jobs are in processing areas now (being performed).
    in_flight: int


def group_rows(queue: Queue, limit: int, scan: int | None = None) -> GroupRows:
    """The ``limit`` groups of ``queue`` with the most queued jobs, most first.

    The default group (``name`` ``None``) is listed beside other groups only: a queue
    none of whose jobs has a group gives ``[]``.  Two pipelined round trips: the groups
    of each shard (up to ``scan``, default :data:`SCANNED_GROUPS`, of its turns and of
    its waits), its processing area and its base group, then the size and head of each
    group's index in each shard (of the queue itself in a shard not indexed).
    """
    scan = SCANNED_GROUPS if scan is None else scan
    shards = queue.shards
    pipe = queue.client.pipeline(transaction=False)
    for shard in shards:
        pipe.zrange(queue.keys.group_turns_zset(shard), 0, scan)
        pipe.zrange(queue.keys.group_waits_zset(shard), 0, scan)
        pipe.hvals(queue.keys.processing_hash(shard))
        pipe.get(queue.keys.group_base(shard))
    replies = pipe.execute()
    found = GroupRows()
    found.scanned = scan
    in_flight: Counter[str | None] = Counter()
    # The sorted sets id -> perform_in of each group in each shard, and their groups.
    indexes: list[tuple[str, str | None]] = []
    # The shards not indexed, and the group of all their queued jobs.
    ungrouped: list[tuple[int, str | None]] = []
    for n, shard in enumerate(shards):
        turns, waits, area, base = replies[4 * n : 4 * n + 4]
        if len(turns) > scan or len(waits) > scan:  # one more read than counted
            found.complete = False
            turns, waits = turns[:scan], waits[:scan]
        in_flight.update(processing_group(value)[0] for value in area)
        if not turns and not waits:
            ungrouped.append((shard, base.decode() if base else None))
        for name in dict.fromkeys(turns + waits):
            group = name.decode()
            indexes.append((queue.keys.group_ids_zset(shard, group), group or None))
    if not indexes and set(in_flight) <= {None} and all(base is None for _, base in ungrouped):
        return found
    # A shard not indexed holds jobs of its base group only.
    indexes += [(queue.keys.perform_in_zset(shard), base) for shard, base in ungrouped]
    pipe = queue.client.pipeline(transaction=False)
    for key, _ in indexes:
        pipe.zcard(key)
        pipe.zrange(key, 0, 0, withscores=True)
    replies = pipe.execute()
    lengths: Counter[str | None] = Counter()
    oldest: dict[str | None, float] = {}
    for n, (_, group) in enumerate(indexes):
        length, head = replies[2 * n : 2 * n + 2]
        if head:  # else the group left the shard between the round trips
            lengths[group] += length
            oldest[group] = min(oldest.get(group, head[0][1]), head[0][1])
    rows = [
        GroupRow(
            name=group,
            length=lengths[group],
            oldest_due=oldest.get(group),
            in_flight=in_flight[group],
        )
        for group in lengths.keys() | in_flight.keys()
    ]
    rows.sort(key=lambda row: (-row["length"], -row["in_flight"], _group_order(row["name"])))
    found.extend(rows[:limit])
    return found


def _group_order(name: str | None) -> tuple[bool, bytes]:
    """Groups of equal backlog: the default one first, then by name."""
    return (name is not None, (name or "").encode())
