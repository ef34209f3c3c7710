"""How long a loop waits after consecutive Redis errors before it tries again."""

from __future__ import annotations

#: Longest wait, seconds, between reconnection attempts while Redis is down.
BACKOFF_CAP = 5.0


def backoff(failures: int, poll_interval: float) -> float:
    """Seconds to wait after ``failures`` consecutive Redis errors (doubling, capped)."""
    doubled: float = poll_interval * 2.0 ** min(failures - 1, 16)
    return min(max(BACKOFF_CAP, poll_interval), doubled)
