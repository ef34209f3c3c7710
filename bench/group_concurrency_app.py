"""The app of bench/group_concurrency.py: jobs of a few groups, each sleeping a little;
each perform adds ``pid:thread:n`` to ``bench:running:<group>`` while it runs, and
records its start, end and group in ``bench:done``.

Environment: ``REDIS_URL``, ``BENCH_CAP`` (``Worker.group_concurrency``; 0: none),
``BENCH_GROUP_RATE`` (a per-group rate limit, jobs per second; 0: none),
``BENCH_SHARDS`` (default 12).
"""

from __future__ import annotations

import itertools
import os
import threading
import time

import redis

import lowkiq

lowkiq.settings.lease_ttl = 2.0
lowkiq.settings.heartbeat_interval = 0.5
record = redis.Redis.from_url(os.environ["REDIS_URL"])
_numbers = itertools.count()


class Tenants(lowkiq.Worker):
    """Jobs of groups A, B and C; a payload says how long it sleeps."""

    shards_count = int(os.environ.get("BENCH_SHARDS", "12"))
    group_concurrency = int(os.environ.get("BENCH_CAP", "0")) or None
    _rate = float(os.environ.get("BENCH_GROUP_RATE", "0"))
    rate_limit = lowkiq.RateLimit(_rate, per_group=True) if _rate else None

    @classmethod
    def perform(cls, payloads_by_id: dict) -> None:
        payloads = [p for ps in payloads_by_id.values() for p in ps]
        groups = sorted({p["g"] for p in payloads})
        me = f"{os.getpid()}:{threading.get_ident()}:{next(_numbers)}"
        started = time.time()
        for group in groups:
            record.sadd(f"bench:running:{group}", me)
        time.sleep(sum(p["sleep"] for p in payloads))
        for group in groups:
            record.srem(f"bench:running:{group}", me)
        record.rpush("bench:done", *(f"{g} {started} {time.time()}" for g in groups))


lowkiq.settings.workers = [Tenants]
