"""A worker process's watch on Redis's memory: its ``maxmemory-policy``, whether it is
full, and the keys it evicted.

Every :data:`CHECK_SECONDS` the watch reads ``INFO memory`` and ``INFO stats`` of the
server (each master of a Redis Cluster) through the client of the process's own calls
(a connection of its pool for a moment; no slot map of its own to load), and notes what
it found for ``/ready`` (:class:`lowkiq.health.heartbeats.RedisMemory`).  It logs:

* an error when a server's policy turns to one that evicts (``CONFIG SET`` while
  workers run), naming the server and the policy, then once a minute while it lasts;
  with ``settings.allow_eviction``, a warning when it changes;
* a warning when Redis is full (``maxmemory …``), then once a minute while it lasts;
* the keys Redis evicted (``evicted_keys``), at most once a minute, when it evicted
  any: queued jobs may be gone although the dashboard counted them.

A read that fails (Redis unreachable, ``INFO`` refused) changes nothing: the
process's other loops report an unreachable Redis.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import redis
from redis.exceptions import RedisClusterException

from lowkiq.clients.connection import Client
from lowkiq.clients.memory_policy import SAFE_POLICY, MemoryReport, read_memory
from lowkiq.health.heartbeats import RedisMemory

log = logging.getLogger("lowkiq.redis")

#: Seconds between two reads of Redis's memory.
CHECK_SECONDS = 3.0
#: Seconds between two lines about one lasting condition.
REPEAT_SECONDS = 60.0


class _Repeated:
    """One condition's line: when it changes, then every ``repeat`` seconds while it lasts."""

    def __init__(self, repeat: float) -> None:
        self.repeat = repeat
        self.said: object = None
        self.at = 0.0

    def due(self, now: object, at: float) -> bool:
        """Whether to log the condition ``now`` (what identifies it, not its changing
        figures; ``None`` when it is over) at ``at``."""
        if now != self.said or (now is not None and at - self.at >= self.repeat):
            self.said, self.at = now, at
            return True
        return False


class MemoryWatch:
    """Reads Redis's memory every ``check_every`` seconds and says what is wrong (see the
    module)."""

    def __init__(
        self,
        client: Client,
        allow_eviction: bool,
        state: RedisMemory,
        check_every: float = CHECK_SECONDS,
        repeat_every: float = REPEAT_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.allow_eviction = allow_eviction
        self.state = state
        self.check_every = check_every
        self.clock = clock
        # Allowed, an evicting policy is said when it changes; the keys evicted, each minute.
        self._eviction = _Repeated(float("inf") if allow_eviction else repeat_every)
        self._full = _Repeated(repeat_every)
        self.repeat_every = repeat_every
        # The evicted_keys count last said (or first read), and when.
        self._evicted: tuple[int, float] | None = None
        state.allow_eviction = allow_eviction

    def start(self, stop: threading.Event) -> threading.Thread:
        """Watch from a daemon thread until ``stop`` is set."""
        thread = threading.Thread(
            target=self.run, args=(stop,), name="lowkiq-memory-watch", daemon=True
        )
        thread.start()
        return thread

    def run(self, stop: threading.Event) -> None:
        """Read, note and log every ``check_every`` seconds until ``stop`` is set."""
        while not stop.is_set():
            self.check()
            stop.wait(self.check_every)

    def check(self) -> MemoryReport | None:
        """One read of the servers, noted and logged; ``None`` when it failed."""
        try:
            report = read_memory(self.client)
        except (redis.RedisError, RedisClusterException, OSError) as exc:
            log.debug("could not read Redis's memory: %s: %s", type(exc).__name__, exc)
            return None
        self.observe(report)
        return report

    def observe(self, report: MemoryReport) -> None:
        """Note ``report`` for ``/ready`` and log what changed or lasts."""
        now = self.clock()
        eviction, full = report.eviction, report.full
        first = self.state.read_at is None
        self.state.eviction, self.state.full, self.state.read_at = eviction, full, now
        if self._eviction.due(eviction, now) and not (first and eviction is None):
            self._say_eviction(eviction, first)
        full_nodes = tuple(n.node for n in report.nodes if n.full) or None
        if self._full.due(full_nodes, now) and not (first and full is None):
            if full is None:
                log.info("Redis is no longer full: it takes new jobs again")
            else:
                log.warning("%s", full)
        self._say_evicted(report, now)

    def _say_eviction(self, eviction: str | None, first: bool) -> None:
        if eviction is None:
            log.info("Redis's maxmemory-policy is %s again: it no longer evicts keys", SAFE_POLICY)
        elif self.allow_eviction:
            if not first:  # the start said so already
                log.warning("%s (running anyway: settings.allow_eviction is true)", eviction)
        else:
            log.error(
                "%s; this worker goes on, /ready says not ready and perform_async refuses "
                "jobs until then (or set settings.allow_eviction)",
                eviction,
            )

    def _say_evicted(self, report: MemoryReport, now: float) -> None:
        """A line with the keys evicted since the last one, at most once a minute."""
        count = report.evicted_keys
        if self._evicted is None or count < self._evicted[0]:  # first read, or a restart
            self._evicted = (count, now - self.repeat_every)
            return
        said, at = self._evicted
        if count > said and now - at >= self.repeat_every:
            policies = ", ".join(
                f"{n.node} has maxmemory-policy {n.policy}" for n in report.nodes if n.evicts
            )
            log.warning(
                "Redis evicted %d key(s) (evicted_keys in INFO stats went from %d to %d; %s): "
                "jobs counted as queued may be gone",
                count - said,
                said,
                count,
                policies or f"maxmemory-policy {SAFE_POLICY} now",
            )
            self._evicted = (count, now)
