"""The heartbeats of one worker process's loops, stamped by the loops themselves.

Each processing thread stamps its :class:`Heartbeat` once per turn of its loop
(waiting, backing off on a Redis error, or after a batch) and marks the start
and end of every ``perform``; the coordinator stamps its own on every
heartbeat round, noting whether Redis answered; the memory watch notes
whether Redis evicts keys or is full.  Nothing here talks to
Redis: the health endpoints (:mod:`lowkiq.health.verdicts`) read these stamps,
so a Redis outage leaves a process live while it keeps retrying.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from lowkiq.middleware import Batch, Next
from lowkiq.running import running


@dataclass(slots=True)
class Performing:
    """The batch a thread is performing: its shard (``Worker:shard``) and start.  Made for
    every batch (a plain record), and replaced, never changed."""

    shard: str
    #: When ``perform`` started, on the heartbeats' clock (``time.monotonic``).
    since: float
    #: Seconds after which it is stuck (``None``: ``settings.stuck_after``); a worker with
    #: ``perform_timeout`` sets its own (:func:`lowkiq.perform.timeouts.stuck_threshold`).
    stuck_after: float | None = None
    #: With ``settings.stuck_after``, at least this many seconds (a worker's
    #: ``max_perform_seconds`` + grace: :func:`lowkiq.perform.timeouts.stuck_floor`).
    stuck_floor: float | None = None


class Heartbeat:
    """One loop's last stamp and, for a processing thread, its running ``perform``."""

    def __init__(self, name: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.name = name
        self.clock = clock
        #: The last stamp, or ``None`` before the loop's first turn.
        self.at: float | None = None
        #: The batch in ``perform`` now, if any.
        self.performing: Performing | None = None

    def stamp(self) -> None:
        """The loop made one more turn."""
        self.at = self.clock()

    @contextmanager
    def performing_batch(
        self, shard: str, stuck_after: float | None = None, stuck_floor: float | None = None
    ) -> Iterator[None]:
        """Note that the thread performs a batch of ``shard`` (``Worker:shard``) inside,
        stuck after ``stuck_after`` seconds (``None``: ``settings.stuck_after``)."""
        self.performing = Performing(shard, self.clock(), stuck_after, stuck_floor)
        try:
            yield
        finally:
            self.performing = None
            self.stamp()

    def middleware(self, worker: Any, batch: Batch, call_next: Next[Any, Batch]) -> Any:
        """A server middleware (outermost): note the batch in ``perform`` while it runs."""
        now = running.get()
        shard = now.handler.name if now is not None else f"{worker.__name__}:?"
        with self.performing_batch(shard):
            return call_next(worker, batch)


class CoordinatorBeat(Heartbeat):
    """The coordinator loop's heartbeat, which also tells whether Redis answered it."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__("coordinator", clock)
        #: When a heartbeat round last succeeded (``None``: not registered yet).
        self.succeeded_at: float | None = None
        #: Rounds failed on a Redis error since the last success.
        self.failures = 0
        #: The last Redis error, as ``Type: message``.
        self.error = ""
        #: When the first of the failures since the last success happened.
        self.failing_since: float | None = None
        #: The Redis the process talks to, without its password (``""``: not known yet).
        self.redis = ""

    def succeeded(self) -> None:
        """A heartbeat round reached Redis (the first one registers the process)."""
        self.stamp()
        self.succeeded_at = self.at
        self.failures = 0
        self.error = ""
        self.failing_since = None

    def failed(self, exc: BaseException) -> None:
        """A heartbeat round (or the start's first call) failed on a Redis error; the
        loop backs off and retries."""
        self.stamp()
        if not self.failures:
            self.failing_since = self.at
        self.failures += 1
        self.error = f"{type(exc).__name__}: {exc}"


class RedisMemory:
    """What the process last read of Redis's memory (set by
    :class:`lowkiq.health.memory_watch.MemoryWatch`, every few seconds)."""

    def __init__(self) -> None:
        #: Why Redis may evict lowkiq's keys (its maxmemory-policy), or ``None``.
        self.eviction: str | None = None
        #: Whether ``settings.allow_eviction`` lets the process run on such a server.
        self.allow_eviction = False
        #: ``Redis is full (maxmemory …)``, or ``None``.
        self.full: str | None = None
        #: When it was last read (``None``: never).
        self.read_at: float | None = None


class Heartbeats:
    """The heartbeats of one process: one per processing thread, and the coordinator's."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.coordinator = CoordinatorBeat(clock)
        #: Redis's memory policy and fullness, as last read.
        self.redis_memory = RedisMemory()
        self._threads: dict[int, Heartbeat] = {}
        self._lock = threading.Lock()

    def thread(self, number: int, name: str | None = None) -> Heartbeat:
        """The heartbeat of processing thread ``number`` (made on first use, named
        ``name`` or ``thread N``)."""
        with self._lock:
            beat = self._threads.get(number)
            if beat is None:
                beat = Heartbeat(name or f"thread {number}", self.clock)
                self._threads[number] = beat
            return beat

    def threads(self) -> list[Heartbeat]:
        """Every processing thread's heartbeat, by number."""
        with self._lock:
            return [self._threads[number] for number in sorted(self._threads)]
