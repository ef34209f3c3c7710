"""A worker app for ``Worker.group_concurrency`` and per-group rate limit tests: each
perform counts, per group, the batches running it (``test:running:<group>``, its peaks
in ``test:peaks:<group>``), and records when each of its jobs started on Redis's clock
(``test:starts:<group>``).

Environment: ``REDIS_URL``, ``RECORD_URL`` (where performs are counted; default the
same), ``TEST_GROUP_CAP`` (unset: no cap), ``TEST_GROUP_RATE`` (jobs per second per
group; unset: none), ``TEST_SHARDS``.
Payloads: ``{"g": group, "sleep": seconds}``.
"""

from __future__ import annotations

import os
import time

import redis

import lowkiq

record = redis.Redis.from_url(os.environ.get("RECORD_URL") or os.environ["REDIS_URL"])

lowkiq.settings.poll_interval = 0.2
lowkiq.settings.lease_ttl = 2.0
lowkiq.settings.heartbeat_interval = 0.5


class Capped(lowkiq.Worker):
    """Jobs of a few groups, each sleeping a little."""

    shards_count = int(os.environ.get("TEST_SHARDS", "6"))
    group_concurrency = (
        int(os.environ["TEST_GROUP_CAP"]) if "TEST_GROUP_CAP" in os.environ else None
    )
    rate_limit = (
        lowkiq.RateLimit(float(os.environ["TEST_GROUP_RATE"]), per_group=True)
        if "TEST_GROUP_RATE" in os.environ
        else None
    )

    @classmethod
    def perform(cls, payloads_by_id: dict) -> None:
        payloads = [p for ps in payloads_by_id.values() for p in ps]
        groups = sorted({p["g"] for p in payloads})
        seconds, micros = record.time()
        for payload in payloads:
            record.rpush(f"test:starts:{payload['g']}", seconds + micros / 1e6)
        for group in groups:
            record.rpush(f"test:peaks:{group}", record.incr(f"test:running:{group}"))
        try:
            time.sleep(sum(p.get("sleep", 0) for p in payloads))
        finally:
            for group in groups:
                record.decr(f"test:running:{group}")
            record.rpush("test:finished", *payloads_by_id)


lowkiq.settings.workers = [Capped]
