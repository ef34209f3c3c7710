"""Enqueue a burst of order-status updates, shuffled so they arrive out of order."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

from examples.orders.app import OrderWorker

STATUSES = ["created", "paid", "packed", "shipped", "in_transit", "delivered"]


def updates(orders: int, versions: int, seed: int = 1) -> list[dict[str, Any]]:
    """``versions`` status updates for each of ``orders`` orders, shuffled."""
    feed = [
        {
            "order_id": f"order-{n}",
            "version": version,
            "status": STATUSES[version - 1] if version <= len(STATUSES) else f"update-{version}",
        }
        for n in range(orders)
        for version in range(1, versions + 1)
    ]
    random.Random(seed).shuffle(feed)
    return feed


def chunks(items: list[dict[str, Any]], size: int) -> Iterator[list[dict[str, Any]]]:
    """``items`` in lists of at most ``size``."""
    for start in range(0, len(items), size):
        yield items[start : start + size]


def enqueue_burst(orders: int = 2000, versions: int = 6) -> int:
    """Enqueue the burst in batches of 500 (one round trip each); returns how many updates."""
    feed = updates(orders, versions)
    for chunk in chunks(feed, 500):
        OrderWorker.perform_async(chunk)
    return len(feed)
