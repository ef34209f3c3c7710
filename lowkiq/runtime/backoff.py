"""How long lowkiq's loops wait after consecutive Redis errors (the policy is
:mod:`lowkiq.clients.retry`'s)."""

from __future__ import annotations

from lowkiq.clients.retry import Backoff

#: Longest wait, seconds, between attempts while Redis is down.
BACKOFF_CAP = 5.0


def redis_backoff(poll_interval: float) -> Backoff:
    """The waits of a loop that polls every ``poll_interval`` seconds: doubling from it,
    jittered, at most :data:`BACKOFF_CAP` (or ``poll_interval`` when longer)."""
    return Backoff(poll_interval, max(BACKOFF_CAP, poll_interval))
