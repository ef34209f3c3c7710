"""The live processed/failed chart's data: jobs per second between the page's samples.

The page keeps the samples (``time:processed:failed`` totals) in a hidden
field that every refresh sends back; the server appends the current totals
and charts the rates between consecutive samples (:func:`build_chart`).  No state on
the server, so it works the same across gunicorn workers.  A page opened
afresh starts from what the workers stored over the last :data:`SEED_MINUTES`
minutes (:func:`stored_samples`): second by second where the per-second counts
are kept (:mod:`lowkiq.telemetry.recent`), so a burst reads at its real rate,
else minute by minute; the steps that change least are joined until at most
:data:`SEED_STEPS` are left (:func:`seed_samples`).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import lowkiq
from lowkiq import Counts, History
from lowkiq.settings import Settings
from lowkiq.telemetry import history, recent
from lowkiq.telemetry.recent import SecondCounts
from lowkiq.telemetry.recorder import FLUSH_INTERVAL
from lowkiq_web.listing import BadParameter
from lowkiq_web.rates import Interval, Rates

#: Samples kept in the page (one per refresh, plus the seeded steps).
MAX_SAMPLES = 60
#: Minutes of stored history a fresh page's chart starts from: as long as the
#: per-second counts are kept.
SEED_MINUTES = recent.KEPT_MINUTES
#: The most steps a fresh page's chart starts with (the hidden field stays short).
SEED_STEPS = 40
#: The last seconds, which a worker process may not have written yet (it writes every
#: few seconds): one step, so that what is missing is spread over it.
PENDING_SECONDS = math.ceil(FLUSH_INTERVAL)


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
class Step:
    """Jobs processed and failed from ``start`` to ``end`` (unix times)."""

    start: float
    end: float
    processed: int
    failed: int

    @property
    def idle(self) -> bool:
        """Whether no job was counted in it."""
        return not (self.processed or self.failed)

    def joined(self, later: Step) -> Step:
        """This step and the one right after it as one step."""
        return Step(
            self.start, later.end, self.processed + later.processed, self.failed + later.failed
        )


def stored_samples(now: Sample, config: Settings = lowkiq.settings) -> list[Sample]:
    """A fresh page's samples, ending with ``now``: from what every worker of ``config``
    stored over the last :data:`SEED_MINUTES` minutes (two round trips)."""
    queues = {worker.__name__: worker.queue_name for worker in config.workers}
    if not queues:
        return [now]
    client = config.client()
    stored = history.read(client, queues, SEED_MINUTES, now.at)
    last = int(now.at // 60)
    seconds = recent.read(client, list(queues.values()), last - SEED_MINUTES + 1, last)
    return seed_samples(now, History.merged(list(stored.values())).minutes, seconds)


def seed_samples(
    now: Sample,
    minutes: Mapping[int, Counts],
    seconds: Mapping[int, Mapping[int, SecondCounts]] | None = None,
) -> list[Sample]:
    """Samples at the start of each step since the first stored minute, ending with ``now``.

    ``minutes`` are the stored counts of every worker together (``unix time // 60`` ->
    counts), ``seconds`` their per-second counts (minute -> unix second -> counts): a
    minute that has them is a step per second, else one step.  Each sample's totals are
    ``now``'s minus what was performed after it, so the rate between two samples is
    what was stored between them.  Nothing stored: just ``now``.
    """
    steps = simplified(stored_steps(now.at, minutes, seconds or {}), SEED_STEPS)
    processed, failed = now.processed, now.failed
    samples = [now]
    for step in reversed(steps):
        processed -= step.processed
        failed -= step.failed
        samples.append(Sample(step.start, processed, failed))
    return samples[::-1]


def stored_steps(
    end: float, minutes: Mapping[int, Counts], seconds: Mapping[int, Mapping[int, SecondCounts]]
) -> list[Step]:
    """Consecutive steps from the first minute with stored counts to ``end`` (unix time):
    a step per second of a minute with per-second counts, else per minute; idle
    neighbours joined, and the last :data:`PENDING_SECONDS` seconds one step."""
    stored = set(minutes) | set(seconds)
    if not stored:
        return []
    pending = math.floor(end) - PENDING_SECONDS
    steps: list[Step] = []
    for minute in range(min(stored), int(end // 60) + 1):
        by_second = seconds.get(minute)
        if by_second is None:
            counts = minutes.get(minute, Counts())
            parts = [Step(minute * 60, minute * 60 + 60, counts.processed_jobs, counts.failed_jobs)]
        else:
            parts = [
                Step(second, second + 1, count.processed, count.failed)
                for second in range(minute * 60, minute * 60 + 60)
                for count in [by_second.get(second, SecondCounts())]
            ]
        for step in parts:
            last = steps[-1] if steps else None
            if last is None:
                steps.append(step)
            elif step.start >= pending:  # counts after ``end`` (a clock ahead) too
                if last.start >= pending:
                    steps[-1] = last.joined(step)
                else:
                    steps.append(step)
            elif last.idle and step.idle:
                steps[-1] = last.joined(step)
            else:
                steps.append(step)
    if steps:  # the last step ends now
        last = steps[-1]
        steps[-1] = Step(last.start, max(end, last.start), last.processed, last.failed)
    return steps


def simplified(steps: Sequence[Step], limit: int) -> list[Step]:
    """``steps`` with neighbours of the same rate joined, then those whose rates differ
    least (by the jobs the joined step would misplace) until at most ``limit`` are left:
    a burst stays a step of its own while a steady stretch becomes one."""
    steps = list(steps)
    count = len(steps)
    following = [*range(1, count), -1]
    preceding = list(range(-1, count - 1))
    version = [0] * count
    alive = [True] * count
    heap = [(_misplaced(steps[i], steps[i + 1]), i, 0) for i in range(count - 1)]
    heapq.heapify(heap)
    while heap:
        cost, i, seen = heap[0]
        if not alive[i] or seen != version[i] or following[i] < 0:
            heapq.heappop(heap)
            continue
        if cost > 0 and count <= limit:
            break
        heapq.heappop(heap)
        j = following[i]
        steps[i] = steps[i].joined(steps[j])
        alive[j] = False
        following[i] = following[j]
        if following[j] >= 0:
            preceding[following[j]] = i
        count -= 1
        for k in (i, preceding[i]):
            if k >= 0 and following[k] >= 0:
                version[k] += 1
                heapq.heappush(heap, (_misplaced(steps[k], steps[following[k]]), k, version[k]))
    return [step for step, kept in zip(steps, alive, strict=True) if kept]


def _misplaced(a: Step, b: Step) -> float:
    """The jobs that joining two consecutive steps would draw in the wrong one: each
    series' |rate difference| weighted by the steps' lengths."""
    da, db = a.end - a.start, b.end - b.start
    if da <= 0 or db <= 0:
        return 0.0
    return (
        2
        * (abs(a.processed * db - b.processed * da) + abs(a.failed * db - b.failed * da))
        / (da + db)
    )


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
