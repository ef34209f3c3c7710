"""The History and Charts pages' charts: throughput over time (drawn by the chart script)
and histograms."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from lowkiq import Span
from lowkiq.telemetry.counts import BUCKETS
from lowkiq_web.rates import Interval, Rates


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


def throughput(spans: Sequence[Span]) -> Rates:
    """Processed, failed and discarded jobs per minute in each span, across the spans'
    window."""
    intervals = tuple(
        Interval(
            span.start,
            span.start + span.seconds,
            span.counts.processed_jobs * 60 / span.seconds,
            span.counts.failed_jobs * 60 / span.seconds,
            span.counts.discarded_jobs * 60 / span.seconds,
        )
        for span in spans
    )
    start = intervals[0].start if intervals else 0.0
    end = intervals[-1].end if intervals else 0.0
    return Rates(intervals, "min", start, end, with_discarded=True)


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
