"""Processed and failed (and, on the History and Charts pages, discarded) jobs per second
or per minute over consecutive intervals: what a throughput chart shows, as JSON for the
chart script and as rows for the table shown without JavaScript."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Interval:
    """The rates from ``start`` to ``end`` (unix times), jobs per :attr:`Rates.unit`."""

    start: float
    end: float
    processed: float
    failed: float
    discarded: float = 0.0


@dataclass(frozen=True)
class Rates:
    """Consecutive intervals, oldest first, in a window from ``start`` to ``end``."""

    intervals: tuple[Interval, ...]
    #: ``"s"`` or ``"min"``: the rates are jobs per second or per minute.
    unit: str
    start: float
    end: float
    #: Whether the chart shows discarded jobs too (the live chart does not).
    with_discarded: bool = False

    @property
    def peak(self) -> float:
        """The highest rate, processed, failed or discarded (0 without intervals)."""
        return max((max(i.processed, i.failed, i.discarded) for i in self.intervals), default=0.0)

    @property
    def latest(self) -> Interval:
        """The last interval; all zero (at the window's end) without intervals."""
        if self.intervals:
            return self.intervals[-1]
        return Interval(self.end, self.end, 0.0, 0.0)

    def chart_data(self) -> dict[str, Any]:
        """The chart script's input: each interval's start and its rates, then the last
        interval's end with its rates again, so a stepped line ends where the time does."""
        intervals = self.intervals
        ends = [intervals[-1]] if intervals else []
        data: dict[str, Any] = {
            "unit": f"jobs/{self.unit}",
            "start": round(self.start, 3),
            "end": round(self.end, 3),
            "x": [round(i.start, 3) for i in intervals] + [round(i.end, 3) for i in ends],
            "processed": [round(i.processed, 3) for i in (*intervals, *ends)],
            "failed": [round(i.failed, 3) for i in (*intervals, *ends)],
        }
        if self.with_discarded:
            data["discarded"] = [round(i.discarded, 3) for i in (*intervals, *ends)]
        return data
