"""The app of bench/rate_limit.py: a blank worker, rate-limited or not.

Environment: ``REDIS_URL``, ``BENCH_RATE`` (jobs per second over every process; ``0``:
no limit), ``BENCH_BURST`` (the limit's burst; default: the default burst),
``BENCH_SHARDS`` (default 8), ``BENCH_BATCH`` (default 1).
"""

from __future__ import annotations

import os

import lowkiq

_RATE = float(os.environ.get("BENCH_RATE", "0"))
_BURST = int(os.environ.get("BENCH_BURST", "0")) or None


class Paced(lowkiq.Worker):
    """Does nothing, at most BENCH_RATE jobs per second in total."""

    shards_count = int(os.environ.get("BENCH_SHARDS", "8"))
    batch_size = int(os.environ.get("BENCH_BATCH", "1"))
    rate_limit = lowkiq.RateLimit(_RATE, burst=_BURST) if _RATE else None

    @classmethod
    def perform(cls, payloads_by_id: dict) -> None:
        pass


lowkiq.settings.workers = [Paced]
