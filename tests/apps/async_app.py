"""A worker app whose ``perform`` and ``retries_exhausted`` are coroutine functions.

Each perform records ``id thread loop`` (the ids of the thread and of the running
event loop) in ``test:async:seen``; a payload ``{"fail": true}`` raises, and the
jobs that reach the morgue are recorded in ``test:async:exhausted``.
"""

from __future__ import annotations

import asyncio
import os
import threading

import redis

import lowkiq

record = redis.Redis.from_url(os.environ["REDIS_URL"])

lowkiq.settings.poll_interval = 0.2
lowkiq.settings.lease_ttl = 2.0
lowkiq.settings.heartbeat_interval = 0.5


class AsyncRecorder(lowkiq.Worker):
    """Awaits before recording, so the batch really runs on an event loop."""

    shards_count = 6
    max_retry_count = 1

    @classmethod
    def retry_in(cls, retry_count: int) -> float:
        return 0.1

    @classmethod
    async def perform(cls, payloads_by_id: dict) -> None:
        await asyncio.sleep(0.001)
        loop = id(asyncio.get_running_loop())
        for job_id, payloads in payloads_by_id.items():
            if any(isinstance(p, dict) and p.get("fail") for p in payloads):
                raise RuntimeError(f"failing {job_id}")
            record.rpush("test:async:seen", f"{job_id} {threading.get_ident()} {loop}")

    @classmethod
    async def retries_exhausted(cls, jobs: list) -> None:
        await asyncio.sleep(0.001)
        for job in jobs:
            record.rpush("test:async:exhausted", f"{job['id']} {job['error']}")


lowkiq.settings.workers = [AsyncRecorder]
