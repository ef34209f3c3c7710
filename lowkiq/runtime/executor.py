"""The executor: a pool of threads that perform batches, and make no Redis call but
the dispatcher's wait lent to one of them (below).

The dispatcher (:mod:`lowkiq.runtime.dispatcher`) hands the pool the batches of one
pop of one shard as a :class:`Work`; any free thread takes the next one, performs its
batches one after the other (:func:`lowkiq.runtime.performing.perform`), and
hands it back with what each did.  A thread that finds the shard's lease lost or
lapsed before a batch leaves that batch and the rest unperformed (:attr:`Work.unrun`):
the dispatcher puts them back into the queue.  A work no thread has taken yet the
dispatcher may take back (:meth:`Work.claim`) when its shard is given up or the process
stops.  So a long ``perform`` holds one thread and its own shard, never the others.

An idle process's wait for its next job is lent to an idle thread (:meth:`Executor.lend`):
the thread whose ``BLPOP`` returned performs the job that woke it, as a Sidekiq
processor does, instead of waking the dispatcher and then another thread for it.  The
dispatcher's thread waits meanwhile: its state is only ever touched by one thread.

A perform past its worker's ``perform_hard_timeout`` is given up (:meth:`Executor.give_up`):
its work goes back to the dispatcher at once (:attr:`Work.stuck`), its thread is left to
itself, and the process stops.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field

from lowkiq.clients.forking import exit_if_forked
from lowkiq.health.heartbeats import Heartbeat, Heartbeats
from lowkiq.perform.coroutines import close_thread_loop
from lowkiq.perform.timeouts import (
    Watched,
    hard_limit_handler,
    stuck_floor,
    stuck_threshold,
    watchdog,
)
from lowkiq.runtime.lifecycle import LOST
from lowkiq.runtime.performing import Outcome, perform
from lowkiq.runtime.shard_handler import ShardHandler
from lowkiq.runtime.waiting import Waiting
from lowkiq.storage.processing import PoppedJob
from lowkiq.telemetry.recorder import NO_RECORDER, BatchRecorder, Recorder

log = logging.getLogger("lowkiq.executor")

#: Seconds between two heartbeat stamps of an idle thread.
IDLE_STAMP = 1.0
#: Seconds the dispatcher waits for an idle thread to take its wait (:meth:`Executor.lend`)
#: before it waits itself (every thread is in a call of the user's code).
LOAN_PICKUP = 0.05


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
    #: Its perform ran past ``perform_hard_timeout`` and was given up while its thread
    #: still runs it: the batch failed, the rest is unperformed, and the shard must not
    #: be served again (nor its lease released) until the process exits.
    stuck: bool = False
    # Taken by whoever acts on the work first: a thread that performs it, or the
    # dispatcher taking it back before it started (a hand-over, a stop).
    _claim: threading.Lock = field(default_factory=threading.Lock, repr=False)
    # Guards the batch being performed, the outcomes and the hand-back, between the
    # performing thread and a hard limit giving the work up.
    _state: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _performing: Sequence[PoppedJob] | None = field(default=None, repr=False)
    _handed_back: bool = field(default=False, repr=False)

    @property
    def queue_name(self) -> str:
        """Its shard's queue."""
        return self.handler.queue.name

    @property
    def weight(self) -> float:
        """Its worker's weight (:mod:`lowkiq.runtime.waiting`)."""
        return self.handler.worker.weight

    @property
    def size(self) -> int:
        """How many batches it holds."""
        return len(self.batches)

    def claim(self) -> bool:
        """Take the work: ``True`` for the first caller only."""
        return self._claim.acquire(blocking=False)

    def run(self, recorder: BatchRecorder) -> None:
        """Perform the batches in order (:func:`lowkiq.runtime.performing.perform`), until
        one may not be performed (or the work was given up past a hard limit)."""
        handler = self.handler
        if handler.worker.perform_hard_timeout is not None:
            self._run_guarded(recorder)
            return
        for batch in self.batches:  # (no hard limit: no give_up, nothing to guard)
            if handler.life.state is LOST or handler.stopping or handler.lapsed():
                self.unrun = True
                return
            self.outcomes.append(perform(handler, batch, recorder))

    def _run_guarded(self, recorder: BatchRecorder) -> None:
        """:meth:`run` under a hard limit: the batch being performed and the outcomes are
        guarded from :meth:`give_up`."""
        handler = self.handler
        for batch in self.batches:
            with self._state:
                if self.stuck:
                    return
                if handler.life.state is LOST or handler.stopping or handler.lapsed():
                    self.unrun = True
                    return
                self._performing = batch
            outcome = perform(handler, batch, recorder)
            with self._state:
                if self.stuck:
                    return  # handed back without it
                self._performing = None
                self.outcomes.append(outcome)

    def hand_back(self) -> bool:
        """Mark the work handed back to the dispatcher: ``False`` when it was already
        (given up)."""
        with self._state:
            handed, self._handed_back = self._handed_back, True
            return not handed

    def give_up(self) -> Sequence[PoppedJob] | None:
        """The batch being performed ran past its hard limit: mark the work stuck and
        handed back, the batches after it unperformed, and return that batch (its
        outcome is for the caller to add); ``None`` when no batch is being performed (the
        work was handed back)."""
        with self._state:
            jobs = self._performing
            if self._handed_back or jobs is None:
                return None
            self.stuck = self._handed_back = True
            self._performing = None
            self.unrun = len(self.outcomes) + 1 < len(self.batches)
            return jobs


