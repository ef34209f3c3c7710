"""The Metrics page's pictures, drawn server-side as SVG: throughput over time and histograms."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from lowkiq import Span
from lowkiq.telemetry.counts import BUCKETS

WIDTH = 600
HEIGHT = 140


def bucket_label(slot: int) -> str:
    """``"≤ 2.5 ms"``, ``"≤ 5 min"``; the overflow slot is ``"> 30 min"``."""
    if slot >= len(BUCKETS):
        return f"> {_bound(BUCKETS[-1])}"
    return f"≤ {_bound(BUCKETS[slot])}"


def _bound(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds * 1000:g} ms"
    if seconds < 60:
        return f"{seconds:g} s"
    return f"{seconds / 60:g} min"


@dataclass(frozen=True)
class Throughput:
    """Processed and failed jobs per minute over a window, as two polylines."""

    processed_points: str
    failed_points: str
    #: The highest rate drawn, jobs per minute.
    peak: float
    #: Unix times of the window's start and end.
    start: float
    end: float
    width: int = WIDTH
    height: int = HEIGHT


def throughput(spans: Sequence[Span]) -> Throughput:
    """Jobs per minute in each span, drawn at the span's middle, across the window."""
    rates = [
        (
            span.start + span.seconds / 2,
            span.counts.processed_jobs * 60 / span.seconds,
            span.counts.failed_jobs * 60 / span.seconds,
        )
        for span in spans
    ]
    start = spans[0].start if spans else 0.0
    end = spans[-1].start + spans[-1].seconds if spans else 0.0
    peak = max((max(p, f) for _, p, f in rates), default=0.0)
    scale = (HEIGHT - 10) / peak if peak > 0 else 0.0

    length = (end - start) or 1.0

    def points(index: int) -> str:
        return " ".join(
            f"{(rate[0] - start) / length * WIDTH:.1f},{HEIGHT - 2 - rate[index] * scale:.1f}"
            for rate in rates
        )

    return Throughput(points(1), points(2), peak, start, end)


@dataclass(frozen=True)
class Bar:
    """One histogram bucket: its label, count and bar length (0-100)."""

    label: str
    count: int
    length: float


def histogram(buckets: Sequence[int]) -> list[Bar]:
    """The buckets from the first to the last one that counted anything (none: empty)."""
    used = [slot for slot, count in enumerate(buckets) if count]
    if not used:
        return []
    peak = max(buckets)
    return [
        Bar(bucket_label(slot), buckets[slot], 100.0 * buckets[slot] / peak)
        for slot in range(used[0], used[-1] + 1)
    ]
