"""The orders app: an order-status feed whose newest version per order lands in SQLite.

Status updates arrive many per order and out of order; each carries the
order's ``version``.  The update's score is its version, so one ``perform``
sees an order's pending updates oldest first and keeps only the newest.
One shard is served by one thread, so two updates of an order never race.

Run the worker with ``lowkiq worker -r examples.orders.app``: on ``REDIS_URL``, else on
the embedded development Redis server in ``./.lowkiq/``.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Sequence
from typing import Any

import lowkiq
from lowkiq.default_redis import development_redis

#: Where processed orders are written (``ORDERS_DB`` overrides).
DB_PATH = os.environ.get("ORDERS_DB", "orders.db")

SCHEMA = """
CREATE TABLE IF NOT EXISTS orders (
    id TEXT PRIMARY KEY,
    version INTEGER NOT NULL,
    status TEXT NOT NULL,
    updates_seen INTEGER NOT NULL DEFAULT 0
)
"""

# Keep a row only if it is newer than what is stored: a retry of an old batch
# (at-least-once) can never move an order backwards.
UPSERT = """
INSERT INTO orders (id, version, status, updates_seen) VALUES (?, ?, ?, ?)
ON CONFLICT (id) DO UPDATE SET
    version = excluded.version,
    status = excluded.status,
    updates_seen = orders.updates_seen + excluded.updates_seen
WHERE excluded.version > orders.version
"""


def connect(path: str = DB_PATH) -> sqlite3.Connection:
    """A connection to the orders database, with the table created."""
    db = sqlite3.connect(path, timeout=30)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute(SCHEMA)
    return db


class OrderWorker(lowkiq.Worker):
    """Writes the newest status of each order."""

    shards_count = 8
    batch_size = 20
    max_retry_count = 5

    @classmethod
    def perform_async(cls, jobs: Sequence[dict[str, Any]]) -> None:
        """Enqueue status updates ``{"order_id", "version", "status"}`` as jobs."""
        super().perform_async(
            [
                {"id": update["order_id"], "score": update["version"], "payload": update}
                for update in jobs
            ]
        )

    @classmethod
    def retry_in(cls, retry_count: int) -> float:
        """Retry soon: the database being locked is the usual failure."""
        return 2 * (retry_count + 1)

    @classmethod
    def perform(cls, payloads_by_id: dict[str, list[dict[str, Any]]]) -> None:
        """Store each order's newest update (the last payload: ascending by version)."""
        db = connect()
        try:
            with db:
                db.executemany(
                    UPSERT,
                    [
                        (order_id, updates[-1]["version"], updates[-1]["status"], len(updates))
                        for order_id, updates in payloads_by_id.items()
                    ],
                )
        finally:
            db.close()


lowkiq.settings.workers = [OrderWorker]
# A development example: with REDIS_URL unset it runs on the embedded development
# Redis server in ./.lowkiq/ (the lowkiq[embedded] extra). A production app leaves
# settings.redis alone: REDIS_URL, else redis://localhost:6379/0.
lowkiq.settings.redis = development_redis
