"""Re-index a shop's products one at a time, giving the rest back when asked to stop.

Run a worker on it with ``lowkiq worker -r examples/long_jobs/app.py`` and enqueue
with ``python -m examples.long_jobs`` (docs/guides/long-jobs.md).
"""

from __future__ import annotations

import time
from typing import Any

import lowkiq

lowkiq.settings.shutdown_timeout = 20  # under Kubernetes' 30 s grace period


def reindex(shop_id: str, product: dict[str, Any]) -> None:
    """Stands in for the real work: one product of one shop."""
    time.sleep(0.01)


class ReindexShop(lowkiq.IterableWorker):
    """One payload per product to re-index; a shop's burst of 10,000 is one id."""

    max_perform_seconds = 5  # then the other shops of this shard get a turn

    @classmethod
    def perform_one(cls, shop_id: str, product: dict[str, Any]) -> None:
        reindex(shop_id, product)


lowkiq.settings.workers = [ReindexShop]
