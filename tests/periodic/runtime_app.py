"""A worker app for the run-time schedule tests: one worker, ``Ticker``, and one
1-second schedule, ``tick``; ``perform`` does nothing (the schedules' logs in Redis
say what was enqueued).  Environment: ``REDIS_URL`` (a server or a Redis Cluster);
``TEST_NO_SCHEDULES=1``: the app declares no schedule."""

from __future__ import annotations

import os
from datetime import timedelta

import lowkiq

lowkiq.settings.poll_interval = 0.2
lowkiq.settings.lease_ttl = 2.0
lowkiq.settings.heartbeat_interval = 0.5
lowkiq.settings.threads_per_node = 2


class Ticker(lowkiq.Worker):
    """Performs the schedules' jobs, doing nothing."""

    shards_count = 2
    batch_size = 10

    @classmethod
    def perform(cls, payloads_by_id: dict) -> None:
        pass


lowkiq.settings.workers = [Ticker]
lowkiq.settings.schedules = (
    []
    if os.environ.get("TEST_NO_SCHEDULES")
    else [lowkiq.Schedule(Ticker, id="tick", every=timedelta(seconds=1))]
)
