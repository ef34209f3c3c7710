"""The app the deploy kit runs: one worker class and the settings, read from the environment.

Replace it with your own (keep the file name, or change ``-r app.py`` in the
recipes): any module that sets ``lowkiq.settings.workers`` will do.
Redis is ``REDIS_URL``; ``python app.py N`` enqueues N jobs to watch them run.
"""

from __future__ import annotations

import logging
import sys

import lowkiq

log = logging.getLogger("app")


class Events(lowkiq.Worker):
    """Handles the events of one account at a time, oldest first (ids are account ids)."""

    #: Shards bound the useful processes: shards / threads per process.
    shards_count = 8
    batch_size = 20

    @classmethod
    def perform(cls, payloads_by_id: dict[str, list[object]]) -> None:
        for account, events in payloads_by_id.items():
            log.info("account %s: %d event(s)", account, len(events))


lowkiq.settings.workers = [Events]


if __name__ == "__main__":
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    Events.perform_async([{"id": f"account-{n % 50}", "payload": {"n": n}} for n in range(count)])
    print(f"enqueued {count} job(s)")
