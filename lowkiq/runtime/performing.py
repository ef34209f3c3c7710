"""A batch performed on an executor thread: the user's code, and no Redis call.

:func:`perform` runs one batch of a shard (:class:`~lowkiq.runtime.shard_handler.ShardHandler`)
inside the server middlewares (:func:`perform_chain`), with :func:`lowkiq.current_batch`
set; it times the batch (the shard's next pops take as many batches as it performs in
``POP_SECONDS``), counts it in the thread's recorder, and returns what it did as an
:class:`Outcome`, which the dispatcher settles
(:meth:`~lowkiq.runtime.shard_handler.ShardHandler.settle`).

Jobs ``Worker.actions().cancel`` took: those cancelled before the batch started are not
performed (a batch all cancelled is not performed at all), and those cancelled while it
ran are taken out of its outcome: what they yielded does not go back to the queue, and
a failure of the batch fails only its other jobs.  The outcome names them
(:attr:`Outcome.cancelled`), and the dispatcher settles them as cancelled when it
settles the batch, in one fenced script (``lua/cancel_settle.lua``: not failed, not
retried, not dead, counted as ``cancelled``).  While this process heard of no cancel, a
batch costs one test of a dictionary.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lowkiq.middleware import Batch, Next, ServerMiddleware, chain
from lowkiq.outcomes import Fate, Verdict, log_failure
from lowkiq.ownership.cancels import CANCELLED, BatchKey
from lowkiq.perform.coroutines import resolved
from lowkiq.perform.timeouts import perform_within_limit
from lowkiq.running import Running, RunningBatch, running
from lowkiq.storage.processing import PoppedJob
from lowkiq.telemetry.recorder import BatchRecorder
from lowkiq.worker import Worker

if TYPE_CHECKING:
    from lowkiq.runtime.shard_handler import ShardHandler

#: How fast a slow batch is forgotten (per batch): the next pops shrink at once and
#: grow back over a few dozen batches.
BATCH_TIME_DECAY = 0.8
_NONE_CANCELLED: frozenset[str] = frozenset()


@dataclass(slots=True)
class Outcome:
    """One performed batch: its jobs, what ``perform`` raised (``None``: succeeded),
    the payload positions each id gave back (``yield_rest``, a success only), how each
    job of a failure ends (``None``: judged when settled), and the ids of the batch that
    ``Worker.actions().cancel`` took out of it."""

    jobs: Sequence[PoppedJob]
    error: Exception | None = None
    yields: dict[str, list[int]] | None = None
    verdict: Verdict | None = None
    cancelled: tuple[str, ...] = ()


def _perform(worker: type[Worker], batch: Batch) -> None:
    if worker.perform_timeout is not None:
        perform_within_limit(worker, batch)  # raises PerformTimeout past the limit
        return
    result = worker.perform(batch)
    if result is not None:  # (an ``async def perform``'s coroutine)
        resolved(result)


def perform_chain(middlewares: Sequence[ServerMiddleware]) -> Next[type[Worker], Batch]:
    """``call(worker, batch)``: ``worker.perform(batch)`` inside the server middlewares
    (the first outermost); an ``async def perform`` on the thread's event loop."""
    return chain(middlewares, _perform)


def batch_key(handler: ShardHandler) -> BatchKey:
    """The batch ``handler`` runs now, as cancels name it."""
    return (handler.queue.name, handler.shard, handler.batch)


def cancelled_ids(handler: ShardHandler) -> frozenset[str]:
    """The ids of the batch ``handler`` runs now that a cancel named."""
    return CANCELLED.ids(batch_key(handler))


def perform(handler: ShardHandler, jobs: Sequence[PoppedJob], recorder: BatchRecorder) -> Outcome:
    """Perform ``jobs`` of ``handler``'s batch, but those already cancelled, counted by
    ``recorder``; returns the outcome of the jobs not cancelled, naming the cancelled
    ones.  A ``BaseException`` that is not an ``Exception`` escapes (the process ends)."""
    if CANCELLED.batches:
        return _perform_some(handler, jobs, recorder)
    outcome = _perform_all(handler, jobs, recorder)  # no cancel heard yet, the common case
    return outcome if not CANCELLED.batches else _settled(handler, jobs, outcome)


