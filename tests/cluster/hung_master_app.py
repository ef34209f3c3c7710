"""A worker app for the hung-master test: twelve shards over the cluster's masters, leases
of ``TEST_LEASE_TTL`` seconds (default 10); each perform appends its ids, a line each, to
the file ``TEST_PERFORMED``.

Environment: ``REDIS_URL`` (a ``redis+cluster://`` node), ``TEST_LEASE_TTL``,
``TEST_PERFORMED``.
"""

from __future__ import annotations

import os

import lowkiq

lowkiq.settings.poll_interval = 0.2
lowkiq.settings.lease_ttl = float(os.environ.get("TEST_LEASE_TTL", "10"))
lowkiq.settings.heartbeat_interval = lowkiq.settings.lease_ttl / 3


class Noted(lowkiq.Worker):
    """Twelve shards; each perform notes its ids."""

    shards_count = 12

    @classmethod
    def perform(cls, payloads_by_id: dict) -> None:
        """Append the batch's ids to the file, one write (appends of a line are whole)."""
        lines = "".join(f"{job_id}\n" for job_id in payloads_by_id)
        descriptor = os.open(os.environ["TEST_PERFORMED"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            os.write(descriptor, lines.encode())
        finally:
            os.close(descriptor)


lowkiq.settings.workers = [Noted]
