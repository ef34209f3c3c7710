"""What the dashboard shows besides queues: a worker found by name, the Redis server."""

from __future__ import annotations

import time
from typing import Any

import redis
from redis.exceptions import RedisClusterException
from werkzeug.exceptions import NotFound

import lowkiq
from lowkiq.clients.connection import describe_redis
from lowkiq.clients.embedded import is_embedded
from lowkiq.clients.memory_policy import eviction_problem, policies, read_memory
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


def move_targets(worker: str) -> list[str]:
    """The workers the jobs of ``worker`` can be moved to: every other worker of
    ``lowkiq.settings.workers`` (each has a queue of its own), in settings order."""
    found = find_worker(worker)
    return [other.__name__ for other in lowkiq.settings.workers if other is not found]


def redis_info() -> dict[str, Any]:
    """Version, uptime, clients, memory, the URL (never the password), and ``full``:
    ``Redis is full (maxmemory …)`` while it refuses new jobs, else ``None``."""
    client = lowkiq.settings.client()
    info = client.info()
    return {
        "version": info.get("redis_version", "?"),
        "uptime": float(info.get("uptime_in_seconds", 0)),
        "clients": int(info.get("connected_clients", 0)),
        "memory": info.get("used_memory_human", "?"),
        "memory_bytes": int(info.get("used_memory", 0)),
        "url": describe_redis(client),
        "full": redis_full(),
    }


def on_embedded_redis() -> bool:
    """Whether the dashboard runs on the embedded development Redis server."""
    try:
        return is_embedded(lowkiq.settings.client())
    except (LowkiqError, redis.RedisError, OSError):
        return False


#: Seconds the dashboard keeps what it read of Redis's maxmemory-policy and memory (a
#: policy changed while lowkiq runs shows within seconds).
POLICY_TTL = 5.0
_policy_read: dict[str, Any] = {"at": -POLICY_TTL, "problem": None, "full": None}


def _read_policy() -> None:
    """Read the policy and whether Redis is full again when the last read is older than
    :data:`POLICY_TTL`."""
    now = time.monotonic()
    if now - _policy_read["at"] < POLICY_TTL:
        return
    problem = full = None
    try:
        client = lowkiq.settings.client()
        problem = eviction_problem(policies(client))
        full = read_memory(client).full
    except (LowkiqError, redis.RedisError, RedisClusterException, OSError):
        pass
    _policy_read.update(at=now, problem=problem, full=full)


def redis_full() -> str | None:
    """``Redis is full (maxmemory …)`` while Redis refuses new jobs, else ``None``; read
    at most once every :data:`POLICY_TTL` seconds per process."""
    _read_policy()
    full: str | None = _policy_read.get("full")
    return full


def eviction_warning() -> str | None:
    """What the red banner says when Redis may evict lowkiq's keys (its
    ``maxmemory-policy`` is not ``noeviction``), or ``None``; read at most once every
    :data:`POLICY_TTL` seconds per process.  It says how many live worker processes run
    on it all the same, and that one started without ``allow_eviction`` refuses."""
    _read_policy()
    problem = _policy_read["problem"]
    if problem is None:
        return None
    refuse = (
        "a worker process refuses to start on it unless its settings.allow_eviction is "
        "true (LOWKIQ_ALLOW_EVICTION=1)"
    )
    running = _live_process_count()
    if running:
        plural = "es run" if running != 1 else " runs"
        return (
            f"{problem}. {running} worker process{plural} on it all the same (started "
            f"with settings.allow_eviction, or before the policy changed); {refuse}."
        )
    return f"{problem}. {refuse[0].upper()}{refuse[1:]}."


def _live_process_count() -> int:
    """How many live worker processes Redis's membership lists (0 when it cannot say).

    The banner cannot read the workers' ``allow_eviction``: each process has its own
    settings (this web process's are not theirs).  A worker started without it refuses
    to start under an evicting policy, so a live one runs with it, or started before
    the policy changed."""
    try:
        return len(lowkiq.processes().processes)
    except (LowkiqError, redis.RedisError, RedisClusterException, OSError):
        return 0
