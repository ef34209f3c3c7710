"""Helpers for testing your own workers: run a worker's queued jobs in the test process.

``drain(OrderWorker)`` performs every due job of the worker's queue through
the real storage (a real Redis, the Lua scripts, the merge rules), with the
settings' server middlewares and serializers; a failing batch follows the
retry rules (``retry_count``, ``retry_in``, the morgue, ``retries_exhausted``)
exactly as in ``lowkiq worker``.  The ``lowkiq_redis`` pytest fixture
(:mod:`lowkiq.pytest_plugin`) gives each test an empty embedded Redis and
default settings.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from lowkiq.errors import LowkiqError
from lowkiq.limits.group_caps import GroupCaps
from lowkiq.middleware import Batch, Next
from lowkiq.outcomes import BatchFailed, Discard, Snooze
from lowkiq.ownership import leases
from lowkiq.ownership.events import Grant
from lowkiq.runtime.dispatcher import Dispatcher
from lowkiq.runtime.shard_handler import ShardHandler
from lowkiq.settings import Settings, settings
from lowkiq.storage.actions import Actions
from lowkiq.storage.group_claims import GroupClaims
from lowkiq.strategies.schedulers import LagScheduler
from lowkiq.worker import Worker
from lowkiq.workflows.relayer import RELAYER

#: Seconds the shards' leases last while drain() holds them.
DRAIN_LEASE_TTL = 60.0
#: drain()'s default bound on batches: a worker that keeps re-enqueueing due jobs
#: of its own queue would otherwise never finish.
MAX_BATCHES = 10_000


@dataclass
class Drained:
    """What :func:`drain` did: batches run; jobs performed (acked), failed (retried, or
    killed: :class:`lowkiq.Kill`), discarded (:class:`lowkiq.Discard`) and snoozed
    (:class:`lowkiq.Snooze`: due again later, not failed); and the
    exceptions of the failed jobs (a :class:`lowkiq.BatchFailed` counts each of its
    jobs' own exception once, and the batch's other jobs as performed)."""

    batches: int = 0
    performed: int = 0
    failed: int = 0
    discarded: int = 0
    snoozed: int = 0
    errors: list[Exception] = field(default_factory=list)


class DrainError(LowkiqError):
    """:func:`drain` could not finish: a shard is leased by a running worker process, or
    the queue did not empty within ``max_batches``."""


def drain(
    worker: type[Worker],
    *,
    future: bool = False,
    raise_errors: bool = False,
    max_batches: int = MAX_BATCHES,
    config: Settings = settings,
) -> Drained:
    """Perform every due job of ``worker``'s queue in this thread, batch by batch, until
    none is due.

    ``future=True`` first makes every queued job due (``perform_all_jobs_now``),
    scheduled ones and retries included; jobs that fail during the drain are
    rescheduled by ``retry_in`` and run again only once due.  ``raise_errors=True``
    raises the first batch's exception after the drain.  Paused groups
    (``Worker.actions().pause_group``) are left queued, and ``group_concurrency`` and
    the groups' own caps hold, as in ``lowkiq worker``.  No ``lowkiq worker`` may be
    serving the queue meanwhile (its shards' leases would be held).
    """
    queue = worker.queue(config=config)
    if future:
        Actions(queue).perform_all_jobs_now()
    drained = Drained()
    owner = f"drain-{uuid.uuid4().hex[:12]}"
    held: list[leases.Lease] = []
    try:
        for shard in queue.shards:
            lease, _, left_ms = leases.acquire(queue, shard, owner, DRAIN_LEASE_TTL)
            if lease is None:
                raise DrainError(
                    f"{worker.__name__}: shard {shard} is leased by another process for "
                    f"{left_ms} ms more (is a lowkiq worker running on this Redis?)"
                )
            held.append(lease)
    except BaseException:
        leases.release(queue, held)
        raise
    # The worker process's dispatcher, with no executor thread: each batch is performed
    # as it is popped, on this thread; stopping acks the last batches and releases the
    # leases.
    caps = GroupCaps(
        GroupClaims(queue, worker.group_concurrency, DRAIN_LEASE_TTL, worker.batch_size)
    )
    caps.follow(queue.client)  # the groups paused or capped at run time
    dispatcher = Dispatcher(
        queue.client, 0, LagScheduler(), 0.0, threading.Event(), group_caps={queue.name: caps}
    )
    for lease in held:
        handler = ShardHandler(
            worker,
            lease.shard,
            queue,
            lease.token,
            [_counting(drained), *config.server_middlewares],
            config.format_error,
            group_caps=caps,
        )
        handler.exhausted = list(lease.buried)
        dispatcher.tell(Grant(handler))
    try:
        _run(dispatcher, worker, drained, max_batches)
    finally:
        dispatcher.shutdown()
        RELAYER.flush()
    if raise_errors and drained.errors:
        raise drained.errors[0]
    return drained


def _run(dispatcher: Dispatcher, worker: type[Worker], drained: Drained, max_batches: int) -> None:
    """Turn ``dispatcher`` until a round pops nothing and no batch is left to settle."""
    dispatcher.apply()
    while True:
        dispatcher.collect()
        dispatcher.keep_claims()  # the group places of the batches settled go back
        lost = next((handler for handler in dispatcher.handlers if handler.lost), None)
        if lost is not None:
            raise DrainError(f"{lost.name}: the shard's lease was lost")
        if drained.batches > max_batches:
            raise DrainError(
                f"{worker.__name__}: jobs still due after {max_batches} batches (does "
                "perform keep enqueueing due jobs?)"
            )
        # (Workflows told of the members that ended: their callbacks may be due now.)
        if dispatcher.round() == 0 and not dispatcher.in_flight and RELAYER.flush() == 0:
            return


def _counting(drained: Drained) -> Callable[[type[Worker], Batch, Next[Any, Any]], Any]:
    def count(worker: type[Worker], batch: Batch, call_next: Next[Any, Any]) -> Any:
        drained.batches += 1
        try:
            result = call_next(worker, batch)
        except Discard:
            drained.discarded += len(batch)
            raise
        except Snooze:
            drained.snoozed += len(batch)
            raise
        except BatchFailed as partial:
            ids = {str(job_id) for job_id in batch}
            named = {job_id: exc for job_id, exc in partial.failures.items() if job_id in ids}
            for exc in named.values():
                if isinstance(exc, Discard):
                    drained.discarded += 1
                elif isinstance(exc, Snooze):
                    drained.snoozed += 1
                else:
                    drained.failed += 1
                    drained.errors.append(exc)
            drained.performed += len(batch) - len(named)
            raise
        except Exception as exc:
            drained.failed += len(batch)
            drained.errors.append(exc)
            raise
        drained.performed += len(batch)
        return result

    return count
