"""The batch the calling thread is performing, for code that needs more than the
``(worker, batch)`` a server middleware gets: the shard and each job's retry count.

The shard handler sets it around the server middlewares and ``perform``, so
middlewares, ``perform`` itself and log filters called from them can read it
with :func:`current_batch`; outside a batch it is ``None``.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lowkiq.storage.processing import PoppedJob
    from lowkiq.worker import Worker

#: ``local.batch``: ``(worker, shard, popped jobs)`` of this thread's running batch, or None.
local = threading.local()


@dataclass(frozen=True)
class RunningBatch:
    """A batch being performed: its worker, shard, ids (pop order) and, when known, each
    job's ``retry_count`` before this run (-1 for a first run, 0 for the first retry...)."""

    worker: type[Worker]
    shard: int
    ids: list[str]
    retry_counts: Mapping[str, int] = field(default_factory=dict)

    @classmethod
    def popped(cls, worker: type[Worker], shard: int, jobs: Sequence[PoppedJob]) -> RunningBatch:
        """The batch of ``jobs`` as a shard handler popped them."""
        return cls(worker, shard, [j.id for j in jobs], {j.id: j.retry_count for j in jobs})

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
    """The batch this thread is performing now, or ``None``."""
    running = getattr(local, "batch", None)
    return None if running is None else RunningBatch.popped(*running)


def batch_of(worker: type[Worker], batch: Mapping[str, Any]) -> RunningBatch:
    """What a middleware knows of ``batch``: this thread's running batch when it is
    ``worker``'s, else the ids, and the shard of the first (retry counts unknown)."""
    running = current_batch()
    if running is not None and running.worker is worker:
        return running
    ids = list(batch)
    return RunningBatch(worker, worker.queue().shard_of(ids[0] if ids else ""), ids)
