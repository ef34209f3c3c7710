"""Per-process aggregation of what the processing threads did, flushed to Redis every few seconds.

The hot path is :meth:`WorkerTally.performed`, called once per batch by the
shard handler: a few additions to the current minute's and the current second's
lists of counts, with no lock (a lock guards only the adding and forgetting of
minutes and seconds). Each processing thread has a tally of its own per worker
(only it writes there), and the counts only grow, so the :class:`Recorder`'s
thread never stops them: every :data:`FLUSH_INTERVAL` seconds it reads each
minute's and second's counts, adds what grew since its last flush to Redis (the
minutes in one round trip, :func:`lowkiq.telemetry.store.add`, the seconds in
another, :func:`lowkiq.telemetry.recent.add`), and remembers what it wrote. A
count read half-way through a batch is completed by the next flush; counts it
could not write are written by the next one (seconds older than the kept few
minutes are dropped instead); the last ones are written when the process stops.
A process that dies without stopping loses at most its last interval.
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
from lowkiq.telemetry import group_waits, recent, store
from lowkiq.telemetry.counts import (
    BUCKETS,
    DISCARDED_JOBS,
    DURATION_BUCKETS,
    DURATION_US,
    FAILED_JOBS,
    FAILURES,
    JOBS,
    PAYLOADS,
    PERFORMS,
    SIZE,
    SLOTS,
    WAIT_BUCKETS,
    WAIT_US,
    YIELDED_JOBS,
)
from lowkiq.telemetry.periods import CountsByPeriod
from lowkiq.telemetry.recent import FAILED as FAILED_IN_SECOND
from lowkiq.telemetry.recent import PROCESSED as PROCESSED_IN_SECOND

log = logging.getLogger("lowkiq.telemetry")

#: Seconds between two flushes of a process's counts to Redis.
FLUSH_INTERVAL = 5.0
#: Minutes a tally keeps a past minute's counts after writing them all: a
#: thread that read the clock just before a minute ended may still add to it.
KEEP_MINUTES = 2
#: The same for a past second, in seconds.
KEEP_SECONDS = 10


class BatchRecorder:
    """Where a shard handler reports each batch it performed; this one keeps nothing."""

    __slots__ = ()

    def performed(
        self,
        jobs: Sequence[PoppedJob],
        started: float,
        failed: int = 0,
        discarded: int = 0,
        yielded: int = 0,
    ) -> None:
        """``perform`` ran ``jobs`` from ``started`` (unix time) until now, and of them
        ``failed`` failed (retried or killed), ``discarded`` were dropped
        (``lowkiq.Discard``) and ``yielded`` gave payloads back (``yield_rest``); the
        rest succeeded.  These are the jobs Redis's counters count."""


#: The recorder of handlers made without one (tests, tools).
NO_RECORDER = BatchRecorder()


