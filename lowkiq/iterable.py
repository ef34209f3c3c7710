"""``lowkiq.IterableWorker``: a worker that performs one payload at a time and gives the
rest back when it should stop.

A merged id can carry thousands of payloads, and one ``perform`` of them can run for
minutes.  An iterable worker defines ``perform_one(id, payload)`` instead of
``perform``; the base class calls it for each payload in order (ids in batch order,
payloads ascending by score) and, between two payloads, asks
:meth:`lowkiq.RunningBatch.should_stop`.  When it is true (the process stops, the
shard is handed over, the lease may lapse, or ``max_perform_seconds`` is spent), the
payloads not yet performed go back to the queue with their scores
(:meth:`lowkiq.RunningBatch.yield_rest`), due now and behind the ids already due,
and the batch ends as a success: every payload runs once, in order, across as many
performs as it takes.  ``perform_one`` may be ``async def``.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from lowkiq.running import RunningBatch, current_batch
from lowkiq.worker import Worker

#: One payload to perform: its id, its position among the id's payloads, the payloads.
Step = tuple[str, int, list[Any]]


def _steps(payloads_by_id: dict[str, list[Any]]) -> Iterator[Step]:
    """Every payload of the batch, in order."""
    for job_id, payloads in payloads_by_id.items():
        for position in range(len(payloads)):
            yield job_id, position, payloads


def _give_back(batch: RunningBatch, payloads_by_id: dict[str, list[Any]], step: Step) -> None:
    """Yield the payloads from ``step`` on: the rest of its id, and every later id."""
    job_id, position, payloads = step
    batch.yield_rest(job_id, payloads[position:])
    later = list(payloads_by_id)
    for other in later[later.index(job_id) + 1 :]:
        batch.yield_rest(other, payloads_by_id[other])


def _stops(batch: RunningBatch | None, step: Step, first: bool) -> bool:
    """Whether to give the rest back before ``step``: never before the batch's first
    payload (every perform makes progress)."""
    return batch is not None and not first and batch.should_stop()


class IterableWorker(Worker):
    """A worker that performs one payload at a time (see the module); define
    :meth:`perform_one`, not ``perform``."""

    @classmethod
    def perform_one(cls, job_id: str, payload: Any) -> Awaitable[None] | None:
        """Perform one payload of ``job_id``.  May be ``async def``."""
        raise NotImplementedError(f"{cls.__name__}.perform_one is not defined")

    @classmethod
    def perform(cls, payloads_by_id: dict[str, list[Any]]) -> Awaitable[None] | None:
        """Call :meth:`perform_one` for each payload in order, giving the rest back when
        the batch should stop."""
        if inspect.iscoroutinefunction(cls.perform_one):
            return cls._perform_async(payloads_by_id)
        batch = current_batch()
        for number, step in enumerate(_steps(payloads_by_id)):
            if _stops(batch, step, number == 0):
                assert batch is not None
                _give_back(batch, payloads_by_id, step)
                return None
            job_id, position, payloads = step
            cls.perform_one(job_id, payloads[position])
        return None

    @classmethod
    async def _perform_async(cls, payloads_by_id: dict[str, list[Any]]) -> None:
        """:meth:`perform` for an ``async def perform_one``."""
        batch = current_batch()
        perform_one: Callable[[str, Any], Awaitable[None]] = cls.perform_one  # type: ignore[assignment]
        for number, step in enumerate(_steps(payloads_by_id)):
            if _stops(batch, step, number == 0):
                assert batch is not None
                _give_back(batch, payloads_by_id, step)
                return
            job_id, position, payloads = step
            await perform_one(job_id, payloads[position])
