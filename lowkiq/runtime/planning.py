"""Which shards a round pops, and which acks go with them: plain functions of plain data
(no Redis, no clock), so every case is tested without a server.

A round (:meth:`lowkiq.runtime.dispatcher.Dispatcher.round`) first asks
:func:`first_look` which of its ready shards to consider and whether their due times
are known without asking Redis; it reads them when they are not; then
:func:`plan_round` decides, and the dispatcher sends the plan in one write (one per
master on a Redis Cluster).

When a round has room for fewer pops than it has due shards, the workers take turns
by ``Worker.weight``: each worker's batches started so far divided by its weight (its
*share*, :class:`Shares`) is kept, and the next pop goes to the due worker with the
smallest, its shards in the scheduler's order.  So backlogged workers start batches in
proportion to their weights, whatever their ``shards_count``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
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


@dataclass
class Shares:
    """Batches each worker started, divided by its weight (by queue name): who pops next
    when a round has no room for every due shard."""

    weights: dict[str, float] = field(default_factory=dict)
    served: dict[str, float] = field(default_factory=dict)
    #: The queues with due shards in the crowded spell (rounds without room for all).
    waiting: frozenset[str] = frozenset()

    def started(self, queue: str, batches: int) -> None:
        """``batches`` of ``queue`` started."""
        self.served[queue] = self.served.get(queue, 0.0) + batches / self.weights.get(queue, 1.0)

    def turns(self, queues: Sequence[str]) -> dict[str, float]:
        """The shares of ``queues``, due in a crowded round.  A crowded spell starts with
        every share level; a queue that joins it takes the next turn, then goes level
        with the lowest of those already waiting: time without a backlog is not banked."""
        were = [self.served.get(q, 0.0) for q in queues if q in self.waiting]
        floor = min(were, default=0.0)
        for queue in queues:
            if not were:
                self.served[queue] = 0.0
            elif queue not in self.waiting:
                turn = 1.0 / self.weights.get(queue, 1.0)
                self.served[queue] = max(self.served.get(queue, 0.0), floor - turn)
        self.waiting = frozenset(queues)
        return {queue: self.served[queue] for queue in queues}

    def calm(self) -> None:
        """A round had room for every due shard: the crowded spell is over."""
        self.waiting = frozenset()


def plan_round(
    considered: Sequence[Candidate],
    due: Sequence[float | None],
    room: int,
    order: Order,
    finished: Sequence[ShardKey],
    shares: Shares | None = None,
) -> Plan:
    """Pop the considered shards the scheduler's ``order`` puts first (given each one's
    seconds until due, ``due``), at most ``room``, the workers taking turns by
    ``shares`` when there is not room for all; ack the ``finished`` shards that are not
    popped (a popped one's ack rides on its pop)."""
    ranked = [considered[index].key for index in order(due)]
    room = max(room, 0)
    if shares is None or len(ranked) <= room:
        pops = tuple(ranked[:room])
        if shares is not None and pops:
            shares.calm()
    else:
        pops = _take_turns(ranked, room, shares)
    if not finished:
        return Plan(pops)
    return Plan(pops, tuple([key for key in finished if key not in pops]))


def _take_turns(ranked: Sequence[ShardKey], room: int, shares: Shares) -> tuple[ShardKey, ...]:
    """``room`` of the ``ranked`` shards, each to the worker with the smallest share
    (counting one batch a pop; ties: the worker ranked first), its shards in rank order."""
    by_queue: dict[str, list[ShardKey]] = {}
    for key in ranked:
        by_queue.setdefault(key[0], []).append(key)
    turns = shares.turns(list(by_queue))
    if len(by_queue) == 1:
        return tuple(ranked[:room])
    rank = {queue: n for n, queue in enumerate(by_queue)}
    next_of = dict.fromkeys(by_queue, 0)
    pops: list[ShardKey] = []
    while len(pops) < room:
        queue = min(
            (q for q in by_queue if next_of[q] < len(by_queue[q])),
            key=lambda q: (turns[q], rank[q]),
        )
        pops.append(by_queue[queue][next_of[queue]])
        next_of[queue] += 1
        turns[queue] += 1.0 / shares.weights.get(queue, 1.0)
    return tuple(pops)
