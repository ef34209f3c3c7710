"""Which jobs of a batch ``Worker.actions().cancel`` took, as its perform ends.

The executor thread performs a batch through :func:`perform_uncancelled`: the jobs
cancelled before it started are not performed (a batch all cancelled is not performed at
all), and those cancelled while it ran are taken out of its outcome: what they yielded
does not go back to the queue, and a failure of the batch fails only its other jobs.
The outcome names them (:attr:`~lowkiq.runtime.shard_handler.Outcome.cancelled`), and
the dispatcher settles them as cancelled when it settles the batch, in one fenced
script (:meth:`~lowkiq.runtime.shard_handler.ShardHandler.settle`,
``lua/cancel_settle.lua``: not failed, not retried, not dead, counted as
``cancelled``).  A batch without cancelled ids costs a dictionary look-up.
"""

from __future__ import annotations

from collections.abc import Sequence

from lowkiq.ownership.cancels import CANCELLED, BatchKey
from lowkiq.runtime.shard_handler import Outcome, ShardHandler
from lowkiq.storage.processing import PoppedJob
from lowkiq.telemetry.recorder import BatchRecorder


def batch_key(handler: ShardHandler) -> BatchKey:
    """The batch ``handler`` runs now, as cancels name it."""
    return (handler.queue.name, handler.shard, handler.batch)


def cancelled_ids(handler: ShardHandler) -> frozenset[str]:
    """The ids of the batch ``handler`` runs now that a cancel named."""
    return CANCELLED.ids(batch_key(handler))


def perform_uncancelled(
    handler: ShardHandler, jobs: Sequence[PoppedJob], recorder: BatchRecorder
) -> Outcome:
    """Perform ``jobs`` (``handler.perform``) but those already cancelled; returns the
    outcome of the jobs not cancelled, naming the cancelled ones for the dispatcher."""
    if CANCELLED.batches:
        return _perform_some(handler, jobs, recorder)
    outcome = handler.perform(jobs, recorder)  # no cancel heard yet, the common case
    return outcome if not CANCELLED.batches else _settled(handler, jobs, outcome)


def _perform_some(
    handler: ShardHandler, jobs: Sequence[PoppedJob], recorder: BatchRecorder
) -> Outcome:
    """:func:`perform_uncancelled` once some cancel was heard."""
    before = CANCELLED.ids(batch_key(handler))
    kept = [job for job in jobs if job.id not in before] if before else jobs
    outcome = handler.perform(kept, recorder) if kept else Outcome([], None)
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
