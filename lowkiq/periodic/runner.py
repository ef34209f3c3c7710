"""The thread of a ``lowkiq worker`` process that enqueues the jobs of the schedules.

Every process runs it, with every schedule in force: ``settings.schedules`` with
what was changed at run time (:mod:`lowkiq.periodic.control`), read from Redis when
the process's coordinator says the run-time configuration moved (a change nudges every
process; the coordinator also reads it every 30 s) and when a tick is refused as
passed under an older definition.  At each tick each process asks
Redis to pass the tick (:func:`lowkiq.storage.schedules.pass_ticks`), the
first one passes it and enqueues its job in the same script, and the others
learn that it was passed.  So a tick is enqueued once however many processes
run, and on time as long as one of them runs; no process is special, and none
waits for a lease to expire.  Times are milliseconds on Redis's clock,
estimated here from the offset seen in the replies.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from dataclasses import dataclass, field

import redis

from lowkiq.clients.connection import Client
from lowkiq.clients.retry import Backoff, Retries
from lowkiq.errors import LowkiqError
from lowkiq.periodic import ticks
from lowkiq.periodic.overrides import Override, in_force
from lowkiq.periodic.schedule import Schedule, check_schedules
from lowkiq.settings import Settings
from lowkiq.storage import schedules as store
from lowkiq.storage.queue import Queue

log = logging.getLogger("lowkiq.periodic")

#: Longest wait, seconds, before the thread looks at the clock again.
MAX_WAIT = 1.0
#: Longest wait, seconds, after an error, doubling from RETRY_WAIT.
RETRY_WAIT, RETRY_CAP = 0.1, 5.0


@dataclass
class _Entry:
    """One schedule as this process follows it."""

    schedule: Schedule
    queue: Queue
    #: The revision of the definition it follows (0: settings.schedules, unchanged).
    rev: int = 0
    #: The last passed tick this process knows of; ``None`` before the first look.
    last: int | None = None
    looked: bool = False
    #: When (ms, Redis's clock) to look again.
    due_at: int = 0
    #: Its looks that failed in a row, and the wait before the next.
    retries: Retries = field(init=False)

    def __post_init__(self) -> None:
        name = f"schedule {self.schedule.id!r}"
        self.retries = Retries(name, log, Backoff(RETRY_WAIT, RETRY_CAP))


class ScheduleRunner:
    """Passes the ticks of the schedules in force and enqueues their jobs, on a thread of
    its own between :meth:`start` and :meth:`stop`."""

    def __init__(self, client: Client, config: Settings) -> None:
        check_schedules(config.schedules, config.workers, config.dump_payload)
        self.config = config
        self.client = client
        self.entries = [
            _Entry(schedule, schedule.worker.queue(client, config)) for schedule in config.schedules
        ]
        #: The version of the run-time changes read last (``None``: not read yet).
        self.version: int | None = None
        #: Why each run-time schedule this process cannot follow is skipped (logged once).
        self.skipped: dict[str, str] = {}
        #: This process in the schedules' logs.
        self.name = f"{socket.gethostname()}:{os.getpid()}"
        #: Redis's clock minus this process's, ms.
        self.offset_ms = 0.0
        self._stop = threading.Event()
        # Set when the run-time changes must be read (first at the start), and to end a
        # wait early.
        self._changed = threading.Event()
        self._changed.set()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def now_ms(self) -> int:
        """Redis's clock as this process estimates it, ms."""
        return int(time.time() * 1000 + self.offset_ms)

    def start(self) -> None:
        """Run :meth:`run` on a daemon thread."""
        self._thread = threading.Thread(target=self.run, name="lowkiq-schedules", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread and wait for it (a tick being passed is passed or not, whole)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join()

    def notify(self) -> None:
        """The run-time configuration may have changed: read the schedules' changes now
        (a reader of :class:`lowkiq.ownership.watchers.ConfigWatcher`)."""
        self._changed.set()
        self._wake.set()

    def run(self) -> None:
        """Pass due ticks until :meth:`stop`."""
        while not self._stop.is_set():
            self._wake.clear()
            if self._changed.is_set():
                self._changed.clear()
                self.refresh_logged()
            self.run_due()
            now = self.now_ms()
            wait = min((entry.due_at for entry in self.entries), default=now + 1000) - now
            self._wake.wait(min(MAX_WAIT, max(0.0, wait / 1000)))

    def refresh_logged(self) -> None:
        """:meth:`refresh`; when Redis does not answer, go on with the schedules as they
        were (the next pass reads again)."""
        try:
            self.refresh()
        except redis.RedisError as exc:
            self._changed.set()
            log.warning("could not read the schedules' run-time changes: %s", exc)

    def refresh(self) -> None:
        """Follow the run-time changes of the schedules, when they changed since the last
        read: a schedule whose definition changed starts again from Redis's state (its
        revision's ``last``); a paused or removed one is dropped."""
        version, stored = store.read_overrides(self.client, self.version)
        if stored is None:
            return
        entries = {name: Override.from_json(e.rev, e.document) for name, e in stored.items()}
        merged = in_force(self.config.schedules, entries, self.config.workers)
        for name, why in merged.skipped.items():
            if self.skipped.get(name) != why:
                log.info("schedule %r is not run by this process: %s", name, why)
        self.skipped = merged.skipped
        kept = {(entry.schedule.id, entry.rev): entry for entry in self.entries}
        following = []
        for defined in merged.schedules.values():
            if not defined.ticking:
                continue
            entry = kept.pop((defined.schedule.id, defined.rev), None)
            if entry is None:
                schedule = defined.schedule
                queue = schedule.worker.queue(self.client, self.config)
                entry = _Entry(schedule, queue, defined.rev)
                if defined.rev:
                    log.info(
                        "schedule %r: now %s (changed at run time)",
                        schedule.id,
                        schedule.describe(),
                    )
            following.append(entry)
        followed = {entry.schedule.id for entry in following}
        for name, _ in kept:
            if name not in followed:
                log.info("schedule %r: paused or removed at run time", name)
        self.entries = following
        self.version = version

    def run_due(self) -> None:
        """Look at every schedule whose time has come."""
        for entry in self.entries:
            if entry.due_at <= self.now_ms() and not self._stop.is_set():
                self._look_logged(entry)

    def _look_logged(self, entry: _Entry) -> None:
        try:
            self._look(entry)
        except (redis.RedisError, LowkiqError) as exc:
            self._failed(entry, exc, f"{type(exc).__name__}: {exc}")
        except Exception as exc:  # noqa: BLE001 - e.g. a payload function that raised
            log.exception("schedule %r: could not enqueue", entry.schedule.id)
            self._failed(entry, exc, None)
        else:
            entry.retries.succeeded()

    def _failed(self, entry: _Entry, exc: BaseException, message: str | None) -> None:
        """A look failed (``message``: what to log; ``None``: logged already): look again
        after the retry policy's wait."""
        wait = entry.retries.failed(exc, message, logged=message is None)
        entry.due_at = self.now_ms() + int(wait * 1000)

    def _measure_offset(self, queue: Queue) -> None:
        """Learn Redis's clock before the first look (a new schedule starts at its now)."""
        sent = time.time() * 1000
        seconds, micros = queue.client.time()
        self.offset_ms = seconds * 1000 + micros / 1000 - (sent + time.time() * 1000) / 2

    def _look(self, entry: _Entry) -> None:
        """Pass the schedule's due ticks (or learn who did), then wait for the next one."""
        schedule = entry.schedule
        if not entry.looked:
            self._measure_offset(entry.queue)
            entry.last = store.read_state(entry.queue, schedule.id).last
            entry.looked = True
        while True:
            step = ticks.step(schedule, entry.last, self.now_ms())
            if step is None:
                break
            dump = self.config.dump_payload
            jobs = []
            for tick in step.enqueue:
                payload = dump(schedule.payload_at(schedule.tick_time(tick)))
                jobs.append((tick, payload.encode() if isinstance(payload, str) else payload))
            sent = time.time() * 1000
            reply = store.pass_ticks(
                entry.queue, schedule.id, entry.last, step.last, jobs, self.name, entry.rev
            )
            self.offset_ms = reply.now_ms - (sent + time.time() * 1000) / 2
            if reply.status == store.NOT_DUE:
                entry.due_at = step.last
                return
            if reply.status == store.STALE:
                # Its definition changed at run time: read the change before looking again.
                self.version = None
                self._changed.set()
                entry.due_at = self.now_ms() + int(RETRY_WAIT * 1000)
                return
            if reply.status == store.DONE:
                entry.last = step.last
                if jobs:
                    log.debug("schedule %r: enqueued %d tick(s)", schedule.id, len(jobs))
            else:
                entry.last = reply.last
        anchor = self.now_ms() if entry.last is None else entry.last
        entry.due_at = ticks.next_tick(schedule, anchor)
