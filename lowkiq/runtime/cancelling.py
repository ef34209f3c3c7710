"""Settling the cancelled jobs of a batch once its perform ended.

The executor thread performs a batch through :func:`perform_uncancelled`: the jobs
cancelled before it started are not performed (settled at once), and once it ran,
:func:`settle_cancelled` looks again: when ``Worker.actions().cancel`` cancelled ids of the batch
(:data:`lowkiq.ownership.cancels.CANCELLED`), their jobs leave the processing area as
cancelled in one script (``lua/cancel_settle.lua``: not failed, not retried, not dead,
counted as ``cancelled``), on the thread's own connection, and the outcome handed to
the dispatcher no longer holds them: what they yielded does not go back to the queue,
and a failure of the batch fails only its other jobs.  A batch without cancelled ids
costs a dictionary look-up.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import redis
from redis.exceptions import RedisClusterException

from lowkiq.ownership.cancels import CANCELLED, BatchKey
from lowkiq.runtime.shard_handler import Outcome, ShardHandler
from lowkiq.settings import settings
from lowkiq.storage.processing import PoppedJob
from lowkiq.storage.scripts import Scripts
from lowkiq.telemetry.recorder import BatchRecorder

log = logging.getLogger("lowkiq.executor")


def batch_key(handler: ShardHandler) -> BatchKey:
    """The batch ``handler`` runs now, as cancels name it."""
    return (handler.queue.name, handler.shard, handler.batch)


def cancelled_ids(handler: ShardHandler) -> frozenset[str]:
    """The ids of the batch ``handler`` runs now that a cancel named."""
    return CANCELLED.ids(batch_key(handler))


def perform_uncancelled(
    handler: ShardHandler, jobs: Sequence[PoppedJob], recorder: BatchRecorder
) -> Outcome:
    """Perform ``jobs`` (``handler.perform``) but those already cancelled, which are settled
    as cancelled without being performed (a batch all cancelled is not performed at all);
    then settle those cancelled while it ran (:func:`settle_cancelled`).  Returns the
    outcome of the jobs not cancelled."""
    cancelled = CANCELLED.ids(batch_key(handler))
    if cancelled and any(job.id in cancelled for job in jobs):
        kept = [job for job in jobs if job.id not in cancelled]
        if _settle(handler, [job.id for job in jobs if job.id in cancelled]):
            jobs = kept
    outcome = handler.perform(jobs, recorder) if jobs else Outcome([], None)
    return settle_cancelled(handler, outcome)


def settle_cancelled(handler: ShardHandler, outcome: Outcome) -> Outcome:
    """Settle the cancelled jobs of ``outcome``'s batch as cancelled; returns the outcome
    of its other jobs (``outcome`` itself when none was cancelled).  When Redis refuses
    (the lease or the batch is gone) or fails, the outcome is returned whole: the batch
    then ends as it would have."""
    key = batch_key(handler)
    cancelled = CANCELLED.ids(key)
    if not cancelled:
        return outcome
    gone = [job.id for job in outcome.jobs if job.id in cancelled]
    if not gone or not _settle(handler, gone):
        return outcome
    kept = [job for job in outcome.jobs if job.id not in cancelled]
    yields = {i: p for i, p in (outcome.yields or {}).items() if i not in cancelled} or None
    if not kept:
        return Outcome(kept, None, None)
    return Outcome(kept, outcome.error, yields, outcome.verdict)


def _settle(handler: ShardHandler, ids: list[str]) -> bool:
    """Settle ``ids`` of the handler's batch as cancelled, on this thread's connection;
    ``False`` (logged) when Redis refused (the lease or the batch is gone) or failed."""
    queue = handler.queue
    try:
        scripts = Scripts.for_client(settings.client(), queue.track_length)
        count = scripts.cancel_settle(
            keys=[queue.keys.prefix(handler.shard)], args=[handler.token, handler.batch, *ids]
        )
    except (redis.RedisError, RedisClusterException) as exc:
        log.warning("%s: could not settle cancelled job(s) %s: %s", handler.name, ids, exc)
        return False
    CANCELLED.forget(batch_key(handler), ids)
    log.info("%s: %d job(s) settled as cancelled: %s", handler.name, count, ", ".join(ids[:10]))
    return True
