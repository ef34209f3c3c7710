"""The app of bench/vs_sidekiq.py: one worker whose job does one ``INCR`` in Redis.

Its perform increments ``bench:counter`` once per job through lowkiq's own shared
client (``lowkiq.settings.client()``, as the Sidekiq job uses ``Sidekiq.redis``), and
appends ``"<count> <unix time>"`` to ``bench:marks`` when the count reaches 1 and
``BENCH_JOBS``: the first and the last job's times, taken inside the job.

Environment: ``REDIS_URL``, ``BENCH_JOBS`` (default 20,000), ``BENCH_SHARDS`` (default
5), ``BENCH_BATCH`` (batch_size, default 1).
"""

from __future__ import annotations

import os
import time

import lowkiq

COUNTER = "bench:counter"
MARKS = "bench:marks"
JOBS = int(os.environ.get("BENCH_JOBS", "20000"))


class Incr(lowkiq.Worker):
    """One ``INCR`` per job (a batch of ten does ten), the same work as the Sidekiq job."""

    shards_count = int(os.environ.get("BENCH_SHARDS", "5"))
    batch_size = int(os.environ.get("BENCH_BATCH", "1"))

    @classmethod
    def perform(cls, payloads_by_id: dict[str, list[object]]) -> None:
        client = lowkiq.settings.client()
        for _ in payloads_by_id:
            count = client.incr(COUNTER)
            if count == 1 or count == JOBS:
                client.rpush(MARKS, f"{count} {time.time()}")


lowkiq.settings.workers = [Incr]
