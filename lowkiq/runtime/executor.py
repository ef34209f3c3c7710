"""The executor: a pool of threads that perform batches and make no Redis call.

The dispatcher (:mod:`lowkiq.runtime.dispatcher`) hands the pool the batches of one
pop of one shard as a :class:`Work`; any free thread takes the next one, performs its
batches one after the other (:meth:`lowkiq.runtime.shard_handler.ShardHandler.perform`), and
hands it back with what each did.  A thread that finds the shard's lease lost or
lapsed before a batch leaves that batch and the rest unperformed (:attr:`Work.unrun`):
the dispatcher puts them back into the queue.  A work no thread has taken yet the
dispatcher may take back (:meth:`Work.claim`) when its shard is given up or the process
stops.  So a long ``perform`` holds one thread and its own shard, never the others.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field

from lowkiq.health.heartbeats import Heartbeat, Heartbeats
from lowkiq.perform.coroutines import close_thread_loop
from lowkiq.perform.timeouts import stuck_floor, stuck_threshold
from lowkiq.runtime.shard_handler import Outcome, ShardHandler
from lowkiq.storage.processing import PoppedJob
from lowkiq.telemetry.recorder import NO_RECORDER, BatchRecorder, Recorder

log = logging.getLogger("lowkiq.executor")


@dataclass(eq=False)
class Work:
    """The batches of one pop of one shard, on their way through the executor."""

    handler: ShardHandler
    batches: list[list[PoppedJob]]
    #: Whether the batch is a suspect (:mod:`lowkiq.runtime.suspects`): it runs alone.
    suspect: bool = False
    #: What each performed batch did, in order.
    outcomes: list[Outcome] = field(default_factory=list)
    #: Whether some batches were left unperformed.
    unrun: bool = False
    #: A ``BaseException`` that is not an ``Exception`` escaped from ``perform``: the
    #: batch stays in processing and the process stops.
    fatal: BaseException | None = None
    #: The executor thread performing it (its number), and since when (``time.time``).
    thread: int | None = None
    started_at: float | None = None
    # Taken by whoever acts on the work first: a thread that performs it, or the
    # dispatcher taking it back before it started (a hand-over, a stop).
    _claim: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def claim(self) -> bool:
        """Take the work: ``True`` for the first caller only."""
        return self._claim.acquire(blocking=False)

    def run(self, recorder: BatchRecorder) -> None:
        """Perform the batches in order, until one may not be performed."""
        handler = self.handler
        for batch in self.batches:
            if handler.lost or handler.stopping or handler.lapsed():
                self.unrun = True
                return
            self.outcomes.append(handler.perform(batch, recorder))


class Executor:
    """``threads`` threads performing :class:`Work`; ``done(work)`` is called on the
    performing thread when a work ends (the dispatcher takes it from there).  With no
    threads, a work is performed when it is submitted, on the submitting thread
    (:func:`lowkiq.testing.drain`: the dispatcher's own code, on the test's thread)."""

    def __init__(
        self,
        threads: int,
        done: Callable[[Work], None],
        heartbeats: Heartbeats | None = None,
        recorder: Recorder | None = None,
        fatal: Callable[[BaseException], None] = lambda exc: None,
        idle_stamp: float = 1.0,
        thread_scope: Callable[[], AbstractContextManager[None]] = nullcontext,
    ) -> None:
        self.size = threads
        self.done = done
        self.heartbeats = heartbeats or Heartbeats()
        self.recorder = recorder
        self.fatal = fatal
        # An idle thread stamps its heartbeat this often (seconds).
        self.idle_stamp = idle_stamp
        # What each thread runs inside (settings.own_connection: perform's client).
        self.thread_scope = thread_scope
        self._work: queue.SimpleQueue[Work | Callable[[], None] | None] = queue.SimpleQueue()
        self.threads: list[threading.Thread] = []
        #: Works in a thread's hands now.
        self.performing = 0
        self._lock = threading.Lock()

    def start(self) -> None:
        """Start the threads."""
        for number in range(self.size):
            thread = threading.Thread(
                target=self._run, args=(number,), name=f"lowkiq-{number}", daemon=True
            )
            self.threads.append(thread)
            thread.start()

    def submit(self, work: Work) -> None:
        """Queue ``work`` for the next free thread (with none: perform it now)."""
        if not self.size:
            self._perform_here(work)
            return
        self._work.put(work)

    def call(self, call: Callable[[], None]) -> None:
        """Queue a call of the user's code other than ``perform`` (``retries_exhausted``)
        for the next free thread, so that it never holds up the dispatcher; what it
        raises is logged."""
        if not self.size:
            _call_user(call)
            return
        self._work.put(call)

    def _perform_here(self, work: Work) -> None:
        """Perform ``work`` on this thread; a ``BaseException`` that is not an
        ``Exception`` is raised once the work is handed back."""
        work.claim()
        try:
            work.run(self._tally(work.handler.queue.name, 0))
        except BaseException as exc:  # noqa: BLE001 - raised again below
            work.fatal = exc
        self.done(work)
        if work.fatal is not None:
            raise work.fatal

    def stop(self) -> None:
        """Let every thread end once the works queued before have run."""
        for _ in self.threads:
            self._work.put(None)

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the threads to end (at most ``timeout`` seconds in all); ``True`` when
        they did."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for thread in self.threads:
            thread.join(None if deadline is None else max(deadline - time.monotonic(), 0.0))
        return not any(thread.is_alive() for thread in self.threads)

    def _run(self, number: int) -> None:
        try:
            with self.thread_scope():
                self._serve(number)
        finally:
            close_thread_loop()

    def _serve(self, number: int) -> None:
        beat = self.heartbeats.thread(number)
        tallies: dict[str, BatchRecorder] = {}
        while True:
            beat.stamp()
            try:
                work = self._work.get(timeout=self.idle_stamp)
            except queue.Empty:
                continue
            if work is None:
                return
            if not isinstance(work, Work):
                _call_user(work)
                continue
            if not work.claim():
                continue  # the dispatcher took it back
            work.thread, work.started_at = number, time.time()
            name = work.handler.queue.name
            tally = tallies.get(name)
            if tally is None:
                tally = tallies[name] = self._tally(name, number)
            with self._lock:
                self.performing += 1
            try:
                self._perform(work, beat, tally)
            finally:
                with self._lock:
                    self.performing -= 1
                self.done(work)
            if work.fatal is not None:
                return

    def _tally(self, queue_name: str, number: int) -> BatchRecorder:
        if self.recorder is None or queue_name not in self.recorder.queue_names:
            return NO_RECORDER
        return self.recorder.for_queue(queue_name, number)

    def _perform(self, work: Work, beat: Heartbeat, tally: BatchRecorder) -> None:
        try:
            worker = work.handler.worker
            limit, floor = stuck_threshold(worker), stuck_floor(worker)
            with beat.performing_batch(work.handler.name, limit, floor):
                work.run(tally)
        except BaseException as exc:  # noqa: BLE001 - not an Exception: the process stops
            work.fatal = exc
            self.fatal(exc)


def _call_user(call: Callable[[], None]) -> None:
    """Run a call of the user's code; what it raises is logged."""
    try:
        call()
    except Exception:
        log.exception("a call on an executor thread raised")
