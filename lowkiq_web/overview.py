"""What the dashboard shows: every worker's metrics, the totals and the Redis server."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import redis
from werkzeug.exceptions import NotFound

import lowkiq
from lowkiq.embedded import is_embedded
from lowkiq.errors import LowkiqError
from lowkiq.storage.metrics import many_queue_metrics

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


@dataclass(frozen=True)
class Overview:
    """Metrics of every worker (in settings order) and their totals."""

    by_worker: dict[str, dict[str, Any]]
    totals: dict[str, Any]
    at: float


def overview() -> Overview:
    """Every worker's metrics in one round trip, and the totals (lag is the maximum)."""
    client = lowkiq.settings.client()
    workers = lowkiq.settings.workers
    now = time.time()
    metrics = many_queue_metrics(client, [worker.queue(client) for worker in workers], now)
    by_worker = {worker.__name__: m for worker, m in zip(workers, metrics, strict=True)}
    totals: dict[str, Any] = {
        key: sum(m[key] for m in metrics)
        for key in ("busy", "length", "fresh", "retries", "morgue_length", "processed", "failed")
    }
    totals["lag"] = max((m["lag"] for m in metrics), default=0.0)
    return Overview(by_worker, totals, now)


def public_url(client: redis.Redis) -> str:
    """The server's URL without user name or password."""
    kwargs = client.connection_pool.connection_kwargs
    if kwargs.get("path"):
        return f"unix://{kwargs['path']}?db={kwargs.get('db', 0)}"
    scheme = "rediss" if client.connection_pool.connection_class is redis.SSLConnection else "redis"
    host = kwargs.get("host", "localhost")
    if ":" in host:
        host = f"[{host}]"
    return f"{scheme}://{host}:{kwargs.get('port', 6379)}/{kwargs.get('db', 0)}"


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
        "url": public_url(client),
    }


def on_embedded_redis() -> bool:
    """Whether the dashboard runs on the embedded development Redis server."""
    try:
        return is_embedded(lowkiq.settings.client())
    except (LowkiqError, redis.RedisError, OSError):
        return False
