"""Which shards a round pops, and which acks go with them: plain functions of plain data
(no Redis, no clock), so every case is tested without a server.

A round (:meth:`lowkiq.runtime.dispatcher.Dispatcher.round`) first asks
:func:`first_look` which of its ready shards to consider and whether their due times
are known without asking Redis; it reads them when they are not; then
:func:`plan_round` decides, and the dispatcher sends the plan in one write (one per
master on a Redis Cluster).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from operator import attrgetter
from typing import NamedTuple

from lowkiq.ownership.assignment import ShardKey

#: How a scheduler orders the shards of a round (``Scheduler.order``).
Order = Callable[[Sequence[float | None]], list[int]]


class Candidate(NamedTuple):
    """A shard that may be popped in this round (leased, idle, ready).  (A tuple: a round
    makes one for each of its shards.)"""

    key: ShardKey
    #: When it was last popped (the dispatcher's clock; 0: never).
    popped_at: float = 0.0
    #: Its last pop left due jobs behind (or did work without a batch).
    backlog: bool = False
    #: Its wake list ended the dispatcher's last wait: a job of it became due.
    woken: bool = False


class Plan(NamedTuple):
    """A round: the shards to pop, in order (each pop carries its own shard's ack), and
    the finished batches acked in the same write, their shards not popped."""

    pops: tuple[ShardKey, ...] = ()
    acks: tuple[ShardKey, ...] = ()

    @property
    def empty(self) -> bool:
        """Nothing to pop or ack."""
        return not self.pops and not self.acks


#: A candidate's ``popped_at``, for sorting (a C-level getter).
_POPPED_AT = attrgetter("popped_at")


def first_look(
    candidates: Sequence[Candidate], reads_due: bool, woken: bool
) -> tuple[list[Candidate], list[float | None] | None]:
    """The candidates a round considers, popped longest ago first, and their due times
    when they are known without asking Redis (``None``: ask).

    Every shard counts as due when the scheduler does not read due times
    (``reads_due`` false) or every candidate had a backlog.  Right after a wake-up
    (``woken``: some wake list ended the wait) only the shards woken and those with a
    backlog are due: every script that makes a job due pushes its shard's wake list,
    and a job that comes due on its own ends the wait by its timeout."""
    ordered = sorted(candidates, key=_POPPED_AT)
    if not reads_due or all(candidate.backlog for candidate in ordered):
        return ordered, [0.0] * len(ordered)
    known = [candidate for candidate in ordered if candidate.woken or candidate.backlog]
    if woken and known:
        return known, [0.0] * len(known)
    return ordered, None


def plan_round(
    considered: Sequence[Candidate],
    due: Sequence[float | None],
    room: int,
    order: Order,
    finished: Sequence[ShardKey],
) -> Plan:
    """Pop the considered shards the scheduler's ``order`` puts first (given each one's
    seconds until due, ``due``), at most ``room``; ack the ``finished`` shards that are
    not popped (a popped one's ack rides on its pop)."""
    pops = tuple([considered[index].key for index in order(due)[: max(room, 0)]])
    if not finished:
        return Plan(pops)
    return Plan(pops, tuple([key for key in finished if key not in pops]))
