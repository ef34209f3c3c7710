"""Enqueue a burst of products for one shop: ``python -m examples.long_jobs [COUNT]``."""

from __future__ import annotations

import sys

from examples.long_jobs.app import ReindexShop

count = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
ReindexShop.perform_async([{"id": "shop-1", "payload": {"sku": n}} for n in range(count)])
print(f"enqueued {count} products of shop-1")
