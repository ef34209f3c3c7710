"""Per-process aggregation of what the processing threads did, flushed to Redis every few seconds.

The hot path is :meth:`WorkerTally.performed`, called once per batch by the
shard handler: a few additions to the current minute's list of counts, with no
lock (a lock guards only the adding and forgetting of minutes). Each processing
thread has a tally of its own per worker (only it writes there), and the counts
only grow, so the :class:`Recorder`'s thread never stops them: every
:data:`FLUSH_INTERVAL` seconds it reads each minute's counts, adds what grew
since its last flush to Redis in one round trip
(:func:`lowkiq.telemetry.store.add`), and remembers what it wrote. A count read
half-way through a batch is completed by the next flush; counts it could not
write are written by the next one; the last ones are written when the process
stops. A process that dies without stopping loses at most its last interval.
"""

from __future__ import annotations

import logging
import threading
import time
from bisect import bisect_left
from collections.abc import Callable, Iterable, Sequence

import redis

from lowkiq.clients.connection import Client
from lowkiq.storage.processing import PoppedJob
from lowkiq.telemetry import store
from lowkiq.telemetry.counts import (
    BUCKETS,
    DURATION_BUCKETS,
    DURATION_US,
    FAILED_JOBS,
    FAILURES,
    JOBS,
    PAYLOADS,
    PERFORMS,
    SIZE,
    WAIT_BUCKETS,
    WAIT_US,
)

log = logging.getLogger("lowkiq.telemetry")

#: Seconds between two flushes of a process's counts to Redis.
FLUSH_INTERVAL = 5.0
#: Minutes a tally keeps a past minute's counts after writing them all: a
#: thread that read the clock just before a minute ended may still add to it.
KEEP_MINUTES = 2


class BatchRecorder:
    """Where a shard handler reports each batch it performed; this one keeps nothing."""

    __slots__ = ()

    def performed(self, jobs: Sequence[PoppedJob], started: float, failed: bool) -> None:
        """``perform`` ran ``jobs`` from ``started`` (unix time) until now; ``failed``: raised."""


#: The recorder of handlers made without one (tests, tools).
NO_RECORDER = BatchRecorder()


