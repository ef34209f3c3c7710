"""One queue's storage: enqueueing (:mod:`lowkiq.storage.enqueueing`) and the
processing lifecycle (:mod:`lowkiq.storage.processing`) over one client.

The names of both modules that callers use are importable from here too.
"""

from __future__ import annotations

from lowkiq.storage.enqueueing import REFUSED, REROUTES, Enqueueing, NewJob, shard_of
from lowkiq.storage.processing import (
    ACK_FENCED,
    ACK_STALE,
    NO_ACK,
    PROCESSING_HEADER,
    Popped,
    PoppedJob,
    Processing,
    holds_jobs,
)
from lowkiq.storage.queue_base import QueueBase, Replication

__all__ = [
    "ACK_FENCED",
    "ACK_STALE",
    "NO_ACK",
    "PROCESSING_HEADER",
    "REFUSED",
    "REROUTES",
    "NewJob",
    "Popped",
    "PoppedJob",
    "Queue",
    "QueueBase",
    "Replication",
    "holds_jobs",
    "shard_of",
]


class Queue(Enqueueing, Processing):
    """The storage of one worker's queue, bound to one Redis client: push, pop, ack,
    fail, restore, bury (see :class:`~lowkiq.storage.queue_base.QueueBase`)."""
