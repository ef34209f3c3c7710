"""A web process that has not imported the app: ``lowkiq.settings.workers`` is empty, yet
live ``lowkiq worker`` processes serve queues (their membership in Redis names them)."""

from __future__ import annotations

from dataclasses import dataclass

import redis

import lowkiq
from lowkiq.errors import LowkiqError


@dataclass(frozen=True)
class ServedElsewhere:
    """What the live worker processes serve while this web process knows no worker."""

    #: The queues the live processes serve, sorted (a worker's queue is its class name
    #: unless it sets ``queue_name``).
    queues: list[str]
    #: How many live processes serve them.
    processes: int


def served_elsewhere() -> ServedElsewhere | None:
    """The queues live processes serve when this process's ``lowkiq.settings.workers``
    is empty; ``None`` when it has workers, or when no live process (or no Redis) says."""
    if lowkiq.settings.workers:
        return None
    try:
        live = lowkiq.processes().processes
    except (LowkiqError, redis.RedisError, OSError):
        return None
    if not live:
        return None
    queues = sorted({queue for process in live for queue in process.queues})
    return ServedElsewhere(queues, len(live))
