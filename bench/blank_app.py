"""The app of bench/scale.py: one worker with a blank perform (or several alike).

Environment: ``REDIS_URL``, ``BENCH_SHARDS`` (shards per queue, default 20),
``BENCH_QUEUES`` (default 1: queue ``Blank``; N adds ``Blank2`` .. ``BlankN``),
``BENCH_LEASE_TTL`` (seconds, default the setting's).
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


def _alike(number: int) -> type[Blank]:
    """Another blank worker, with a queue of its own: ``Blank<number>``."""
    return type(f"Blank{number}", (Blank,), {"__module__": __name__})


lowkiq.settings.workers = [
    Blank,
    *(_alike(number) for number in range(2, int(os.environ.get("BENCH_QUEUES", "1")) + 1)),
]
if "BENCH_LEASE_TTL" in os.environ:
    lowkiq.settings.lease_ttl = float(os.environ["BENCH_LEASE_TTL"])
