"""A worker's stored history over a window, as the dashboard reads it: minute by minute,
ten minutes or an hour at a time for longer windows (:data:`RESOLUTIONS`)."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from lowkiq.clients.connection import Client
from lowkiq.telemetry import store
from lowkiq.telemetry.counts import Counts

#: The longest window, minutes: what the store keeps.
MAX_MINUTES = store.RETENTION // 60
#: The span, minutes, a window is read by: the first whose longest window fits.
#: (window up to, minutes) -> span.
RESOLUTIONS = ((60, 1), (8 * 60, 10), (MAX_MINUTES, 60))


@dataclass(frozen=True)
class Span:
    """The counts of consecutive minutes, from ``start`` (unix time) for ``seconds``."""

    start: float
    seconds: float
    counts: Counts


@dataclass(frozen=True)
class History:
    """One worker's stored counts from minute ``first`` to minute ``last`` (``unix time //
    60``, inclusive), by spans of ``resolution`` minutes (1, 10 or 60)."""

    first: int
    last: int
    #: The start minute of each span in which something was performed -> its counts.
    minutes: Mapping[int, Counts]
    resolution: int = 1

    @property
    def total(self) -> Counts:
        """The counts of the whole window."""
        return Counts.total(self.minutes.values())

    @classmethod
    def merged(cls, histories: Sequence[History]) -> History:
        """Several workers' histories of one window, summed span by span."""
        if not histories:
            raise ValueError("no history to merge")
        first = histories[0]
        shape = (first.first, first.last, first.resolution)
        if any((h.first, h.last, h.resolution) != shape for h in histories):
            raise ValueError("histories of different windows cannot be merged")
        by_minute: dict[int, list[Counts]] = {}
        for history in histories:
            for minute, counts in history.minutes.items():
                by_minute.setdefault(minute, []).append(counts)
        summed = {m: Counts.total(spans) for m, spans in sorted(by_minute.items())}
        return cls(first.first, first.last, summed, first.resolution)

    def series(self, step: int) -> list[Span]:
        """The window in spans of ``step`` minutes (a multiple of the resolution), oldest
        first, the last one ending with the window."""
        if step < 1 or step % self.resolution:
            raise ValueError(f"step must be a multiple of {self.resolution} minutes, got {step}")
        resolution = self.resolution
        end = (self.last // resolution + 1) * resolution
        start = end - step * -(-(end - self.first) // step)
        spans = []
        for first in range(start, end, step):
            counts = Counts.total(
                self.minutes[m] for m in range(first, first + step, resolution) if m in self.minutes
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
    worker name -> queue name, in one round trip.

    A window longer than an hour is read by spans of 10 or 60 minutes
    (:data:`RESOLUTIONS`): it starts at the start of a span, a little earlier.
    """
    if not 1 <= minutes <= MAX_MINUTES:
        raise ValueError(f"minutes must be from 1 to {MAX_MINUTES}, got {minutes}")
    span = next(span for longest, span in RESOLUTIONS if minutes <= longest)
    last = int((time.time() if now is None else now) // 60)
    last_span = last // span
    first_span = last_span - -(-minutes // span) + 1
    stored = store.read_spans(client, list(queue_names.values()), span, first_span, last_span)
    return {
        worker: History(first_span * span, last, {n * span: c for n, c in stored[q].items()}, span)
        for worker, q in queue_names.items()
    }
