"""A worker app for process-level tests of cancels and superseded payloads.

Environment: ``REDIS_URL`` (the queue; ``redis+cluster://`` for a Redis Cluster),
``RECORD_URL`` (a single server where performs are recorded; default the same).

``Long`` (tracked): a payload ``{"quick": true}`` records its id in ``test:quick`` and
returns; any other perform records its ids in ``test:started`` (and its cancelled ids
then, JSON, in ``test:cancelled_at_start``), then waits (at most
60 s) until ``current_batch().should_stop()``, records what it saw in ``test:stopped``
(JSON: ids, cancelled ids, the time) and returns, giving every id's payloads back
(``yield_rest``): a cancelled id's yield must not bring it back.  A payload
``{"raise": true}`` makes the perform raise instead (after the wait); ``{"deaf": true}``
sleeps 60 s first, never asking ``should_stop()``.  ``TEST_LEASE_TTL``: seconds.
``Steps`` (an IterableWorker): payload ``{"v": n}`` sleeps 0.05 s and records ``n`` in
``test:steps:<id>``.
``Watch``: records ``superseded(id)`` at the start in ``test:superseded_first:<id>``,
then waits (at most 30 s) until it is true and records the time in
``test:superseded_at:<id>``.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import redis

import lowkiq

url = os.environ["REDIS_URL"]
record = redis.Redis.from_url(os.environ.get("RECORD_URL") or url)
if url.startswith("redis+cluster://"):
    cluster_url = url.replace("redis+cluster://", "redis://")
    lowkiq.settings.redis = lambda: redis.RedisCluster.from_url(cluster_url)

lowkiq.settings.poll_interval = 0.2
if os.environ.get("TEST_LEASE_TTL"):
    lowkiq.settings.lease_ttl = float(os.environ["TEST_LEASE_TTL"])
    lowkiq.settings.heartbeat_interval = lowkiq.settings.lease_ttl / 3


class Long(lowkiq.Worker):
    """Waits until asked to stop (see the module)."""

    shards_count = 3
    track = True

    @classmethod
    def perform(cls, payloads_by_id: dict[str, list[Any]]) -> None:
        batch = lowkiq.current_batch()
        assert batch is not None
        quick = [i for i, ps in payloads_by_id.items() if any(p == {"quick": True} for p in ps)]
        if quick:
            record.rpush("test:quick", *quick)
            return
        record.rpush("test:started", *payloads_by_id)
        record.rpush("test:cancelled_at_start", json.dumps(sorted(batch.cancelled())))
        if any(p == {"deaf": True} for ps in payloads_by_id.values() for p in ps):
            time.sleep(60)  # never asks should_stop()
        deadline = time.monotonic() + 60
        while not batch.should_stop() and time.monotonic() < deadline:
            time.sleep(0.005)
        seen = {"ids": sorted(payloads_by_id), "cancelled": sorted(batch.cancelled())}
        record.rpush("test:stopped", json.dumps({**seen, "at": time.time()}))
        if any(p == {"raise": True} for ps in payloads_by_id.values() for p in ps):
            raise RuntimeError("asked to stop")
        for job_id, payloads in payloads_by_id.items():
            batch.yield_rest(job_id, payloads)


class Steps(lowkiq.IterableWorker):
    """One payload at a time; gives the rest back when asked to stop."""

    shards_count = 1

    @classmethod
    def perform_one(cls, job_id: str, payload: Any) -> None:
        time.sleep(0.05)
        record.rpush(f"test:steps:{job_id}", payload["v"])


class Watch(lowkiq.Worker):
    """Waits until a newer payload of its id is enqueued."""

    shards_count = 1

    @classmethod
    def perform(cls, payloads_by_id: dict[str, list[Any]]) -> None:
        batch = lowkiq.current_batch()
        assert batch is not None
        for job_id, payloads in payloads_by_id.items():
            record.rpush(f"test:watch_sizes:{job_id}", len(payloads))
            record.rpush(f"test:superseded_first:{job_id}", int(batch.superseded(job_id)))
            deadline = time.monotonic() + 30
            while not batch.superseded(job_id) and time.monotonic() < deadline:
                time.sleep(0.02)
            if batch.superseded(job_id):
                record.rpush(f"test:superseded_at:{job_id}", time.time())


lowkiq.settings.workers = [Long, Steps, Watch]
