"""The app of bench/rolling_kill.py: workers that record every id they perform.

Environment: ``REDIS_URL``, ``BENCH_SHARDS`` (shards per queue, default 5),
``BENCH_QUEUES`` (default 1: queue ``Rolling``; N adds ``Rolling2`` .. ``RollingN``),
``BENCH_LEASE_TTL`` (seconds, default the setting's; heartbeats then every third of
it, as by default).  Each perform adds
``<queue>:<id>`` of its ids to the set ``bench:done``.
"""

from __future__ import annotations

import os

import redis

import lowkiq

record = redis.Redis.from_url(os.environ["REDIS_URL"])

#: The set of ``<queue>:<id>`` performed.
DONE = "bench:done"


class Rolling(lowkiq.Worker):
    """Records its ids: the benchmark counts the jobs no process performed."""

    shards_count = int(os.environ.get("BENCH_SHARDS", "5"))

    @classmethod
    def perform(cls, payloads_by_id: dict[str, list[object]]) -> None:
        record.sadd(DONE, *(f"{cls.queue_name}:{job_id}" for job_id in payloads_by_id))


def _alike(number: int) -> type[Rolling]:
    """Another recording worker, with a queue of its own: ``Rolling<number>``."""
    return type(f"Rolling{number}", (Rolling,), {"__module__": __name__})


WORKERS: list[type[Rolling]] = [
    Rolling,
    *(_alike(number) for number in range(2, int(os.environ.get("BENCH_QUEUES", "1")) + 1)),
]
lowkiq.settings.workers = list(WORKERS)
if "BENCH_LEASE_TTL" in os.environ:
    lowkiq.settings.lease_ttl = float(os.environ["BENCH_LEASE_TTL"])
    lowkiq.settings.heartbeat_interval = lowkiq.settings.lease_ttl / 3
