"""The process's relay of workflow members: the dispatcher thread only says which
shards' outboxes got records (:meth:`Relayer.notify`, no Redis call); a thread of its
own relays them all at once (:func:`lowkiq.workflows.relay.relay_many`: a workflow
with members in several of them is told once).

A Redis error keeps the shard for the next turn; records a crash leaves behind are
relayed by the sweep (:mod:`lowkiq.workflows.sweeper`).
"""

from __future__ import annotations

import logging
import os
import threading

import redis
from redis.exceptions import RedisClusterException

from lowkiq.settings import Settings, settings
from lowkiq.workflows.relay import relay_many

log = logging.getLogger(__name__)

#: Seconds the thread waits after a notice before relaying, so that the records of the
#: batches ending meanwhile go in the same calls.
LINGER = 0.002
#: Seconds before a turn that failed (Redis away) is tried again.
RETRY_AFTER = 0.5


class Relayer:
    """Relays the outboxes of the shards it is told of, on a thread of its own (made
    lazily, in the process that uses it)."""

    def __init__(self, config: Settings = settings) -> None:
        self.config = config
        self._dirty: set[tuple[str, int]] = set()
        self._lock = threading.Lock()
        self._relaying = threading.Lock()  # held while a turn relays
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._pid = 0

    def notify(self, queue_name: str, shard: int) -> None:
        """The outbox of ``queue_name``'s ``shard`` got records: relay them soon."""
        with self._lock:
            self._dirty.add((queue_name, shard))
            if self._thread is None or self._pid != os.getpid() or not self._thread.is_alive():
                self._pid = os.getpid()
                self._thread = threading.Thread(target=self._run, name="lowkiq-relay", daemon=True)
                self._thread.start()
        self._wake.set()

    def flush(self) -> int:
        """Relay every shard told of, now, on the calling thread; returns the records
        relayed.  A Redis error is raised (the shards stay to relay)."""
        return self._turn(raise_errors=True)

    def _run(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            if LINGER:
                threading.Event().wait(LINGER)
            if self._turn(raise_errors=False) < 0:
                threading.Event().wait(RETRY_AFTER)
                self._wake.set()

    def _turn(self, raise_errors: bool) -> int:
        """Relay the shards told of so far; returns the records relayed, -1 after a
        Redis error (those not relayed stay)."""
        with self._relaying:
            with self._lock:
                shards, self._dirty = sorted(self._dirty), set()
            if not shards:
                return 0
            try:
                return relay_many(self.config.client(), shards)
            except (redis.RedisError, RedisClusterException) as exc:
                with self._lock:
                    self._dirty.update(shards)
                if raise_errors:
                    raise
                log.warning("workflow members not told yet (%s); trying again", exc)
                return -1
            except Exception:  # noqa: BLE001 - a bug must not stop the relay thread
                if raise_errors:
                    raise
                log.exception("relaying %s failed; the sweep tries again", shards)
                return 0


#: The relayer of this process (the global settings' Redis).
RELAYER = Relayer()
