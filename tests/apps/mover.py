"""A worker app for process-level tests of ``Actions.move``: two workers, ``Source`` and
``Target``, record every perform in a separate Redis.

Environment: ``REDIS_URL`` (the queues), ``RECORD_URL`` (where performs are recorded;
default the same).  Payloads steer it: ``{"v": n}`` is recorded in
``test:seen:<worker>:<id>``, ``{"sleep": s}`` sleeps first, ``{"fail_once": key}`` then
raises the first time.  A perform of an id while another perform of it runs (in either
worker) is recorded in ``test:overlaps``.
"""

from __future__ import annotations

import os
import time

import redis

import lowkiq

record = redis.Redis.from_url(os.environ.get("RECORD_URL") or os.environ["REDIS_URL"])

lowkiq.settings.poll_interval = 0.05
lowkiq.settings.lease_ttl = 2.0
lowkiq.settings.heartbeat_interval = 0.5


class Recording(lowkiq.Worker):
    """Records the payloads it performs, and overlapping performs of one id."""

    shards_count = 1
    batch_size = 1
    max_retry_count = 2

    @classmethod
    def retry_in(cls, retry_count: int) -> float:
        return 0.5

    @classmethod
    def perform(cls, payloads_by_id: dict) -> None:
        for job_id, payloads in payloads_by_id.items():
            if not record.set(f"test:running:{job_id}", cls.__name__, nx=True):
                record.rpush("test:overlaps", f"{cls.__name__}:{job_id}")
            record.rpush("test:started", f"{cls.__name__}:{job_id}")
            try:
                for payload in payloads:
                    if "sleep" in payload:
                        time.sleep(payload["sleep"])
                    if "fail_once" in payload and record.set(payload["fail_once"], 1, nx=True):
                        raise RuntimeError(f"failing {job_id} once")
                for payload in payloads:
                    record.rpush(f"test:seen:{cls.__name__}:{job_id}", payload["v"])
            finally:
                record.delete(f"test:running:{job_id}")


class Source(Recording):
    """Where jobs are enqueued."""


class Target(Recording):
    """Where they are moved to."""


lowkiq.settings.workers = [Source, Target]
