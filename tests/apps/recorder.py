"""A worker app for process-level tests: records every ``perform`` in a separate Redis.

Environment: ``REDIS_URL`` (the queue), ``RECORD_URL`` (where performs are
recorded; default the same), ``TEST_SHARDS``, ``TEST_BATCH``, ``TEST_POLL``,
``TEST_LEASE_TTL`` (seconds; heartbeats every quarter of it), ``TEST_CLOCK_SKEW``
(seconds this process's ``time.time()`` is off, as on a host whose clock is wrong),
``TEST_RATE`` (a rate limit, jobs per second; unset: none).
Payloads steer it: ``{"v": n}`` is recorded, ``{"sleep": s}`` sleeps,
``{"fail": true}`` raises, ``{"fail_once": key}`` raises the first time,
``{"exit_once": key}`` kills the process the first time, ``{"exit": true}`` every
time.  Each perform's start is recorded on Redis's clock (``test:started_at:<id>``,
a list of seconds).
"""

from __future__ import annotations

import os
import time

import redis

import lowkiq

record = redis.Redis.from_url(os.environ.get("RECORD_URL") or os.environ["REDIS_URL"])

if os.environ.get("TEST_CLOCK_SKEW"):
    _real_time, _skew = time.time, float(os.environ["TEST_CLOCK_SKEW"])
    time.time = lambda: _real_time() + _skew

lowkiq.settings.poll_interval = float(os.environ.get("TEST_POLL", "0.2"))
lowkiq.settings.lease_ttl = float(os.environ.get("TEST_LEASE_TTL", "2"))
lowkiq.settings.heartbeat_interval = lowkiq.settings.lease_ttl / 4


class Recorder(lowkiq.Worker):
    """Records, per id, the payloads it saw, and any overlapping performs of one id."""

    shards_count = int(os.environ.get("TEST_SHARDS", "5"))
    batch_size = int(os.environ.get("TEST_BATCH", "1"))
    max_retry_count = 2
    rate_limit = (
        lowkiq.RateLimit(float(os.environ["TEST_RATE"])) if "TEST_RATE" in os.environ else None
    )

    @classmethod
    def retry_in(cls, retry_count: int) -> float:
        return 0.1

    @classmethod
    def retries_exhausted(cls, jobs: list) -> None:
        for job in jobs:
            record.rpush("test:exhausted", job["id"])

    @classmethod
    def perform(cls, payloads_by_id: dict) -> None:
        ids = list(payloads_by_id)
        for job_id in ids:
            if not record.set(f"test:running:{job_id}", os.getpid(), nx=True):
                record.rpush("test:overlaps", job_id)
        record.rpush("test:started", *ids)
        seconds, micros = record.time()
        for job_id in ids:
            record.rpush(f"test:started_at:{job_id}", seconds + micros / 1e6)
        try:
            for job_id, payloads in payloads_by_id.items():
                for payload in payloads:
                    if not isinstance(payload, dict):
                        continue
                    if "sleep" in payload:
                        time.sleep(payload["sleep"])
                    if "exit_once" in payload and record.set(payload["exit_once"], 1, nx=True):
                        os._exit(3)
                    if payload.get("exit"):
                        os._exit(3)
                    if "fail_once" in payload and record.set(payload["fail_once"], 1, nx=True):
                        raise RuntimeError(f"failing {job_id} once")
                    if payload.get("fail"):
                        raise RuntimeError(f"failing {job_id}")
                    if "v" in payload:
                        record.rpush(f"test:seen:{job_id}", payload["v"])
            record.rpush("test:finished", *ids)
        finally:
            for job_id in ids:
                record.delete(f"test:running:{job_id}")


lowkiq.settings.workers = [Recorder]
