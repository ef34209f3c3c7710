"""A worker's stored history over a window of minutes, as the dashboard reads it."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from lowkiq.connection import Client
from lowkiq.telemetry import store
from lowkiq.telemetry.counts import Counts

#: The longest window, minutes: what the store keeps.
MAX_MINUTES = store.RETENTION // 60


@dataclass(frozen=True)
class Span:
    """The counts of consecutive minutes, from ``start`` (unix time) for ``seconds``."""

    start: float
    seconds: float
    counts: Counts


@dataclass(frozen=True)
class History:
    """One worker's stored minutes ``first`` to ``last`` (``unix time // 60``, inclusive)."""

    first: int
    last: int
    #: The minutes in which something was performed.
    minutes: Mapping[int, Counts]

    @property
    def total(self) -> Counts:
        """The counts of the whole window."""
        return Counts.total(self.minutes.values())

    @classmethod
    def merged(cls, histories: Sequence[History]) -> History:
        """Several workers' histories of one window, summed minute by minute."""
        if not histories:
            raise ValueError("no history to merge")
        first, last = histories[0].first, histories[0].last
        if any((h.first, h.last) != (first, last) for h in histories):
            raise ValueError("histories of different windows cannot be merged")
        by_minute: dict[int, list[Counts]] = {}
        for history in histories:
            for minute, counts in history.minutes.items():
                by_minute.setdefault(minute, []).append(counts)
        return cls(first, last, {m: Counts.total(spans) for m, spans in sorted(by_minute.items())})

    def series(self, step: int) -> list[Span]:
        """The window in spans of ``step`` minutes, oldest first, ending with the last minute."""
        if step < 1:
            raise ValueError(f"step must be at least 1 minute, got {step}")
        spans = []
        end = self.last + 1
        start = end - step * -(-(end - self.first) // step)
        for first in range(start, end, step):
            counts = Counts.total(
                self.minutes[m] for m in range(first, first + step) if m in self.minutes
            )
            spans.append(Span(first * 60.0, step * 60.0, counts))
        return spans


def read(
    client: Client,
    queue_names: Mapping[str, str],
    minutes: int,
    now: float | None = None,
) -> dict[str, History]:
    """The last ``minutes`` minutes (the current one included) of each worker, given as
    worker name -> queue name, in one round trip."""
    if not 1 <= minutes <= MAX_MINUTES:
        raise ValueError(f"minutes must be from 1 to {MAX_MINUTES}, got {minutes}")
    last = int((time.time() if now is None else now) // 60)
    first = last - minutes + 1
    stored = store.read_minutes(client, list(queue_names.values()), first, last)
    return {worker: History(first, last, stored[queue]) for worker, queue in queue_names.items()}