class Loan:
    """The dispatcher's wait, run on an executor thread (:meth:`Executor.lend`)."""

    def __init__(self, wait: Callable[[], None]) -> None:
        self.wait = wait
        #: The thread running it (``threading.get_ident``), once taken.
        self.thread: int | None = None
        #: The first work the wait submitted: the taking thread performs it.
        self.kept: Work | None = None
        #: What the wait raised, raised again on the dispatcher's thread.
        self.error: BaseException | None = None
        self.taken = threading.Event()
        # Held until the wait returned (a lock: released with no Python frame, on the way
        # to the job that woke the wait).
        self._running = threading.Lock()
        self._running.acquire()
        # Taken by the thread that runs the wait, or by the dispatcher taking it back.
        self._claim = threading.Lock()

    def claim(self) -> bool:
        """Take the loan: ``True`` for the first caller only."""
        return self._claim.acquire(blocking=False)

    def __call__(self) -> Work | None:
        """On the thread that took it: run the wait, let the dispatcher go on, and return
        the work kept for this thread (``None``: none)."""
        self.thread = threading.get_ident()
        self.taken.set()
        try:
            self.wait()
        except BaseException as exc:  # noqa: BLE001 - raised on the dispatcher's thread
            self.error = exc
        finally:
            self._running.release()
        return self.kept

    def wait_returned(self) -> None:
        """Block until the wait returned on the thread that took it."""
        with self._running:
            pass


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
        thread_scope: Callable[[], AbstractContextManager[None]] = nullcontext,
    ) -> None:
        self.size = threads
        self.done = done
        self.heartbeats = heartbeats or Heartbeats()
        # Every thread is listed by the health checks from the start: its heartbeat is
        # made here, not when the dispatcher's thread starts it (the coordinator may have
        # leased shards by then, and /ready reported them beside fewer threads).
        for number in range(threads):
            self.heartbeats.thread(number)
        self.recorder = recorder
        self.fatal = fatal
        # What each thread runs inside (settings.own_connection: perform's client).
        self.thread_scope = thread_scope
        self._work: Waiting[Work] = Waiting()
        self.threads: list[threading.Thread] = []
        #: Works in a thread's hands now.
        self.performing = 0
        self._lock = threading.Lock()
        # The work each thread performs now (by thread number), the threads given up past
        # a hard limit, and the process they perform for (a child forked in perform
        # is another).
        self._works: dict[int, Work] = {}
        self._given_up: set[int] = set()
        self._pid = os.getpid()
        # The wait lent to a thread now (at most one: the dispatcher waits for it).
        self._loan: Loan | None = None

    def start(self) -> None:
        """Start the threads."""
        self._pid = os.getpid()
        for number in range(self.size):
            thread = threading.Thread(
                target=self._run, args=(number,), name=f"lowkiq-{number}", daemon=True
            )
            self.threads.append(thread)
            thread.start()

    def submit(self, work: Work) -> bool:
        """Queue ``work`` for the next free thread (with none: perform it now); ``True``
        when the thread running a lent wait keeps it, to perform it next."""
        if not self.size:
            self._perform_here(work)
            return False
        loan = self._loan
        if loan is not None and loan.kept is None and loan.thread == threading.get_ident():
            loan.kept = work
            return True
        self._work.put_work(work)
        return False

    def lend(self, wait: Callable[[], None]) -> None:
        """Run the dispatcher's ``wait`` on an idle thread, which performs the first work
        the wait submits (:meth:`submit`) once it returned: the job that woke an idle
        process starts on the thread its wake-up woke.  The caller blocks until ``wait``
        returned, and gets what it raised.  With no thread, or none free within
        :data:`LOAN_PICKUP` seconds (each in a call of the user's code), ``wait`` runs on
        the caller's thread."""
        if not self.size or self.performing:
            wait()
            return
        loan = self._loan = Loan(wait)
        try:
            self._work.put_call(loan)
            if not loan.taken.wait(LOAN_PICKUP) and loan.claim():
                wait()  # no thread took it
                return
            loan.wait_returned()
        finally:
            self._loan = None
        if loan.error is not None:
            raise loan.error

    def call(self, call: Callable[[], object]) -> None:
        """Queue a call of the user's code other than ``perform`` (``retries_exhausted``)
        for the next free thread, so that it never holds up the dispatcher; what it
        raises is logged."""
        if not self.size:
            _call_user(call)
            return
        self._work.put_call(call)

    def _perform_here(self, work: Work) -> None:
        """Perform ``work`` on this thread; a ``BaseException`` that is not an
        ``Exception`` is raised once the work is handed back."""
        work.claim()
        try:
            work.run(self._tally(work.queue_name, 0))
        except BaseException as exc:  # noqa: BLE001 - raised again below
            work.fatal = exc
        self.done(work)
        if work.fatal is not None:
            raise work.fatal

    def stop(self) -> None:
        """Let every thread end once the works queued before have run."""
        for _ in self.threads:
            self._work.put_stop()

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the threads to end (at most ``timeout`` seconds in all), but for those
        given up past a hard limit; ``True`` when they did."""
        deadline = None if timeout is None else time.monotonic() + timeout
        waited = [t for n, t in enumerate(self.threads) if n not in self._given_up]
        for thread in waited:
            thread.join(None if deadline is None else max(deadline - time.monotonic(), 0.0))
        return not any(thread.is_alive() for thread in waited)

    def give_up(self, number: int, entry: Watched) -> None:
        """Thread ``number``'s perform ``entry`` ran past its worker's
        ``perform_hard_timeout`` (called on a thread of its own): its work goes back to
        the dispatcher now, that batch failed with
        :class:`~lowkiq.perform.timeouts.PerformHardTimeout`, the thread is left to
        itself, and the process is asked to stop (``fatal``)."""
        with watchdog().while_running(entry) as running:
            # The perform cannot end meanwhile: the batch given up is the one past its limit.
            work = self._works.get(number) if running else None
            jobs = None if work is None else work.give_up()
        if work is None or jobs is None:
            return  # it ended meanwhile
        error = entry.hard_error()
        work.outcomes.append(Outcome(jobs, error, verdict=work.handler.judge(jobs, error)))
        with self._lock:
            self._given_up.add(number)
        log.error(
            "%s ran past %s.perform_hard_timeout (%gs) on thread lowkiq-%d: the batch fails, "
            "the thread is given up, and the process stops (its other batches get "
            "shutdown_timeout to end)",
            entry.describe(),
            entry.worker.__name__,
            entry.hard_timeout or 0,
            number,
        )
        self.done(work)
        self.fatal(error)

    def _run(self, number: int) -> None:
        try:
            with self.thread_scope(), hard_limit_handler(lambda entry: self.give_up(number, entry)):
                self._serve(number)
        finally:
            close_thread_loop()

    def _serve(self, number: int) -> None:
        beat = self.heartbeats.thread(number)
        tallies: dict[str, BatchRecorder] = {}
        while True:
            beat.stamp()
            try:
                work = self._work.take(IDLE_STAMP)
            except queue.Empty:
                continue
            if work is None:
                return
            if isinstance(work, Loan):
                if not work.claim():
                    continue  # the dispatcher waited itself
                kept = work()
                if kept is None:
                    continue
                work = kept
            elif not isinstance(work, Work):
                _call_user(work)
                continue
            if not work.claim():
                continue  # the dispatcher took it back
            work.thread, work.started_at = number, time.time()
            if work.queue_name not in tallies:
                tallies[work.queue_name] = self._tally(work.queue_name, number)
            with self._lock:
                self.performing += 1
                self._works[number] = work
            try:
                self._perform(work, beat, tallies[work.queue_name])
            finally:
                with self._lock:
                    self.performing -= 1
                    del self._works[number]
                if work.hand_back():
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
            exit_if_forked(self._pid, failed=True)
            if not work.stuck:  # a work given up is settled already
                work.fatal = exc
                self.fatal(exc)
            return
        exit_if_forked(self._pid, failed=False)


def _call_user(call: Callable[[], object]) -> None:
    """Run a call of the user's code; what it raises is logged."""
    try:
        call()
    except Exception:
        log.exception("a call on an executor thread raised")
