"""A worker app for process-level tests of long performs.

Environment: ``REDIS_URL`` (the queue), ``RECORD_URL`` (where performs are recorded;
default the same), ``TEST_SHUTDOWN_TIMEOUT`` (seconds).
``Steps`` is an :class:`lowkiq.IterableWorker`: payload ``{"v": n, "sleep": s}``
sleeps ``s`` seconds, then records ``n`` in ``test:done:<id>``.  ``Stuck`` (a plain
worker, ``max_restores = 1``: one unexplained death sends a job to the morgue) sleeps
``{"sleep": s}`` seconds in a C call (libc's ``sleep``, which no exception interrupts)
the first time it sees payload ``{"once": key}``, and records its ids in
``test:stuck_done`` when it completes.  ``Slow``: see its docstring.
"""

from __future__ import annotations

import ctypes
import os
import time
from typing import Any

import redis

import lowkiq

record = redis.Redis.from_url(os.environ.get("RECORD_URL") or os.environ["REDIS_URL"])
libc = ctypes.CDLL(None)

lowkiq.settings.poll_interval = 0.2
lowkiq.settings.lease_ttl = 2.0
lowkiq.settings.heartbeat_interval = 0.5
lowkiq.settings.shutdown_timeout = float(os.environ.get("TEST_SHUTDOWN_TIMEOUT", "25"))


class Steps(lowkiq.IterableWorker):
    """Performs one payload at a time, recording each."""

    shards_count = 2

    @classmethod
    def perform_one(cls, job_id: str, payload: Any) -> None:
        time.sleep(payload.get("sleep", 0))
        record.rpush(f"test:done:{job_id}", payload["v"])


class Stuck(lowkiq.Worker):
    """Sleeps in a C call once, then records the batch as done."""

    shards_count = 1
    max_restores = 1

    @classmethod
    def perform(cls, payloads_by_id: dict[str, list[Any]]) -> None:
        for payloads in payloads_by_id.values():
            for payload in payloads:
                if record.set(payload["once"], os.getpid(), nx=True):
                    record.rpush("test:stuck_started", os.getpid())
                    libc.sleep(int(payload["sleep"]))
        record.rpush("test:stuck_done", *payloads_by_id)


class Slow(lowkiq.Worker):
    """Two shards, ``max_restores = 1``; payload ``{"sleep": s}`` sleeps ``s`` seconds.
    Records each perform's start in ``test:slow_started`` and an overlap of two performs
    of one id in ``test:slow_overlaps``."""

    shards_count = 2
    max_restores = 1

    @classmethod
    def perform(cls, payloads_by_id: dict[str, list[Any]]) -> None:
        for job_id, payloads in payloads_by_id.items():
            if not record.set(f"test:slow_running:{job_id}", os.getpid(), nx=True):
                record.rpush("test:slow_overlaps", job_id)
            record.rpush("test:slow_started", job_id)
            try:
                for payload in payloads:
                    time.sleep(payload["sleep"])
            finally:
                record.delete(f"test:slow_running:{job_id}")


lowkiq.settings.workers = [Steps, Stuck, Slow]
