"""A worker app for the lease failover test: twelve shards over the cluster's masters,
leases of ``TEST_LEASE_TTL`` seconds (default 10), performs of a few milliseconds.

Environment: ``REDIS_URL`` (a ``redis+cluster://`` node), ``TEST_LEASE_TTL``.
"""

from __future__ import annotations

import os
import time

import lowkiq

lowkiq.settings.poll_interval = 0.2
lowkiq.settings.lease_ttl = float(os.environ.get("TEST_LEASE_TTL", "10"))
lowkiq.settings.heartbeat_interval = lowkiq.settings.lease_ttl / 3


class Steady(lowkiq.Worker):
    """Twelve shards; each perform takes a few milliseconds."""

    shards_count = 12

    @classmethod
    def perform(cls, payloads_by_id: dict) -> None:
        """Take a little time, like real work."""
        time.sleep(0.005)


lowkiq.settings.workers = [Steady]
