"""Two workers of different weights for process-level tests: each batch's start is
recorded as ``time worker`` in ``test:starts``.

Environment: ``REDIS_URL``, ``RECORD_URL`` (where starts are recorded; default the
same); ``TEST_HEAVY_WEIGHT`` (Heavy's weight, default 3; Light's is
1); ``TEST_HEAVY_SHARDS`` and ``TEST_LIGHT_SHARDS`` (default 4 and 8); ``TEST_SLEEP``
(seconds each batch takes, default 0.004).
"""

from __future__ import annotations

import os
import time

import redis

import lowkiq

record = redis.Redis.from_url(os.environ.get("RECORD_URL") or os.environ["REDIS_URL"])

lowkiq.settings.poll_interval = 0.2

_SLEEP = float(os.environ.get("TEST_SLEEP", "0.004"))


def _perform(name: str) -> None:
    record.rpush("test:starts", f"{time.time()} {name}")
    time.sleep(_SLEEP)


class Heavy(lowkiq.Worker):
    """The heavier worker."""

    weight = float(os.environ.get("TEST_HEAVY_WEIGHT", "3"))
    shards_count = int(os.environ.get("TEST_HEAVY_SHARDS", "4"))

    @classmethod
    def perform(cls, payloads_by_id: dict) -> None:
        _perform("Heavy")


class Light(lowkiq.Worker):
    """The lighter worker (weight 1), with more shards."""

    shards_count = int(os.environ.get("TEST_LIGHT_SHARDS", "8"))

    @classmethod
    def perform(cls, payloads_by_id: dict) -> None:
        _perform("Light")


lowkiq.settings.workers = [Heavy, Light]
