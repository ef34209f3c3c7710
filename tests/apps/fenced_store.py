"""A worker app for process-level tests: stores each id's last fence in SQLite and refuses
a write whose fence is lower than the stored one, as the fencing guide tells users to.

Environment: ``REDIS_URL`` (the queue), ``FENCE_DB`` (the SQLite file), ``FENCE_SHARDS``
(the worker's ``shards_count``, default 3).  Table
``writes(id, fence)`` keeps each id's stored fence; table ``refused(id, fence,
stored)`` every write the store refused.
"""

from __future__ import annotations

import os
import sqlite3

import lowkiq

lowkiq.settings.poll_interval = 0.2
lowkiq.settings.lease_ttl = 2.0
lowkiq.settings.heartbeat_interval = 0.5


def connect() -> sqlite3.Connection:
    """The store, with its tables."""
    db = sqlite3.connect(os.environ["FENCE_DB"], timeout=30, isolation_level=None)
    db.execute("CREATE TABLE IF NOT EXISTS writes (id TEXT PRIMARY KEY, fence INTEGER)")
    db.execute("CREATE TABLE IF NOT EXISTS refused (id TEXT, fence INTEGER, stored INTEGER)")
    return db


class FencedStore(lowkiq.Worker):
    """Writes each id's fence, refusing one lower than the stored fence."""

    shards_count = int(os.environ.get("FENCE_SHARDS", "3"))

    @classmethod
    def perform(cls, payloads_by_id: dict) -> None:
        batch = lowkiq.current_batch()
        assert batch is not None
        fence = batch.lease.fence
        db = connect()
        try:
            for job_id in payloads_by_id:
                written = db.execute(
                    "INSERT INTO writes VALUES (?, ?) ON CONFLICT (id) DO UPDATE "
                    "SET fence = excluded.fence WHERE fence <= excluded.fence",
                    (job_id, fence),
                ).rowcount
                if not written:
                    (stored,) = db.execute(
                        "SELECT fence FROM writes WHERE id = ?", (job_id,)
                    ).fetchone()
                    db.execute("INSERT INTO refused VALUES (?, ?, ?)", (job_id, fence, stored))
        finally:
            db.close()


lowkiq.settings.workers = [FencedStore]
