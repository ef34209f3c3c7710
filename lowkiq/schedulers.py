"""Schedulers pick which of a thread's shards to process next — SPEC §7.

A scheduler is a callable ``scheduler(lane) -> step``: given the
:class:`ProcessingThread` of one thread it returns a zero-argument ``step`` that the
thread calls in a loop.  Each step processes one batch of one shard or waits.
``settings.build_scheduler`` is a zero-argument factory of a scheduler.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import cycle
from typing import Protocol


class Handler(Protocol):
    """One shard as a scheduler sees it (a :class:`lowkiq.shard_handler.ShardHandler`)."""

    def process(self) -> bool:
        """Process one batch; ``False`` when nothing was due."""
        ...


class ProcessingThread(Protocol):
    """The shards of one thread and what a scheduler may ask about them."""

    handlers: Sequence[Handler]

    def due_in(self) -> list[float | None]:
        """Seconds until the earliest job of each handler's shard is due, on Redis's
        clock (negative: due already; ``None``: empty)."""
        ...

    def wait(self) -> None:
        """Idle until new work may be due: a wake-up, the next scheduled job, or poll_interval."""
        ...

    def stopping(self) -> bool:
        """Whether the thread must stop taking batches."""
        ...

    def process(self, handlers: Sequence[Handler]) -> int:
        """Give each of ``handlers`` a batch, in this order, until the lane stops;
        returns how many took one."""
        ...

    def flush_acks(self, keep: Sequence[object]) -> None:
        """Ack the finished batches waiting for their ack, but those of ``keep``."""
        ...

    def throttled(self, handlers: Sequence[Handler]) -> int:
        """How many of ``handlers`` have due jobs but wait for rate-limit tokens now."""
        ...


Step = Callable[[], None]
Scheduler = Callable[[ProcessingThread], Step]


class LagScheduler:
    """Process the due shards, the one whose earliest due job has waited longest first.

    One step reads how long until every shard's earliest job is due (Redis's clock)
    once, then gives each due shard one batch in lag order (their pops in one write,
    see :meth:`~lowkiq.processing_thread.ProcessingThread.process`); it waits when no
    shard is due.  While every shard of the thread is due and gives a batch (a
    backlog), the next round takes them in the same order without reading again (a
    shard waiting for rate-limit tokens counts as giving one).
    """

    def __call__(self, lane: ProcessingThread) -> Step:
        """The step function of one thread."""
        handlers = list(lane.handlers)
        if len(handlers) == 1:
            (only,) = handlers

            def single_step() -> None:
                # With one shard the lag ranking is moot: popping is the check.
                if not only.process():
                    lane.wait()

            return single_step

        # The last round's order, when every shard was due and gave a batch.
        saturated: list[int] = []

        def step() -> None:
            nonlocal saturated
            order = saturated
            if not order:
                order = self._due_order(lane)
                # A shard that is not due now gets no pop to carry its last batch's ack
                # (on a Redis Cluster a pop acks only its own shard): ack it now.
                lane.flush_acks([handlers[index] for index in order])
            worked = lane.process([handlers[index] for index in order])
            saturated = order if worked == len(handlers) else []
            if not saturated and worked + lane.throttled(handlers) >= len(handlers):
                # Every shard gave a batch or waits for rate-limit tokens (it has due
                # jobs): the next round takes them all again, the waiting ones last.
                saturated = order + [i for i in range(len(handlers)) if i not in order]
            if not worked:
                lane.wait()

        return step

    def _due_order(self, lane: ProcessingThread) -> list[int]:
        """The indexes of the due shards, the longest waiting first."""
        due = sorted(
            (delay, index)
            for index, delay in enumerate(lane.due_in())
            if delay is not None and delay <= 0
        )
        return [index for _, index in due]


class SeqScheduler:
    """Cycle through the shards; wait only after a whole cycle found nothing."""

    def __call__(self, lane: ProcessingThread) -> Step:
        """The step function of one thread."""
        handlers = list(lane.handlers)
        if not handlers:
            # A thread with no shard (yet): wait for the coordinator to deal it one.
            return lane.wait
        order = cycle(handlers)
        idle = 0

        def step() -> None:
            nonlocal idle
            if next(order).process():
                idle = 0
                return
            idle += 1
            if idle >= len(handlers):
                idle = 0
                lane.wait()

        return step


def build_lag_scheduler() -> Scheduler:
    """The default scheduler: oldest due work first (see :class:`LagScheduler`)."""
    return LagScheduler()


def build_seq_scheduler() -> Scheduler:
    """The round-robin scheduler (see :class:`SeqScheduler`)."""
    return SeqScheduler()
