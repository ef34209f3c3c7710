"""Schedulers pick which idle shards the dispatcher pops next — SPEC §7, §11.

A worker process's dispatcher (:mod:`lowkiq.runtime.dispatcher`) serves every shard
the process leases with one pool of threads.  Each round it lists the shards with no
batch in flight that may be popped, the one popped longest ago first, and asks the
scheduler for the order in which to pop them; it pops as many as its threads have
room for, in that order.  A scheduler is a plain object of two members, so it is
tested without Redis; ``settings.build_scheduler`` is a zero-argument factory of one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class Scheduler(Protocol):
    """The order in which a dispatcher pops its idle shards."""

    #: Whether :meth:`order` needs each shard's due time (the dispatcher then reads it
    #: from Redis, one write for all the shards, unless every shard has a backlog).
    reads_due: bool

    def order(self, due_in: Sequence[float | None]) -> list[int]:
        """The indexes of the shards to pop, first first.  ``due_in`` has one entry per
        idle shard, the one popped longest ago first: seconds until its earliest job is
        due on Redis's clock (negative or 0: due; ``None``: empty or held), or ``0.0``
        for every shard when they all had a backlog at their last pop (or when
        :attr:`reads_due` is false)."""
        ...


class LagScheduler:
    """Pop the due shards, the one whose earliest due job has waited longest first (ties:
    the one popped longest ago).  A shard that is not due is not popped."""

    reads_due = True

    def order(self, due_in: Sequence[float | None]) -> list[int]:
        """The due shards' indexes, the longest waiting first."""
        due = sorted(
            (delay, index) for index, delay in enumerate(due_in) if delay is not None and delay <= 0
        )
        return [index for _, index in due]


class SeqScheduler:
    """Pop every idle shard in turn, the one popped longest ago first, without reading
    which are due: the pop is the check.  The dispatcher waits once a round found
    nothing."""

    reads_due = False

    def order(self, due_in: Sequence[float | None]) -> list[int]:
        """Every shard, in turn."""
        return list(range(len(due_in)))


def build_lag_scheduler() -> Scheduler:
    """The default scheduler: oldest due work first (see :class:`LagScheduler`)."""
    return LagScheduler()


def build_seq_scheduler() -> Scheduler:
    """The round-robin scheduler (see :class:`SeqScheduler`)."""
    return SeqScheduler()
