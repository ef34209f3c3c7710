"""The live processed/failed chart, drawn server-side as SVG.

The page keeps the samples (``time:processed:failed`` totals) in a hidden
field that every refresh sends back; the server appends the current totals
and draws the rates between consecutive samples.  No state on the server, so
it works the same across gunicorn workers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from lowkiq_web.listing import BadParameter

#: Samples kept in the page (one per refresh).
MAX_SAMPLES = 60
WIDTH = 600
HEIGHT = 120


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


@dataclass(frozen=True)
class Chart:
    """What the template draws: two polylines, the peak rate and the latest rates."""

    processed_points: str
    failed_points: str
    peak: float
    processed_rate: float
    failed_rate: float
    width: int = WIDTH
    height: int = HEIGHT


def build_chart(samples: list[Sample]) -> Chart:
    """Per-second rates between consecutive samples, scaled into the SVG box."""
    rates: list[tuple[float, float]] = []
    for before, after in zip(samples, samples[1:], strict=False):
        elapsed = after.at - before.at
        if elapsed <= 0:
            continue
        # Counters only grow; a reset (FLUSHALL) would give a negative rate.
        rates.append(
            (
                max(0, after.processed - before.processed) / elapsed,
                max(0, after.failed - before.failed) / elapsed,
            )
        )
    peak = max((max(p, f) for p, f in rates), default=0.0)
    scale = (HEIGHT - 10) / peak if peak > 0 else 0.0
    step = WIDTH / max(1, MAX_SAMPLES - 2)
    offset = WIDTH - step * max(0, len(rates) - 1)

    def points(index: int) -> str:
        return " ".join(
            f"{offset + n * step:.1f},{HEIGHT - 2 - rate[index] * scale:.1f}"
            for n, rate in enumerate(rates)
        )

    last = rates[-1] if rates else (0.0, 0.0)
    return Chart(points(0), points(1), peak, last[0], last[1])
