"""What the dashboard shows besides queues: a worker found by name, the Redis server."""

from __future__ import annotations

from typing import Any

import redis
from werkzeug.exceptions import NotFound

import lowkiq
from lowkiq.clients.connection import describe_redis
from lowkiq.embedded import is_embedded
from lowkiq.errors import LowkiqError

#: The dashboard's totals, in display order: metric key → label.
TOTALS = {
    "lag": "Lag",
    "busy": "Busy",
    "length": "Enqueued",
    "fresh": "Fresh",
    "retries": "Retries",
    "morgue_length": "Dead",
}


class UnknownWorker(NotFound):
    """The URL names no worker of ``lowkiq.settings.workers``."""


def find_worker(name: str) -> type[lowkiq.Worker]:
    """The worker class named ``name`` (its ``__name__``, as in ``/api/v1/stats``)."""
    for worker in lowkiq.settings.workers:
        if worker.__name__ == name:
            return worker
    raise UnknownWorker(f"no worker named {name!r}")


def redis_info() -> dict[str, Any]:
    """Version, uptime, clients, memory and the URL (never the password)."""
    client = lowkiq.settings.client()
    info = client.info()
    return {
        "version": info.get("redis_version", "?"),
        "uptime": float(info.get("uptime_in_seconds", 0)),
        "clients": int(info.get("connected_clients", 0)),
        "memory": info.get("used_memory_human", "?"),
        "memory_bytes": int(info.get("used_memory", 0)),
        "url": describe_redis(client),
    }


def on_embedded_redis() -> bool:
    """Whether the dashboard runs on the embedded development Redis server."""
    try:
        return is_embedded(lowkiq.settings.client())
    except (LowkiqError, redis.RedisError, OSError):
        return False
