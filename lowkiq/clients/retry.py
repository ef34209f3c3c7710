"""The one retry policy of lowkiq's own loops (the dispatcher, the coordinator, the start,
the schedules, a Redis Cluster master that failed a call, a supervisor's children):
jittered exponential backoff, a warning at the first failure and a line at recovery.

The waits are redis-py's :class:`redis.backoff.EqualJitterBackoff`: the n-th wait after
consecutive failures is between half and all of ``base * 2 ** (n - 1)``, at most
``cap``, so processes that failed together (a Redis restart) do not all try again in
the same instant.
"""

from __future__ import annotations

import logging

from redis.backoff import EqualJitterBackoff


class Backoff:
    """Seconds to wait after consecutive failures: jittered, doubling from ``base``
    seconds, at most ``cap``."""

    def __init__(self, base: float, cap: float) -> None:
        self.base, self.cap = base, max(cap, base)
        self._waits = EqualJitterBackoff(cap=self.cap, base=base)

    def delay(self, failures: int) -> float:
        """The wait after ``failures`` consecutive failures (1: the first)."""
        return float(self._waits.compute(min(max(failures - 1, 0), 32)))


class Retries:
    """The consecutive failures of one loop: how long it waits before it tries again, a
    warning at the first failure, and a line when it works again."""

    def __init__(self, what: str, logger: logging.Logger, backoff: Backoff) -> None:
        self.what = what
        self.log = logger
        self.backoff = backoff
        #: Consecutive failures so far (0: the last try worked).
        self.failures = 0

    def failed(
        self, error: BaseException, reason: str | None = None, *, logged: bool = False
    ) -> float:
        """Count a failure; returns the seconds to wait.  The first is logged: ``reason``,
        or the Redis error (``logged``: not at all, the caller logged it)."""
        self.failures += 1
        if self.failures == 1 and not logged:
            said = reason or f"Redis error ({type(error).__name__}: {error})"
            self.log.warning("%s: %s; retrying with backoff", self.what, said)
        return self.backoff.delay(self.failures)

    def succeeded(self) -> None:
        """The loop's try worked: a line when it had failed."""
        if self.failures:
            self.log.info("%s: works again after %d failed attempt(s)", self.what, self.failures)
            self.failures = 0
