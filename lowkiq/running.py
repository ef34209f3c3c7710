"""The batch being performed, for code that needs more than the ``(worker, batch)``
a server middleware gets: the shard, each job's retry count, and the lease under
which it runs (its fencing token).

The shard handler sets it around the server middlewares and ``perform``, in a
context variable, so middlewares, ``perform`` itself (an ``async def perform``
too) and log filters called from them can read it with :func:`current_batch`;
outside a batch it is ``None``.
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lowkiq.errors import LeaseLost
from lowkiq.ownership.cancels import CANCELLED
from lowkiq.ownership.leases import Term, fence_of
from lowkiq.settings import settings
from lowkiq.storage import layout as layouts
from lowkiq.storage.scripts import Scripts

if TYPE_CHECKING:
    from lowkiq.runtime.shard_handler import ShardHandler
    from lowkiq.storage.processing import PoppedJob
    from lowkiq.storage.queue import Queue
    from lowkiq.worker import Worker


@dataclass(frozen=True)
class BatchLease:
    """The lease a batch runs under: its fencing token, for writes outside Redis.

    Redis state is always fenced (a stale lease changes nothing).  Your own writes
    are fenced when you store :attr:`fence` with what you write and refuse a write
    whose fence is lower than the stored one, e.g.
    ``UPDATE orders SET ..., fence = :fence WHERE id = :id AND fence <= :fence``.
    """

    #: The shard's queue, for its name and keys: its client is the dispatcher's
    #: connection, not for the performing thread.
    queue: Queue
    shard: int
    token: str
    term: Term | None = None

    @property
    def epoch(self) -> int:
        """How many times the shard had been acquired when this lease was taken."""
        return int(self.token.split(" ", 1)[0])

    @property
    def fence(self) -> int:
        """A number that only grows for a given job id, across hand-overs and reshards."""
        return fence_of(self.shard, self.epoch)

    def remaining(self) -> float:
        """Seconds the lease is surely still held by this process's clock (last renewal
        sent + TTL - a margin); 0 when it may have lapsed."""
        return max(0.0, self.term.remaining()) if self.term is not None else 0.0

    def check(self) -> None:
        """Ask Redis (one round trip) whether the lease is still held; raises
        :class:`lowkiq.LeaseLost` when it is not.

        Asked on the calling thread's client (``lowkiq.settings.client()``: an executor
        thread's own connection), as ``perform_async`` is: :attr:`queue` is bound to the
        dispatcher's private connection, which no other thread may use."""
        token = settings.client().get(self.queue.keys.lease(self.shard))
        held = token.decode() if isinstance(token, bytes) else token
        if held != self.token:
            raise LeaseLost(f"{self.queue.name}:{self.shard}: lease epoch {self.epoch} is lost")


@dataclass(slots=True)
class Running:
    """What the shard handler records of the batch it performs: itself (the worker, the
    shard and its lease) and the jobs.  Made for every batch, so it is a plain record:
    the :class:`RunningBatch` and its :class:`BatchLease` are made when asked for."""

    handler: ShardHandler
    jobs: Sequence[PoppedJob]
    #: When ``perform`` started (``time.monotonic``).
    started: float = 0.0
    #: What ``yield_rest`` gave back: id -> positions of its payloads.
    yields: dict[str, list[int]] | None = None

    def batch(self) -> RunningBatch:
        """The batch, as :func:`current_batch` tells it."""
        handler = self.handler
        lease = BatchLease(handler.queue, handler.shard, handler.token, handler.term)
        return RunningBatch.popped(handler.worker, handler.shard, self.jobs, lease, self)

    def should_stop(self) -> bool:
        """See :meth:`RunningBatch.should_stop`."""
        limit = self.handler.worker.max_perform_seconds
        if limit is not None and time.monotonic() - self.started >= limit:
            return True
        return self.handler.should_stop() or bool(self.cancelled())

    def cancelled(self) -> frozenset[str]:
        """The ids of the batch ``Worker.actions().cancel`` cancelled (as this process
        has heard so far)."""
        if not CANCELLED.batches:  # mostly no cancel was heard
            return frozenset()
        handler = self.handler
        ids = CANCELLED.ids((handler.queue.name, handler.shard, handler.batch))
        if not ids:
            return ids
        return ids & {job.id for job in self.jobs}

    def superseded(self, job_id: str) -> bool:
        """See :meth:`RunningBatch.superseded`."""
        if not any(job.id == job_id for job in self.jobs):
            raise ValueError(f"superseded: {job_id!r} is not an id of this batch")
        handler = self.handler
        queue = handler.queue
        client = settings.client()  # this thread's, never the dispatcher's (queue.client)
        scripts = Scripts.for_client(client, queue.track_length)
        shard = handler.shard
        reply = scripts.superseded(keys=[queue.keys.prefix(shard)], args=[job_id, handler.batch])
        if reply:
            return True
        # During a reshard a newer payload may be queued in the id's new shard.
        new = layouts.cached(client, queue.name, queue.default_shards_count).shard_of(job_id)
        if new == shard:
            return False
        return bool(scripts.superseded(keys=[queue.keys.prefix(new)], args=[job_id, 0]))

    def yield_rest(self, job_id: str, payloads: Sequence[Any]) -> None:
        """See :meth:`RunningBatch.yield_rest`."""
        job = next((job for job in self.jobs if job.id == job_id), None)
        if job is None:
            raise ValueError(f"yield_rest: {job_id!r} is not an id of this batch")
        positions = _positions(job.payloads, payloads)
        if job.stored is not None:  # equal stored payloads performed as one
            positions = [at for position in positions for at in job.stored[position]]
        if self.yields is None:
            self.yields = {}
        self.yields[job_id] = positions


