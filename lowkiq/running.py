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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lowkiq.errors import LeaseLost
from lowkiq.ownership.leases import Term, fence_of

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
        :class:`lowkiq.LeaseLost` when it is not."""
        token = self.queue.client.get(self.queue.keys.lease(self.shard))
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

    def batch(self) -> RunningBatch:
        """The batch, as :func:`current_batch` tells it."""
        handler = self.handler
        lease = BatchLease(handler.queue, handler.shard, handler.token, handler.term)
        return RunningBatch.popped(handler.worker, handler.shard, self.jobs, lease)


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

    @classmethod
    def popped(
        cls,
        worker: type[Worker],
        shard: int,
        jobs: Sequence[PoppedJob],
        lease: BatchLease | None = None,
    ) -> RunningBatch:
        """The batch of ``jobs`` as a shard handler popped them."""
        return cls(worker, shard, [j.id for j in jobs], {j.id: j.retry_count for j in jobs}, lease)

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
