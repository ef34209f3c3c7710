"""A worker app for operating groups at run time (pause, a group's own cap): each
perform adds ``pid:thread:n`` to ``test:running:<group>`` while it runs (so a test
counts the batches running in live processes only, a SIGKILLed one's left behind), and
records when each job started, on Redis's clock, in ``test:starts:<group>``.

Environment: ``REDIS_URL``, ``RECORD_URL`` (where performs are recorded; default the
same), ``TEST_GROUP_CAP`` (``Worker.group_concurrency``; unset:
none).  Payloads: ``{"g": group, "sleep": seconds}``.
"""

from __future__ import annotations

import itertools
import os
import threading
import time

import redis

import lowkiq

record = redis.Redis.from_url(os.environ.get("RECORD_URL") or os.environ["REDIS_URL"])
_numbers = itertools.count()

lowkiq.settings.poll_interval = 0.2
lowkiq.settings.lease_ttl = 2.0
lowkiq.settings.heartbeat_interval = 0.5


class Tenants(lowkiq.Worker):
    """Jobs of a few groups, each sleeping a little."""

    shards_count = 8
    group_concurrency = (
        int(os.environ["TEST_GROUP_CAP"]) if "TEST_GROUP_CAP" in os.environ else None
    )

    @classmethod
    def perform(cls, payloads_by_id: dict) -> None:
        payloads = [p for ps in payloads_by_id.values() for p in ps]
        groups = sorted({p["g"] for p in payloads})
        me = f"{os.getpid()}:{threading.get_ident()}:{next(_numbers)}"
        seconds, micros = record.time()
        for group in groups:
            record.sadd(f"test:running:{group}", me)
            record.rpush(f"test:starts:{group}", seconds + micros / 1e6)
        try:
            time.sleep(sum(p.get("sleep", 0) for p in payloads))
        finally:
            for group in groups:
                record.srem(f"test:running:{group}", me)
            record.rpush("test:finished", *payloads_by_id)


lowkiq.settings.workers = [Tenants]
