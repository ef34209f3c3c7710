"""The one retry policy of lowkiq's own loops (the dispatcher, the coordinator, the start,
the schedules, a Redis Cluster master that failed a call, a supervisor's children):
jittered exponential backoff, a warning at the first failure, a reminder every
:data:`REMIND_EVERY` seconds while it goes on, and a line at recovery.

The waits are redis-py's :class:`redis.backoff.EqualJitterBackoff`: the n-th wait after
consecutive failures is between half and all of ``base * 2 ** (n - 1)``, at most
``cap``, so processes that failed together (a Redis restart) do not all try again in
the same instant.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from redis.backoff import EqualJitterBackoff

#: Seconds between two "still failing" warnings of a loop that keeps failing.
REMIND_EVERY = 15.0


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
    warning at the first failure and every ``remind_every`` seconds after it (with the
    time waited), and a line when it works again.

    ``waiting_for`` names what the loop waits for (``Redis at redis://host:6379/0``): the
    reminders then say "still waiting for" it."""

    def __init__(
        self,
        what: str,
        logger: logging.Logger,
        backoff: Backoff,
        *,
        waiting_for: str = "",
        remind_every: float = REMIND_EVERY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.what = what
        self.log = logger
        self.backoff = backoff
        self.waiting_for = waiting_for
        self.remind_every = remind_every
        self.clock = clock
        #: Consecutive failures so far (0: the last try worked).
        self.failures = 0
        #: When the first of these failures happened, on ``clock``.
        self.failing_since = 0.0
        self._reminded = 0

    def failed(
        self, error: BaseException, reason: str | None = None, *, logged: bool = False
    ) -> float:
        """Count a failure; returns the seconds to wait.  The first is logged: ``reason``,
        or the Redis error (``logged``: not at all, the caller logged it); then a reminder
        each time another ``remind_every`` seconds have passed."""
        self.failures += 1
        said = reason or f"Redis error ({type(error).__name__}: {error})"
        now = self.clock()
        if self.failures == 1:
            self.failing_since, self._reminded = now, 0
            if not logged:
                self.log.warning("%s: %s; retrying with backoff", self.what, said)
        elif not logged and now - self.failing_since >= (self._reminded + 1) * self.remind_every:
            waited = now - self.failing_since
            self._reminded = int(waited // self.remind_every)
            if self.waiting_for:
                self.log.warning(
                    "%s: still waiting for %s (%.0f s): %s",
                    self.what,
                    self.waiting_for,
                    waited,
                    said,
                )
            else:
                self.log.warning("%s: still failing after %.0f s: %s", self.what, waited, said)
        return self.backoff.delay(self.failures)

    def succeeded(self) -> None:
        """The loop's try worked: a line when it had failed."""
        if self.failures:
            self.log.info("%s: works again after %d failed attempt(s)", self.what, self.failures)
            self.failures = 0
