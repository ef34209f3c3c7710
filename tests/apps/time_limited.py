"""A worker app whose performs run past ``perform_timeout`` (``TEST_WORKER`` picks one).

* ``Spin`` (``perform_timeout = 2``): a payload ``{"spin": true}`` runs ``while True:
  pass``, ``Spin.max_retry_count = 1``, so it fails twice and goes to the morgue;
* ``Forever`` (``async def``, ``perform_timeout = 2``): ``{"forever": true}`` awaits an
  event nothing sets, likewise;
* ``CCall`` (``perform_timeout = 1``): ``{"sleep": s}`` sleeps ``s`` seconds inside one C
  call (``libc.sleep`` through ctypes), on its first run only.

Every perform records its thread (``test:limit:threads``, ``id thread retry_count``) and its start
(``test:limit:started:<id>``, ``time.time()``); an interrupted one records how long it
ran before it saw the limit (``test:limit:stopped``, ``id seconds``); a payload
``{"v": n}`` is recorded in ``test:limit:done``.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import threading
import time
from typing import Any

import redis

import lowkiq

record = redis.Redis.from_url(os.environ["REDIS_URL"])

lowkiq.settings.poll_interval = 0.2
lowkiq.settings.lease_ttl = 4.0
lowkiq.settings.heartbeat_interval = 1.0
lowkiq.settings.format_error = lambda exc: f"{type(exc).__name__}: {exc}"


def _started(job_id: str) -> float:
    since = time.monotonic()
    batch = lowkiq.current_batch()
    retry_count = batch.retry_counts[job_id] if batch is not None else None
    record.rpush("test:limit:threads", f"{job_id} {threading.get_ident()} {retry_count}")
    record.rpush(f"test:limit:started:{job_id}", time.time())
    return since


def _stopped(job_id: str, since: float) -> None:
    record.rpush("test:limit:stopped", f"{job_id} {time.monotonic() - since:.4f}")


def _done(payloads: list[Any]) -> None:
    for payload in payloads:
        if "v" in payload:
            record.rpush("test:limit:done", payload["v"])


class Limited(lowkiq.Worker):
    """What the three workers share: one retry, soon."""

    shards_count = 2
    max_retry_count = 1

    @classmethod
    def retry_in(cls, retry_count: int) -> float:
        return 0.2


class Spin(Limited):
    """A sync perform that never ends by itself."""

    perform_timeout = 2.0

    @classmethod
    def perform(cls, payloads_by_id: dict[str, list[Any]]) -> None:
        for job_id, payloads in payloads_by_id.items():
            since = _started(job_id)
            if any(payload.get("spin") for payload in payloads):
                try:
                    while True:
                        pass
                except lowkiq.PerformTimeout:
                    _stopped(job_id, since)
                    raise
            _done(payloads)


class Forever(Limited):
    """An ``async def perform`` that awaits forever."""

    perform_timeout = 2.0

    @classmethod
    async def perform(cls, payloads_by_id: dict[str, list[Any]]) -> None:
        for job_id, payloads in payloads_by_id.items():
            since = _started(job_id)
            if any(payload.get("forever") for payload in payloads):
                try:
                    await asyncio.Event().wait()
                except asyncio.CancelledError:
                    _stopped(job_id, since)
                    raise
            _done(payloads)


class CCall(Limited):
    """A sync perform inside one C call, where no exception can be raised."""

    perform_timeout = 1.0

    @classmethod
    def perform(cls, payloads_by_id: dict[str, list[Any]]) -> None:
        libc = ctypes.CDLL(None)
        for job_id, payloads in payloads_by_id.items():
            first = record.incr(f"test:limit:runs:{job_id}") == 1
            since = _started(job_id)
            seconds = max((int(payload.get("sleep", 0)) for payload in payloads), default=0)
            if first and seconds:
                try:
                    libc.sleep(seconds)
                    _ = job_id  # the exception lands at the first instruction after the call
                except lowkiq.PerformTimeout:
                    _stopped(job_id, since)
                    raise
            _done(payloads)


WORKERS: dict[str, type[lowkiq.Worker]] = {"Spin": Spin, "Forever": Forever, "CCall": CCall}
lowkiq.settings.workers = [WORKERS[os.environ.get("TEST_WORKER", "Spin")]]
