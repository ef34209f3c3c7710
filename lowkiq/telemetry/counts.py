"""The counts of one worker over a span of time, and the quantiles read from their histograms.

A span's counts are a flat list of integers (:data:`FIELDS` gives each one's
Redis hash field): cheap to add to on the hot path, and summed field by field
when minutes or processes are combined.  Perform time is counted per batch
(one ``perform`` call), queue wait per job (perform start minus the job's
``perform_in``, never below 0).  Jobs are counted as the worker settled them,
as Redis's counters count them (``Worker.metrics()``): processed, failed (retried
or killed) and discarded; a job that gave payloads back (``yield_rest``) is none
of these until a later run settles it.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

#: Upper bounds, seconds, of the perform-time and queue-wait histogram buckets,
#: from 1 ms to 30 min; a last bucket takes everything longer.  Stored counts
#: are by bucket index: changing these makes the stored history wrong.
BUCKETS: tuple[float, ...] = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
    300.0,
    600.0,
    1800.0,
)
#: Histogram slots: one per bound, and the overflow.
SLOTS = len(BUCKETS) + 1

# Positions in a counts list.
PERFORMS = 0  # perform calls (batches)
FAILURES = 1  # perform calls in which a job failed
JOBS = 2  # jobs handed to perform
FAILED_JOBS = 3  # jobs that failed: retried or killed
DISCARDED_JOBS = 4  # jobs dropped by lowkiq.Discard
YIELDED_JOBS = 5  # jobs that gave payloads back to the queue (yield_rest)
PAYLOADS = 6  # payloads handed to perform
DURATION_US = 7  # perform time, microseconds, summed
WAIT_US = 8  # queue wait, microseconds, summed over jobs
DURATION_BUCKETS = 9  # SLOTS perform-time bucket counts from here
WAIT_BUCKETS = DURATION_BUCKETS + SLOTS  # SLOTS queue-wait bucket counts from here
SIZE = WAIT_BUCKETS + SLOTS

#: The Redis hash field of each position: short, since every minute repeats them.
FIELDS: tuple[str, ...] = (
    "n",
    "f",
    "j",
    "fj",
    "dj",
    "yj",
    "p",
    "t",
    "w",
    *(f"d{i}" for i in range(SLOTS)),
    *(f"w{i}" for i in range(SLOTS)),
)
_POSITION = {name: position for position, name in enumerate(FIELDS)}


def bucket(seconds: float) -> int:
    """The histogram slot of a duration: the first bound it does not exceed."""
    return bisect_left(BUCKETS, seconds)


def quantile(buckets: Sequence[int], q: float) -> float | None:
    """The ``q`` quantile (0 < q < 1) of a histogram, interpolated linearly inside
    its bucket as Prometheus's ``histogram_quantile`` does; ``None`` when empty.
    A quantile in the overflow bucket is reported as the last bound."""
    total = sum(buckets)
    if total == 0:
        return None
    rank = q * total
    seen = 0
    for slot, count in enumerate(buckets):
        if count and seen + count >= rank:
            if slot == len(BUCKETS):
                return BUCKETS[-1]
            low = BUCKETS[slot - 1] if slot else 0.0
            return low + (BUCKETS[slot] - low) * (rank - seen) / count
        seen += count
    return BUCKETS[-1]


@dataclass(frozen=True)
class Counts:
    """What one worker did over a span (a minute, a window, all time)."""

    values: tuple[int, ...] = (0,) * SIZE

    @classmethod
    def from_hash(cls, fields: Mapping[bytes | str, bytes | str | int]) -> Counts:
        """From a stored hash; unknown fields are ignored, missing ones are 0."""
        values = [0] * SIZE
        for name, value in fields.items():
            key = name.decode() if isinstance(name, bytes) else name
            position = _POSITION.get(key)
            if position is not None:
                values[position] = int(value)
        return cls(tuple(values))

    @classmethod
    def total(cls, spans: Iterable[Counts]) -> Counts:
        """The field-by-field sum of several spans."""
        values = [0] * SIZE
        for span in spans:
            for position, value in enumerate(span.values):
                values[position] += value
        return cls(tuple(values))

    @property
    def performs(self) -> int:
        """``perform`` calls (batches)."""
        return self.values[PERFORMS]

    @property
    def failures(self) -> int:
        """``perform`` calls in which a job failed (not those that only discarded)."""
        return self.values[FAILURES]

    @property
    def jobs(self) -> int:
        """Jobs handed to ``perform``, whatever became of them."""
        return self.values[JOBS]

    @property
    def failed_jobs(self) -> int:
        """Jobs that failed: retried or sent to the morgue (every job of a batch whose
        ``perform`` raised, but for ``lowkiq.Discard``; only those ``lowkiq.BatchFailed``
        named); Redis's ``failed``."""
        return self.values[FAILED_JOBS]

    @property
    def discarded_jobs(self) -> int:
        """Jobs ``lowkiq.Discard`` dropped; Redis's ``discarded``."""
        return self.values[DISCARDED_JOBS]

    @property
    def yielded_jobs(self) -> int:
        """Jobs that gave payloads back to the queue (``yield_rest``): not settled yet."""
        return self.values[YIELDED_JOBS]

    @property
    def processed_jobs(self) -> int:
        """Jobs that succeeded (acked); Redis's ``processed``."""
        return self.jobs - self.failed_jobs - self.discarded_jobs - self.yielded_jobs

    @property
    def payloads(self) -> int:
        """Payloads handed to ``perform``."""
        return self.values[PAYLOADS]

    @property
    def payloads_merged(self) -> int:
        """Payloads that rode along with another payload of their id: runs saved by merging."""
        return self.payloads - self.jobs

    @property
    def duration_seconds(self) -> float:
        """Total ``perform`` time, seconds."""
        return self.values[DURATION_US] / 1e6

    @property
    def wait_seconds(self) -> float:
        """Total queue wait of every job, seconds."""
        return self.values[WAIT_US] / 1e6

    @property
    def duration_buckets(self) -> tuple[int, ...]:
        """Perform calls per :data:`BUCKETS` slot (the last: longer than 30 min)."""
        return self.values[DURATION_BUCKETS:WAIT_BUCKETS]

    @property
    def wait_buckets(self) -> tuple[int, ...]:
        """Jobs per queue-wait :data:`BUCKETS` slot (the last: longer than 30 min)."""
        return self.values[WAIT_BUCKETS:SIZE]

    def duration_quantile(self, q: float) -> float | None:
        """The ``q`` quantile of perform time, seconds (``None``: no perform)."""
        return quantile(self.duration_buckets, q)

    def wait_quantile(self, q: float) -> float | None:
        """The ``q`` quantile of queue wait, seconds (``None``: no job)."""
        return quantile(self.wait_buckets, q)

    @property
    def mean_duration(self) -> float | None:
        """Mean perform time, seconds (``None``: no perform)."""
        return self.duration_seconds / self.performs if self.performs else None

    @property
    def mean_wait(self) -> float | None:
        """Mean queue wait, seconds (``None``: no job)."""
        return self.wait_seconds / self.jobs if self.jobs else None
