"""A worker app for the workflow process tests: members record their performs, the
callback records what it got, in a separate Redis.

Environment: ``REDIS_URL`` (the queues), ``RECORD_URL`` (where performs are recorded;
default the same), ``TEST_BATCH``, ``TEST_LEASE_TTL`` (seconds).  A member's payload
``{"wf": id, "n": n}`` is recorded in the set ``wf:performed:<id>``; ``{"sleep": s}``
sleeps; ``{"fail_once": key}`` raises the first time.  The callback ``Finished`` pushes
``[id, body, how many members of it were performed by then]`` on ``wf:callbacks``.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import redis

import lowkiq

record = redis.Redis.from_url(os.environ.get("RECORD_URL") or os.environ["REDIS_URL"])

lowkiq.settings.poll_interval = 0.2
lowkiq.settings.lease_ttl = float(os.environ.get("TEST_LEASE_TTL", "2"))
lowkiq.settings.heartbeat_interval = lowkiq.settings.lease_ttl / 4


class Step(lowkiq.Worker):
    """A workflow's members."""

    shards_count = 4
    batch_size = int(os.environ.get("TEST_BATCH", "2"))

    @classmethod
    def retry_in(cls, retry_count: int) -> float:
        return 0.2

    @classmethod
    def perform(cls, payloads_by_id: dict[str, list[Any]]) -> None:
        for job_id, payloads in payloads_by_id.items():
            for payload in payloads:
                if "sleep" in payload:
                    time.sleep(payload["sleep"])
                if "fail_once" in payload and record.set(payload["fail_once"], 1, nx=True):
                    raise RuntimeError(f"failing {job_id} once")
        for job_id, payloads in payloads_by_id.items():
            for payload in payloads:
                record.sadd(f"wf:performed:{payload['wf']}", f"{job_id}:{payload['n']}")


class Finished(lowkiq.Worker):
    """The ``on_complete`` callback."""

    shards_count = 2

    @classmethod
    def perform(cls, payloads_by_id: dict[str, list[Any]]) -> None:
        for workflow_id, bodies in payloads_by_id.items():
            for body in bodies:
                performed = record.scard(f"wf:performed:{workflow_id}")
                record.rpush("wf:callbacks", json.dumps([workflow_id, body, performed]))


lowkiq.settings.workers = [Step, Finished]
