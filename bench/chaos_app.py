"""The app of bench/chaos.py: records every perform (ids, versions, start, end, pid).

Records go to ``RECORD_URL``, a Redis the chaos run never kills.  Environment:
``REDIS_URL``, ``RECORD_URL``, ``CHAOS_LEASE_TTL`` (seconds, default 2).
"""

from __future__ import annotations

import json
import os
import time

import redis

import lowkiq

record = redis.Redis.from_url(os.environ["RECORD_URL"])
lowkiq.settings.lease_ttl = float(os.environ.get("CHAOS_LEASE_TTL", "2"))
lowkiq.settings.heartbeat_interval = lowkiq.settings.lease_ttl / 4
lowkiq.settings.poll_interval = 0.2


class Chaos(lowkiq.Worker):
    """Sees versioned updates `{"v": n}` (score n) of a few hundred ids."""

    shards_count = 8
    batch_size = 5

    @classmethod
    def perform(cls, payloads_by_id: dict[str, list[dict[str, int]]]) -> None:
        start = time.time()
        time.sleep(0.005)
        end = time.time()
        rows = [
            json.dumps({"id": i, "vs": [p["v"] for p in ps], "start": start, "end": end,
                        "pid": os.getpid()})
            for i, ps in payloads_by_id.items()
        ]  # fmt: skip
        record.rpush("chaos:records", *rows)


lowkiq.settings.workers = [Chaos]
