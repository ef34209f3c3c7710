"""Masters of a Redis Cluster that failed a processing client's call, and when to try each
again.

A master that hangs (stopped, or cut off by a network that drops packets) costs the
call that finds it out a socket timeout; one that died or dropped the connection
fails it at once.  Either way, until its retry is due, the calls routed to it fail
at once with :class:`MasterDown`, without being sent, so the shards of the other
masters keep their pace; the retries back off from :data:`FIRST_RETRY` to
:data:`MAX_RETRY` seconds while it keeps failing.  A slot map reloaded after a
failover routes the master's slots to its replica, which no outage names.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import redis

from lowkiq.clients.retry import Backoff

log = logging.getLogger("lowkiq.redis")

#: Seconds before a master that did not answer is tried again.
FIRST_RETRY = 0.5
#: The longest wait between two tries of a master that stays silent, seconds.
MAX_RETRY = 8.0
#: The waits before a silent master is tried again (the retry policy).
RETRIES = Backoff(FIRST_RETRY, MAX_RETRY)


class MasterDown(redis.ConnectionError):
    """A call routed to a master that did not answer; ``sent``: whether this call was
    sent (what it did is then unknown), or failed at once, unsent, while the master's
    retry is not due."""

    def __init__(self, message: str, sent: bool) -> None:
        super().__init__(message)
        self.sent = sent


@dataclass
class _Outage:
    failures: int
    retry_at: float


class Outages:
    """The masters that did not answer, by name (``host:port``)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._outages: dict[str, _Outage] = {}

    def check(self, name: str) -> MasterDown | None:
        """The error of a call to ``name`` while its retry is not due (``None``: send it)."""
        outage = self._outages.get(name)
        if outage is None or self.clock() >= outage.retry_at:
            return None
        left = outage.retry_at - self.clock()
        return MasterDown(f"Redis master {name} did not answer; tried again in {left:.1f} s", False)

    def failed(self, name: str, error: Exception) -> MasterDown:
        """A call sent to ``name`` failed with ``error`` (a connection error or a timeout):
        the error to report, and when to try the master again."""
        outage = self._outages.get(name)
        failures = 1 if outage is None else outage.failures + 1
        wait = RETRIES.delay(failures)
        self._outages[name] = _Outage(failures, self.clock() + wait)
        if failures == 1:
            log.warning(
                "Redis master %s failed a call (%s: %s); the shards it serves wait, the "
                "others go on; tried again in %.1f s, then less often while it fails",
                name,
                type(error).__name__,
                error,
                wait,
            )
        return MasterDown(f"Redis master {name} did not answer: {error}", True)

    def answered(self, name: str) -> bool:
        """A call to ``name`` was answered: it serves again.  Returns whether it was out."""
        outage = self._outages.pop(name, None)
        if outage is None:
            return False
        log.info("Redis master %s answers again after %d failed call(s)", name, outage.failures)
        return True

    def __contains__(self, name: object) -> bool:
        """Whether master ``name`` did not answer its last call."""
        return name in self._outages
