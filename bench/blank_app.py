"""The app of bench/scale.py: one worker with a blank perform.

Environment: ``REDIS_URL``, ``BENCH_SHARDS`` (default 20), ``BENCH_LEASE_TTL``
(seconds, default the setting's).
"""

from __future__ import annotations

import os

import lowkiq


class Blank(lowkiq.Worker):
    """Does nothing: the benchmark measures lowkiq, not the job."""

    shards_count = int(os.environ.get("BENCH_SHARDS", "20"))

    @classmethod
    def perform(cls, payloads_by_id: dict[str, list[object]]) -> None:
        pass


lowkiq.settings.workers = [Blank]
if "BENCH_LEASE_TTL" in os.environ:
    lowkiq.settings.lease_ttl = float(os.environ["BENCH_LEASE_TTL"])
