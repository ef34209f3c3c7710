"""A worker app with periodic jobs, for process-level tests: a 1-second schedule
``tick`` and three hourly ones, ``catch-none``, ``catch-last`` and ``catch-all``.

Each payload is its tick (ms); ``perform`` appends it to ``test:performed:<id>``.
Environment: ``REDIS_URL``.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta

import redis

import lowkiq

record = redis.Redis.from_url(os.environ["REDIS_URL"])

lowkiq.settings.poll_interval = 0.2
lowkiq.settings.lease_ttl = 2.0
lowkiq.settings.heartbeat_interval = 0.5
lowkiq.settings.threads_per_node = 2


class Ticker(lowkiq.Worker):
    """Records every payload (a tick) it performs."""

    shards_count = 2
    batch_size = 10

    @classmethod
    def perform(cls, payloads_by_id: dict) -> None:
        for job_id, payloads in payloads_by_id.items():
            record.rpush(f"test:performed:{job_id}", *payloads)


def tick_ms(tick: datetime) -> int:
    return round(tick.timestamp() * 1000)


lowkiq.settings.workers = [Ticker]
lowkiq.settings.schedules = [
    lowkiq.Schedule(Ticker, id="tick", every=timedelta(seconds=1), payload=tick_ms),
    *(
        lowkiq.Schedule(
            Ticker, id=f"catch-{policy}", every=timedelta(hours=1), payload=tick_ms, catch_up=policy
        )
        for policy in ("none", "last", "all")
    ),
]
