"""The app of bench/periodic.py: one 1-second schedule on a worker that does nothing.

Environment: ``REDIS_URL``.
"""

from __future__ import annotations

from datetime import timedelta

import lowkiq

lowkiq.settings.lease_ttl = 2.0
lowkiq.settings.heartbeat_interval = 0.5
lowkiq.settings.threads_per_node = 2


class Heartbeat(lowkiq.Worker):
    """Performs the ticks' jobs (nothing to do: the benchmark reads the enqueues)."""

    shards_count = 4

    @classmethod
    def perform(cls, payloads_by_id: dict) -> None:
        pass


lowkiq.settings.workers = [Heartbeat]
lowkiq.settings.schedules = [
    lowkiq.Schedule(Heartbeat, id="beat", every=timedelta(seconds=1), payload="beat")
]
