"""One processing thread's counts by period (a minute, a second), and the part of each
period already written to Redis.

Only the counting thread adds to a period's counts; the flush thread reads them
(:meth:`CountsByPeriod.unwritten`) and records what it wrote
(:meth:`CountsByPeriod.written`).  Counts only grow, so the counting never
waits: a lock guards only the adding and forgetting of periods.
"""

from __future__ import annotations

import threading
from collections.abc import Collection


class CountsByPeriod:
    """Counts lists of ``size`` numbers by period of ``length`` seconds (period ``n`` runs
    from ``n * length`` to ``(n + 1) * length``, unix time).

    ``micro``: the positions summed in seconds and written in microseconds.  A period is
    forgotten once written and ended more than ``keep`` seconds ago (a thread that read
    the clock just before it ended may still add to it).
    """

    __slots__ = ("length", "size", "_micro", "_keep", "_counts", "_written", "_lock")

    def __init__(self, length: int, size: int, keep: float, micro: Collection[int] = ()) -> None:
        self.length = length
        self.size = size
        self._micro = frozenset(micro)
        self._keep = keep
        # period -> counts since the tally began; period -> the part already written.
        self._counts: dict[int, list[float]] = {}
        self._written: dict[int, list[int]] = {}
        self._lock = threading.Lock()

    def row(self, period: int) -> list[float]:
        """The counts of ``period``, to add to (made when new): the counting thread asks
        for it when the clock enters the period."""
        with self._lock:
            row = self._counts.get(period)
            if row is None:
                row = self._counts[period] = [0.0] * self.size
            return row

    def unwritten(self) -> dict[int, list[int]]:
        """By period, what was counted and not written yet; see :meth:`written`."""
        result = {}
        with self._lock:
            rows = list(self._counts.items())
        micro = self._micro
        for period, row in rows:
            total = [round(v * 1e6) if p in micro else int(v) for p, v in enumerate(row)]
            done = self._written.get(period)
            delta = total if done is None else [t - d for t, d in zip(total, done, strict=True)]
            if any(delta):
                result[period] = delta
        return result

    def written(self, periods: dict[int, list[int]], now: float) -> None:
        """``periods`` (from :meth:`unwritten`) are stored; forget periods long past."""
        for period, delta in periods.items():
            done = self._written.get(period)
            self._written[period] = (
                delta if done is None else [d + x for d, x in zip(done, delta, strict=True)]
            )
        oldest = int((now - self._keep) // self.length)
        with self._lock:  # the counting thread may be adding a period
            for period in [p for p in self._counts if p < oldest]:
                if period not in periods:  # fully written by an earlier flush
                    del self._counts[period]
                    self._written.pop(period, None)

    def drop_before(self, period: int) -> None:
        """Forget the periods before ``period``, written or not: counts no longer worth
        writing (kept while Redis was out of reach, they would grow without end)."""
        with self._lock:
            for old in [p for p in self._counts if p < period]:
                del self._counts[old]
                self._written.pop(old, None)

    def __len__(self) -> int:
        """How many periods are held."""
        return len(self._counts)
