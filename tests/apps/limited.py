"""A rate-limited worker app for process-level tests: records when each job started.

Environment: ``REDIS_URL`` (the queue), ``RECORD_URL`` (where starts are recorded;
default the same), ``TEST_RATE`` (jobs per second; ``0``: no class limit),
``TEST_SHARDS``.  Each perform appends ``time id v1,v2,...`` per id to
``test:starts`` (payloads are ``{"v": n}``).
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

_RATE = float(os.environ.get("TEST_RATE", "200"))


class Limited(lowkiq.Worker):
    """Starts at most TEST_RATE jobs per second over every process."""

    shards_count = int(os.environ.get("TEST_SHARDS", "6"))
    rate_limit = lowkiq.RateLimit(_RATE) if _RATE else None

    @classmethod
    def perform(cls, payloads_by_id: dict) -> None:
        now = time.time()
        record.rpush(
            "test:starts",
            *(
                f"{now} {job_id} {','.join(str(p['v']) for p in payloads)}"
                for job_id, payloads in payloads_by_id.items()
            ),
        )


lowkiq.settings.workers = [Limited]