def _positions(popped: Sequence[Any], given: Sequence[Any]) -> list[int]:
    """Where each of ``given`` is in ``popped``, in order (the same object, else an equal
    payload): :class:`ValueError` when one is not there."""
    positions: list[int] = []
    start = 0
    for payload in given:
        found = next((i for i in range(start, len(popped)) if popped[i] is payload), None)
        if found is None:
            found = next((i for i in range(start, len(popped)) if popped[i] == payload), None)
        if found is None:
            raise ValueError(f"yield_rest: {payload!r} is not a payload of this id left to run")
        positions.append(found)
        start = found + 1
    return positions


#: The batch being performed in this context, or None.
running: contextvars.ContextVar[Running | None] = contextvars.ContextVar(
    "lowkiq_running", default=None
)


@dataclass(frozen=True)
class RunningBatch:
    """A batch being performed: its worker, shard, ids (pop order) and, when known, each
    job's ``retry_count`` before this run (-1 for a first run, 0 for the first retry...)."""

    worker: type[Worker]
    shard: int
    ids: list[str]
    retry_counts: Mapping[str, int] = field(default_factory=dict)
    #: The lease the batch runs under (``None`` outside a worker process's thread).
    lease: BatchLease | None = None
    # What the shard handler records of the batch (None: not run by a handler).
    _running: Running | None = field(default=None, compare=False, repr=False)

    def should_stop(self) -> bool:
        """Whether ``perform`` should end soon and give back what it did not get to
        (:meth:`yield_rest`): the process is stopping or quiet, the shard is being handed
        over, its lease is lost or may lapse within a quarter of its TTL, the batch
        has run ``Worker.max_perform_seconds``, or ``Worker.actions().cancel`` cancelled
        one of its ids (:meth:`cancelled`; seen within about a second, on any host).
        ``False`` outside a worker process."""
        return self._running is not None and self._running.should_stop()

    def cancelled(self) -> frozenset[str]:
        """The ids of this batch that ``Worker.actions().cancel`` cancelled while it runs
        (:meth:`should_stop` is then true; once ``perform`` returns, their jobs are
        settled as cancelled whatever it did).  Empty outside a worker process."""
        return self._running.cancelled() if self._running is not None else frozenset()

    def superseded(self, job_id: str) -> bool:
        """Whether a newer payload of ``job_id`` was enqueued after this batch was popped
        (it waits in the queue: the id runs again after this batch).  Payloads that were
        already queued when the batch was popped are not newer (a hot id's payloads the
        batch left behind); a payload equal to one still queued merges into it and is
        not newer either.  Asked when called, one round trip on the calling thread's own
        connection (``lowkiq.settings.client()``), never the dispatcher's; it costs
        nothing when not called.  Raises ``ValueError`` for an id not in the batch;
        ``False`` outside a worker process."""
        return self._running.superseded(job_id) if self._running is not None else False

    def yield_rest(self, job_id: str, payloads: Sequence[Any]) -> None:
        """End the perform for ``job_id``: ``payloads`` (those of its payloads not done,
        as ``perform`` got them) go back to the queue once ``perform`` returns, with their
        scores, due now, behind the ids already due; what else the batch did is acked.
        A yield is neither a failure nor a death (no retry, no restore counted); when
        ``perform`` raises, the whole batch fails as usual.  Calling it again for the
        same id replaces what it gives back.  Raises ``ValueError`` for an id not in the
        batch, or a payload it did not get; outside a worker process it does nothing."""
        if self._running is not None:
            self._running.yield_rest(job_id, payloads)

    @classmethod
    def popped(
        cls,
        worker: type[Worker],
        shard: int,
        jobs: Sequence[PoppedJob],
        lease: BatchLease | None = None,
        record: Running | None = None,
    ) -> RunningBatch:
        """The batch of ``jobs`` as a shard handler popped them (``record``: what the
        handler records of it, for :meth:`should_stop` and :meth:`yield_rest`)."""
        ids = [j.id for j in jobs]
        return cls(worker, shard, ids, {j.id: j.retry_count for j in jobs}, lease, record)

    def log_fields(self) -> dict[str, Any]:
        """The batch as a log record's extra fields: ``lowkiq_worker``, ``lowkiq_queue``,
        ``lowkiq_shard``, ``lowkiq_ids``."""
        return {
            "lowkiq_worker": self.worker.__name__,
            "lowkiq_queue": self.worker.queue_name,
            "lowkiq_shard": self.shard,
            "lowkiq_ids": self.ids,
        }


def current_batch() -> RunningBatch | None:
    """The batch being performed now (in this thread, or this ``async def perform``), or
    ``None``."""
    now = running.get()
    return None if now is None else now.batch()


def batch_of(worker: type[Worker], batch: Mapping[str, Any]) -> RunningBatch:
    """What a middleware knows of ``batch``: this thread's running batch when it is
    ``worker``'s, else the ids, and the shard of the first (retry counts unknown)."""
    running = current_batch()
    if running is not None and running.worker is worker:
        return running
    ids = list(batch)
    return RunningBatch(worker, worker.queue().shard_of(ids[0] if ids else ""), ids)