def _perform_some(
    handler: ShardHandler, jobs: Sequence[PoppedJob], recorder: BatchRecorder
) -> Outcome:
    """:func:`perform` once some cancel was heard."""
    before = cancelled_ids(handler)
    kept = [job for job in jobs if job.id not in before] if before else jobs
    outcome = _perform_all(handler, kept, recorder) if kept else Outcome([], None)
    return _settled(handler, jobs, outcome)


def _settled(handler: ShardHandler, jobs: Sequence[PoppedJob], outcome: Outcome) -> Outcome:
    """``outcome`` of ``jobs`` with the jobs cancelled meanwhile taken out and named."""
    key = batch_key(handler)
    cancelled = CANCELLED.ids(key)
    gone = tuple(job.id for job in jobs if job.id in cancelled) if cancelled else ()
    if not gone:
        return outcome
    CANCELLED.forget(key, gone)
    rest = [job for job in outcome.jobs if job.id not in cancelled]
    if not rest:
        return Outcome([], None, cancelled=gone)
    yields = {i: p for i, p in (outcome.yields or {}).items() if i not in cancelled} or None
    return Outcome(rest, outcome.error, yields, outcome.verdict, cancelled=gone)


def _perform_all(
    handler: ShardHandler, jobs: Sequence[PoppedJob], recorder: BatchRecorder
) -> Outcome:
    """Perform ``jobs`` inside the middlewares, timed and counted (those cancelled
    meanwhile not counted)."""
    record = Running(handler, jobs, time.monotonic())
    context = running.set(record)
    started = time.time()
    failure: Exception | None = None
    if len(jobs) == 1:  # most batches (no comprehension's frame)
        job = jobs[0]
        batch = {job.id: job.payloads}
    else:
        batch = {job.id: job.payloads for job in jobs}
    try:
        handler.call_perform(handler.worker, batch)
    except Exception as exc:
        failure = exc
    finally:
        running.reset(context)
    seconds, kept = time.time() - started, handler.batch_seconds
    if kept is not None and seconds < kept * BATCH_TIME_DECAY:
        seconds = kept * BATCH_TIME_DECAY
    handler.batch_seconds = seconds if seconds > 0.0 else 0.0
    cancelled = record.cancelled() if CANCELLED.batches else _NONE_CANCELLED
    counted = _uncancelled(jobs, cancelled) if cancelled else jobs
    if failure is not None:
        return _failed(handler, jobs, failure, cancelled, counted, started, recorder)
    yields = record.yields  # (mostly none: nothing to count then)
    recorder.performed(counted, started, yielded=_yielded(yields, cancelled) if yields else 0)
    return Outcome(jobs, None, yields)


def _failed(
    handler: ShardHandler,
    jobs: Sequence[PoppedJob],
    failure: Exception,
    cancelled: frozenset[str],
    counted: Sequence[PoppedJob],
    started: float,
    recorder: BatchRecorder,
) -> Outcome:
    """The outcome of ``jobs`` whose perform raised ``failure``, counted (``counted``:
    those not ``cancelled``) and logged."""
    verdict = handler.judge(jobs, failure)

    def count(*fates: Fate) -> int:
        return sum(1 for fate in fates for i in verdict.ids(fate) if i not in cancelled)

    # As the fail script counts them (a snoozed job is settled by a later run).
    failed, discarded = count(Fate.RETRY, Fate.KILL), count(Fate.DISCARD)
    recorder.performed(counted, started, failed, discarded, yielded=count(Fate.SNOOZE))
    fields = RunningBatch.popped(handler.worker, handler.shard, jobs).log_fields()
    log_failure(handler.name, len(jobs), failure, verdict, fields)
    return Outcome(jobs, failure, verdict=verdict)


# (Apart from _perform_all, whose frame then makes no closure cell per batch.)
def _uncancelled(jobs: Sequence[PoppedJob], cancelled: frozenset[str]) -> list[PoppedJob]:
    """``jobs`` but those ``cancelled``."""
    return [job for job in jobs if job.id not in cancelled]


def _yielded(yields: dict[str, list[int]], cancelled: frozenset[str]) -> int:
    """How many ids of ``yields`` gave payloads back, but those ``cancelled``."""
    return sum(1 for job_id, positions in yields.items() if positions and job_id not in cancelled)
