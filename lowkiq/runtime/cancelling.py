"""Settling the cancelled jobs of a batch once its perform ended.

The executor thread that performed a batch calls :func:`settle_cancelled` with its
outcome: when ``Worker.actions().cancel`` cancelled ids of the batch
(:data:`lowkiq.ownership.cancels.CANCELLED`), their jobs leave the processing area as
cancelled in one script (``lua/cancel_settle.lua``: not failed, not retried, not dead,
counted as ``cancelled``), on the thread's own connection, and the outcome handed to
the dispatcher no longer holds them: what they yielded does not go back to the queue,
and a failure of the batch fails only its other jobs.  A batch without cancelled ids
costs a dictionary look-up.
"""

from __future__ import annotations

import logging

import redis
from redis.exceptions import RedisClusterException

from lowkiq.ownership.cancels import CANCELLED, BatchKey
from lowkiq.runtime.shard_handler import Outcome, ShardHandler
from lowkiq.settings import settings
from lowkiq.storage.scripts import Scripts

log = logging.getLogger("lowkiq.executor")


def batch_key(handler: ShardHandler) -> BatchKey:
    """The batch ``handler`` runs now, as cancels name it."""
    return (handler.queue.name, handler.shard, handler.batch)


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
    if not gone:
        return outcome
    queue = handler.queue
    try:
        scripts = Scripts.for_client(settings.client(), queue.track_length)
        count = scripts.cancel_settle(
            keys=[queue.keys.prefix(handler.shard)], args=[handler.token, handler.batch, *gone]
        )
    except (redis.RedisError, RedisClusterException) as exc:
        log.warning("%s: could not settle cancelled job(s) %s: %s", handler.name, gone, exc)
        return outcome
    CANCELLED.forget(key, gone)
    log.info("%s: %d job(s) settled as cancelled: %s", handler.name, count, ", ".join(gone[:10]))
    kept = [job for job in outcome.jobs if job.id not in cancelled]
    yields = {i: p for i, p in (outcome.yields or {}).items() if i not in cancelled} or None
    if not kept:
        return Outcome(kept, None, None)
    return Outcome(kept, outcome.error, yields, outcome.verdict)
