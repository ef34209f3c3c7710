"""The live processed/failed chart's data: jobs per second between the page's samples.

The page keeps the samples (``time:processed:failed`` totals) in a hidden
field that every refresh sends back; the server appends the current totals
and charts the rates between consecutive samples (:func:`build_chart`).  No state on
the server, so it works the same across gunicorn workers.  A page opened
afresh starts from the stored metrics history: a sample at every minute
boundary of the last :data:`SEED_MINUTES` minutes (:func:`seed_samples`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from lowkiq import Counts
from lowkiq_web.listing import BadParameter
from lowkiq_web.rates import Interval, Rates

#: Samples kept in the page (one per refresh, plus the seeded minutes).
MAX_SAMPLES = 60
#: Minutes of stored history a fresh page's chart starts from.
SEED_MINUTES = 10


@dataclass(frozen=True)
class Sample:
    """Totals at one moment."""

    at: float
    processed: int
    failed: int

    def encode(self) -> str:
        """``time:processed:failed``."""
        return f"{self.at:.3f}:{self.processed}:{self.failed}"


def parse_history(text: str) -> list[Sample]:
    """Samples from the hidden field; :class:`BadParameter` when it is not ours."""
    samples = []
    for item in filter(None, text.split(",")):
        try:
            at, processed, failed = item.split(":")
            sample = Sample(float(at), int(processed), int(failed))
        except ValueError:
            message = f"history items must be time:processed:failed, got {item!r}"
            raise BadParameter(message) from None
        if not math.isfinite(sample.at):
            raise BadParameter(f"history time must be finite, got {item!r}")
        samples.append(sample)
    return samples[-MAX_SAMPLES:]


def encode_history(samples: list[Sample]) -> str:
    """The hidden field's value."""
    return ",".join(sample.encode() for sample in samples[-MAX_SAMPLES:])


def seed_samples(now: Sample, minutes: Mapping[int, Counts]) -> list[Sample]:
    """Samples at the minute boundaries since the first stored minute, ending with ``now``.

    ``minutes`` are the stored counts of every worker together (``unix time //
    60`` -> counts); each sample's totals are ``now``'s minus what was performed
    after it.  No stored minute: just ``now``.
    """
    if not minutes:
        return [now]
    processed, failed = now.processed, now.failed
    samples = [now]
    for minute in range(int(now.at // 60), min(minutes) - 1, -1):
        counts = minutes.get(minute)
        if counts is not None:
            processed -= counts.processed_jobs
            failed -= counts.failed_jobs
        if minute * 60.0 < now.at:
            samples.append(Sample(minute * 60.0, max(0, processed), max(0, failed)))
    return samples[::-1]


def build_chart(samples: list[Sample], min_window: float = 0.0) -> Rates:
    """Jobs per second between consecutive samples, in a window of the samples' time (at
    least ``min_window`` seconds) ending at the last sample."""
    intervals = []
    for before, after in zip(samples, samples[1:], strict=False):
        elapsed = after.at - before.at
        if elapsed <= 0:
            continue
        # Counters only grow; a reset (FLUSHALL) would give a negative rate.
        processed = max(0, after.processed - before.processed) / elapsed
        failed = max(0, after.failed - before.failed) / elapsed
        intervals.append(Interval(before.at, after.at, processed, failed))
    end = samples[-1].at if samples else 0.0
    window = max(min_window, end - samples[0].at if samples else 0.0)
    return Rates(tuple(intervals), "s", end - window, end)
