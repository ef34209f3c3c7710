"""The orders app: an order-status feed whose newest version per order lands in SQLite.

Status updates arrive many per order and out of order; each carries the
order's ``version``.  The update's score is its version, so one ``perform``
sees an order's pending updates oldest first and keeps only the newest.
One shard is served by one process at a time, and every write carries the
lease's fencing token (``fence``): a process that was frozen past its lease
cannot overwrite what the shard's next owner wrote (docs/guides/fencing.md).

Run the worker with ``lowkiq worker -r examples.orders.app``: on ``REDIS_URL``, else on
the embedded development Redis server in ``./.lowkiq/``.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Sequence
from typing import Any

import lowkiq
from lowkiq.clients.default_redis import development_redis

#: Where processed orders are written (``ORDERS_DB`` overrides).
DB_PATH = os.environ.get("ORDERS_DB", "orders.db")

SCHEMA = """
CREATE TABLE IF NOT EXISTS orders (
    id TEXT PRIMARY KEY,
    version INTEGER NOT NULL,
    status TEXT NOT NULL,
    updates_seen INTEGER NOT NULL DEFAULT 0,
    fence INTEGER NOT NULL DEFAULT 0
)
"""

# Write a row only if
# - its fence is not lower than the stored one: a process frozen past its lease
#   (GC, SIGSTOP, a paused VM) wakes with an old fence and its write is refused,
#   since the shard's next owner, which runs the same jobs, writes a higher one;
# - and it is newer than what is stored: a retry of an old batch (at-least-once)
#   can never move an order backwards.
UPSERT = """
INSERT INTO orders (id, version, status, updates_seen, fence) VALUES (?, ?, ?, ?, ?)
ON CONFLICT (id) DO UPDATE SET
    version = excluded.version,
    status = excluded.status,
    updates_seen = orders.updates_seen + excluded.updates_seen,
    fence = excluded.fence
WHERE excluded.fence >= orders.fence AND excluded.version > orders.version
"""


def current_fence() -> int:
    """The fencing token of the batch being performed: it only grows for a given order
    id, whichever process runs it.  0 outside a worker process (``perform`` called
    directly, e.g. in a test)."""
    batch = lowkiq.current_batch()
    if batch is None or batch.lease is None:
        return 0
    return batch.lease.fence


def store(
    db: sqlite3.Connection, payloads_by_id: dict[str, list[dict[str, Any]]], fence: int
) -> None:
    """Write each order's newest update (the last payload: ascending by version) under
    ``fence``; an order stored with a higher fence or version stays as it is."""
    with db:
        db.executemany(
            UPSERT,
            [
                (order_id, updates[-1]["version"], updates[-1]["status"], len(updates), fence)
                for order_id, updates in payloads_by_id.items()
            ],
        )


def connect(path: str = DB_PATH) -> sqlite3.Connection:
    """A connection to the orders database, with the table created."""
    db = sqlite3.connect(path, timeout=30)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute(SCHEMA)
    # An orders.db from before the fence column: rows written without a fence hold 0.
    if "fence" not in {column[1] for column in db.execute("PRAGMA table_info(orders)")}:
        db.execute("ALTER TABLE orders ADD COLUMN fence INTEGER NOT NULL DEFAULT 0")
    return db


def forget_orders(path: str = DB_PATH) -> None:
    """Empty the orders table: a run of the example starts from no order."""
    db = connect(path)
    try:
        with db:
            db.execute("DELETE FROM orders")
    finally:
        db.close()


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
            store(db, payloads_by_id, current_fence())
        finally:
            db.close()


lowkiq.settings.workers = [OrderWorker]
# A development example: with REDIS_URL unset it runs on the embedded development
# Redis server in ./.lowkiq/ (the lowkiq[embedded] extra). A production app leaves
# settings.redis alone: REDIS_URL, else redis://localhost:6379/0.
lowkiq.settings.redis = development_redis