class WorkerTally(BatchRecorder):
    """One worker's counts on one thread of this process, by minute (the history) and by
    second (the last minutes, :mod:`~lowkiq.telemetry.recent`).

    Only that thread calls :meth:`performed`; the flush thread reads :attr:`minutes`
    and :attr:`seconds`.  Perform time and queue wait are summed in seconds here and
    stored in microseconds.
    """

    __slots__ = (
        "minutes",
        "seconds",
        "groups",
        "_minute",
        "_minute_start",
        "_minute_end",
        "_second",
        "_second_start",
        "_second_end",
        "_clock",
    )

    def __init__(self, clock: Callable[[], float] = time.time, top_groups: int = 0) -> None:
        #: The queue waits by group (:mod:`~lowkiq.telemetry.group_waits`); ``None``
        #: when ``top_groups`` (``settings.metrics_top_groups``) is 0.
        self.groups = group_waits.GroupWaits(top_groups) if top_groups else None
        #: Counts lists of :mod:`~lowkiq.telemetry.counts`, by minute.
        self.minutes = CountsByPeriod(60, SIZE, KEEP_MINUTES * 60, micro=(DURATION_US, WAIT_US))
        #: Counts lists of :mod:`~lowkiq.telemetry.recent`, by second.
        self.seconds = CountsByPeriod(1, recent.SIZE, KEEP_SECONDS)
        # The current minute's and second's counts, and the unix times each spans.
        self._minute: list[float] = []
        self._minute_start = self._minute_end = 0.0
        self._second: list[float] = []
        self._second_start = self._second_end = 0.0
        self._clock = clock

    def performed(
        self,
        jobs: Sequence[PoppedJob],
        started: float,
        failed: int = 0,
        discarded: int = 0,
        yielded: int = 0,
    ) -> None:
        """Count one batch in the current minute (perform time, jobs as settled, payloads,
        queue waits) and second (jobs processed and failed)."""
        now = self._clock()
        if not self._second_start <= now < self._second_end:
            self._enter(now)
        row = self._minute
        elapsed = now - started
        row[PERFORMS] += 1
        row[DURATION_US] += elapsed
        row[DURATION_BUCKETS + bisect_left(BUCKETS, elapsed)] += 1
        count = len(jobs)
        row[JOBS] += count
        self._second[PROCESSED_IN_SECOND] += count - failed - discarded - yielded
        if count == 1:  # most batches (no loop, no sums)
            job = jobs[0]
            # Jobs are popped when due, before ``started`` (a wait below 0 is another
            # host's clock: counted as 0; not max(): a call).
            wait = started - job.perform_in
            if wait < 0.0:
                wait = 0.0
            slot = bisect_left(BUCKETS, wait)
            row[WAIT_BUCKETS + slot] += 1
            row[WAIT_US] += wait
            row[PAYLOADS] += len(job.payloads)
            groups = self.groups
            if groups is not None:  # the same wait in its group's histogram
                group = job.group
                if group is None:  # a shard whose jobs have no group: the group ""
                    group = ""
                counts = groups.counts().get(group) or groups.histogram(group)
                counts[slot] += 1
                counts[SLOTS] += wait
        else:
            self._waited(row, jobs, started)
        if failed:
            row[FAILURES] += 1
            row[FAILED_JOBS] += failed
            self._second[FAILED_IN_SECOND] += failed
        if discarded:
            row[DISCARDED_JOBS] += discarded
        if yielded:
            row[YIELDED_JOBS] += yielded

    def _enter(self, now: float) -> None:
        """The clock left the current second: count in ``now``'s second, and in its minute
        when that is another too (a second lies inside the minute found with it, so
        :meth:`performed` checks the second alone)."""
        if not self._minute_start <= now < self._minute_end:
            minute = int(now // 60)
            self._minute = self.minutes.row(minute)
            self._minute_start, self._minute_end = minute * 60.0, minute * 60.0 + 60.0
        second = int(now)
        self._second = self.seconds.row(second)
        self._second_start, self._second_end = float(second), second + 1.0

    def _waited(self, row: list[float], jobs: Sequence[PoppedJob], started: float) -> None:
        """Count the queue waits and payloads of ``jobs``, in ``row`` and by group."""
        groups = self.groups
        by_group = groups.counts() if groups is not None else {}
        waited = plain_waited = 0.0
        payloads = 0
        plain: list[float] | None = None  # the group "" histogram, once a job is of it
        for job in jobs:
            wait = started - job.perform_in
            if wait < 0.0:  # (not max(): a call per job)
                wait = 0.0
            slot = WAIT_BUCKETS + bisect_left(BUCKETS, wait)
            row[slot] += 1
            waited += wait
            payloads += len(job.payloads)
            if groups is not None:  # the same wait in its group's histogram
                group = job.group
                if group is not None:
                    counts = by_group.get(group) or groups.histogram(group)
                    counts[SLOTS] += wait
                else:  # a shard whose jobs have no group: the group ""
                    if plain is None:
                        plain = by_group.get("") or groups.histogram("")
                    counts = plain
                    plain_waited += wait
                counts[slot - WAIT_BUCKETS] += 1
        row[WAIT_US] += waited
        row[PAYLOADS] += payloads
        if plain is not None:
            plain[SLOTS] += plain_waited


class Recorder:
    """A process's tallies, one per worker and processing thread (so threads never wait
    for each other's counting), and the thread that flushes them to Redis."""

    def __init__(
        self,
        client: Client,
        queue_names: Iterable[str],
        interval: float = FLUSH_INTERVAL,
        clock: Callable[[], float] = time.time,
        top_groups: int | None = None,
    ) -> None:
        """``top_groups``: the groups of each worker whose waits get a histogram of their
        own (default ``settings.metrics_top_groups``; 0: none by group)."""
        if top_groups is None:
            from lowkiq.settings import settings

            top_groups = settings.metrics_top_groups
        self.top_groups = top_groups
        self._stopped = False
        #: Waits by group taken from the tallies and not written yet (a Redis error).
        self._group_waits_left: dict[str, dict[str, group_waits.Histogram]] = {}
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
                tally = self.tallies[(queue_name, thread)] = WorkerTally(
                    self.clock, self.top_groups
                )
            return tally

    def flush(self) -> int:
        """Write what every tally counted since the last flush: the minutes in one round
        trip, then the seconds in another; returns the (queue, minute) rows written.  On
        a Redis error what was not written is not marked written (the next flush writes
        it) and the error is raised."""
        with self._lock:
            tallies = list(self.tallies.items())
        seconds = [(name, tally.seconds) for (name, _), tally in tallies]
        oldest = int(self.clock()) - recent.KEPT_MINUTES * 60
        for _, counts in seconds:  # even while Redis is out of reach: memory stays bounded
            counts.drop_before(oldest)
        minutes = [(name, tally.minutes) for (name, _), tally in tallies]
        written = self._write(minutes, lambda rows: store.add(self.client, rows))
        self._write(seconds, lambda rows: recent.add(self.client, rows))
        self._write_group_waits(tallies)
        return written

    def _write_group_waits(self, tallies: list[tuple[tuple[str, int], WorkerTally]]) -> None:
        """Add the waits by group the tallies handed over (all of them once stopped); on a
        Redis error they are written by the next flush."""
        parts: dict[str, list[dict[str, group_waits.Histogram]]] = {
            name: [left] for name, left in self._group_waits_left.items()
        }
        for (name, _), tally in tallies:
            if tally.groups is not None:
                parts.setdefault(name, []).extend(tally.groups.take(self._stopped))
        merged = {name: group_waits.merge(taken) for name, taken in parts.items()}
        self._group_waits_left = {name: groups for name, groups in merged.items() if groups}
        group_waits.add(self.client, self._group_waits_left, self.top_groups)
        self._group_waits_left = {}

    def _write(
        self,
        tallies: list[tuple[str, CountsByPeriod]],
        add: Callable[[dict[tuple[str, int], list[int]]], None],
    ) -> int:
        """Sum what ``tallies`` (queue name, counts) did not write yet by queue and period,
        ``add`` it to Redis and mark it written; returns the rows written."""
        taken = [(name, counts, counts.unwritten()) for name, counts in tallies]
        rows: dict[tuple[str, int], list[int]] = {}
        for name, _, periods in taken:
            for period, values in periods.items():
                row = rows.get((name, period))
                rows[(name, period)] = (
                    values if row is None else [a + b for a, b in zip(row, values, strict=True)]
                )
        add(rows)
        now = self.clock()
        for _, counts, periods in taken:
            counts.written(periods, now)
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
        self._stopped = True  # the processing threads are done: their counts are final
        self._flush_logged()
