"""The app of ``bench/cancel_latency.py``: ``Waiting`` performs until
``current_batch().should_stop()``, recording its id when it starts (``bench:started``)
and, when it sees the stop, the time (``bench:stopped``, JSON ``{"id", "at"}``), in the
Redis it works on (``REDIS_URL``; ``redis+cluster://`` for a Redis Cluster)."""

from __future__ import annotations

import json
import os
import time
from typing import Any

import redis

import lowkiq

url = os.environ["REDIS_URL"]
if url.startswith("redis+cluster://"):
    cluster_url = url.replace("redis+cluster://", "redis://")
    lowkiq.settings.redis = lambda: redis.RedisCluster.from_url(cluster_url)


class Waiting(lowkiq.Worker):
    """Runs until asked to stop (at most 120 s)."""

    shards_count = 6

    @classmethod
    def perform(cls, payloads_by_id: dict[str, list[Any]]) -> None:
        batch = lowkiq.current_batch()
        assert batch is not None
        record = lowkiq.settings.client()
        for job_id in payloads_by_id:
            record.rpush("bench:started", job_id)
        deadline = time.monotonic() + 120
        while not batch.should_stop() and time.monotonic() < deadline:
            time.sleep(0.002)
        at = time.time()
        for job_id in payloads_by_id:
            record.rpush("bench:stopped", json.dumps({"id": job_id, "at": at}))


lowkiq.settings.workers = [Waiting]