class WorkerTally(BatchRecorder):
    """One worker's counts on one thread of this process, by minute.

    Only that thread calls :meth:`performed`; the flush thread reads the counts
    with :meth:`unwritten` and :meth:`written`.  Perform time and queue wait
    are summed in seconds here and stored in microseconds.
    """

    __slots__ = ("_minutes", "_written", "_row", "_row_start", "_row_end", "_clock", "_lock")

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        # minute -> counts since the tally began; minute -> the part already written.
        self._minutes: dict[int, list[float]] = {}
        self._written: dict[int, list[int]] = {}
        # The current minute's counts, and the unix times the minute spans.
        self._row: list[float] = []
        self._row_start = self._row_end = 0.0
        self._clock = clock
        # Guards adding and removing minutes (once a minute), never the counting itself.
        self._lock = threading.Lock()

    def performed(self, jobs: Sequence[PoppedJob], started: float, failed: bool) -> None:
        """Count one batch in the current minute: perform time, jobs, payloads, queue waits."""
        now = self._clock()
        if not self._row_start <= now < self._row_end:
            self._switch_row(now)
        row = self._row
        elapsed = now - started
        row[PERFORMS] += 1
        row[DURATION_US] += elapsed
        row[DURATION_BUCKETS + bisect_left(BUCKETS, elapsed)] += 1
        # Jobs are popped when due, before ``started``: waits are >= 0 on one clock.
        for job in jobs:
            wait = started - job.perform_in
            row[WAIT_US] += wait
            row[WAIT_BUCKETS + bisect_left(BUCKETS, wait)] += 1
            row[PAYLOADS] += len(job.payloads)
        row[JOBS] += len(jobs)
        if failed:
            row[FAILURES] += 1
            row[FAILED_JOBS] += len(jobs)

    def _switch_row(self, now: float) -> None:
        minute = int(now // 60)
        with self._lock:
            row = self._minutes.get(minute)
            if row is None:
                row = [0.0] * SIZE
                self._minutes[minute] = row
        self._row, self._row_start, self._row_end = row, minute * 60.0, minute * 60.0 + 60.0

    def unwritten(self) -> dict[int, list[int]]:
        """By minute, what was counted and not written yet (times in µs); see :meth:`written`."""
        result = {}
        with self._lock:
            rows = list(self._minutes.items())
        for minute, row in rows:
            total = [
                round(v * 1e6) if p in (DURATION_US, WAIT_US) else int(v) for p, v in enumerate(row)
            ]
            done = self._written.get(minute)
            delta = total if done is None else [t - d for t, d in zip(total, done, strict=True)]
            if any(delta):
                result[minute] = delta
        return result

    def written(self, minutes: dict[int, list[int]], now: float) -> None:
        """``minutes`` (from :meth:`unwritten`) are stored; forget minutes long past."""
        for minute, delta in minutes.items():
            done = self._written.get(minute)
            self._written[minute] = (
                delta if done is None else [d + x for d, x in zip(done, delta, strict=True)]
            )
        oldest = int(now // 60) - KEEP_MINUTES
        with self._lock:  # the counting thread may be adding a minute
            for minute in [m for m in self._minutes if m < oldest]:
                if minute not in minutes:  # fully written by an earlier flush
                    del self._minutes[minute]
                    self._written.pop(minute, None)


class Recorder:
    """A process's tallies, one per worker and processing thread (so threads never wait
    for each other's counting), and the thread that flushes them to Redis."""

    def __init__(
        self,
        client: Client,
        queue_names: Iterable[str],
        interval: float = FLUSH_INTERVAL,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.client = client
        self.interval = interval
        self.queue_names = list(queue_names)
        self.clock = clock
        self.tallies: dict[tuple[str, int], WorkerTally] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failing = False

    def for_queue(self, queue_name: str, thread: int = 0) -> WorkerTally:
        """The tally of ``queue_name`` that processing thread number ``thread`` (and no
        other thread) reports to."""
        if queue_name not in self.queue_names:
            raise KeyError(f"no queue named {queue_name!r} is recorded")
        with self._lock:
            tally = self.tallies.get((queue_name, thread))
            if tally is None:
                tally = self.tallies[(queue_name, thread)] = WorkerTally(self.clock)
            return tally

    def flush(self) -> int:
        """Write what every tally counted since the last flush, in one round trip; returns
        the (queue, minute) rows written.  On a Redis error nothing is marked written
        (the next flush writes it) and the error is raised."""
        with self._lock:
            tallies = list(self.tallies.items())
        taken = [(key[0], tally, tally.unwritten()) for key, tally in tallies]
        rows: dict[tuple[str, int], list[int]] = {}
        for name, _, minutes in taken:
            for minute, values in minutes.items():
                row = rows.get((name, minute))
                rows[(name, minute)] = (
                    values if row is None else [a + b for a, b in zip(row, values, strict=True)]
                )
        store.add(self.client, rows)
        now = self.clock()
        for _, tally, minutes in taken:
            tally.written(minutes, now)
        return len(rows)

    def start(self) -> None:
        """Flush every :attr:`interval` seconds in a daemon thread until :meth:`stop`."""
        self._thread = threading.Thread(target=self._run, name="lowkiq-metrics", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._flush_logged()

    def _flush_logged(self) -> None:
        try:
            self.flush()
        except redis.RedisError as exc:
            if not self._failing:
                log.warning("could not write the metrics history (kept for later): %s", exc)
            self._failing = True
            return
        except Exception:  # a bug here must not stop the flushes, nor the process
            log.exception("writing the metrics history failed")
            return
        if self._failing:
            log.info("metrics history written again")
            self._failing = False

    def stop(self) -> None:
        """Stop the thread and write what is left (a Redis error is logged, not raised)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._flush_logged()
