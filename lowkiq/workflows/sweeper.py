"""The thread of a worker process that runs :func:`lowkiq.workflows.relay.sweep`."""

from __future__ import annotations

import logging
import threading
import time

import redis
from redis.exceptions import RedisClusterException

from lowkiq.clients.connection import Client
from lowkiq.workflows.relay import SWEEP_EVERY, sweep

log = logging.getLogger(__name__)


class Sweeper:
    """Sweeps the workflows every :data:`~lowkiq.workflows.relay.SWEEP_EVERY` seconds
    (one process of the fleet at a time) until stopped."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.thread: threading.Thread | None = None

    def start(self, stop: threading.Event) -> None:
        """Run in a daemon thread until ``stop`` is set."""
        self.thread = threading.Thread(
            target=self.run, args=(stop,), name="lowkiq-workflows", daemon=True
        )
        self.thread.start()

    def run(self, stop: threading.Event) -> None:
        """The loop: a Redis error waits for the next turn."""
        while not stop.wait(SWEEP_EVERY):
            try:
                sweep(self.client, time.time())
            except (redis.RedisError, RedisClusterException) as exc:
                log.debug("workflow sweep failed (%s); next turn in %ss", exc, SWEEP_EVERY)
            except Exception:  # noqa: BLE001 - a bug here must not end the process
                log.exception("workflow sweep failed")
