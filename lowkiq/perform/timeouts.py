"""``Worker.perform_timeout`` and ``Worker.perform_hard_timeout``: the limits on the time
one ``perform`` runs.

Past ``perform_timeout`` (the soft limit) a sync ``perform`` gets :class:`PerformTimeout`
raised in its thread (``PyThreadState_SetAsyncExc``, as Dramatiq's ``TimeLimit`` does),
and again every :data:`REPEAT_EVERY` seconds while it still runs (code that swallowed
one raise meets the next); an ``async def perform`` is cancelled on its thread's event
loop, and again likewise.  Either way the batch fails with :class:`PerformTimeout` under
the retry rules (SPEC §4).  Python raises in a thread only between two bytecodes: a
perform inside one C call (``time.sleep``, a blocking socket read, waiting for a
subprocess) runs on until the call returns.

Past ``perform_hard_timeout`` (the hard limit, above the soft one) the perform's thread
is given up: the callback its executor thread registered (:func:`hard_limit_handler`)
fails the batch with :class:`PerformHardTimeout` and stops the process cleanly (its
other batches get ``shutdown_timeout``); the supervisor, or whatever runs the process,
starts it again.

One :class:`Watchdog` per process, a thread with a heap of deadlines, fires them; it
starts with the first perform of a worker that sets ``perform_timeout`` (a process
whose workers set none pays nothing).  It raises only in a perform still running:
the performing thread takes its deadline back under the same lock, and clears a
raise that had not landed yet.  The process's ``/live`` reports a perform still running
:data:`STUCK_GRACE` seconds past its soft limit.
"""

from __future__ import annotations

import asyncio
import ctypes
import heapq
import inspect
import itertools
import logging
import math
import os
import platform
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lowkiq.errors import ConfigurationError, LowkiqError
from lowkiq.perform.coroutines import thread_loop
from lowkiq.running import running

if TYPE_CHECKING:
    from lowkiq.middleware import Batch
    from lowkiq.worker import Worker

log = logging.getLogger("lowkiq.timeouts")

#: Seconds past ``perform_timeout`` after which a perform still running (it could not be
#: interrupted: a C call) makes the process's ``/live`` answer 503.
STUCK_GRACE = 5.0
#: Ids a message names before it says how many more there are.
SHOWN_IDS = 5
#: Longest single sleep of the watchdog, seconds (a far deadline is waited for in steps).
MAX_WAIT = 3600.0
#: Seconds between two raises of :class:`PerformTimeout` in a perform still running past
#: its limit (one that swallowed the first).
REPEAT_EVERY = 1.0


class PerformTimeout(LowkiqError):
    """A ``perform`` ran past its worker's ``perform_timeout``: raised in a sync perform's
    thread, and in place of an ``async def perform``'s cancellation.  The batch fails
    like on any exception (retried, then the morgue)."""

    def __init__(self, message: str = "the perform ran past its worker's perform_timeout") -> None:
        super().__init__(message)


class PerformHardTimeout(LowkiqError):
    """A ``perform`` ran past its worker's ``perform_hard_timeout``: the batch failed with
    it (retried, then the morgue) while its thread was given up, and the process
    stopped.  Never raised in ``perform`` itself."""


def check_perform_timeout(owner: str, value: object, name: str = "perform_timeout") -> None:
    """Raise :class:`ConfigurationError` naming ``owner.<name>`` unless ``value`` is
    ``None`` or a finite number of seconds > 0."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
        raise ConfigurationError(
            f"{owner}.{name} must be None or a finite number of seconds > 0, got {value!r}"
        )


def check_perform_hard_timeout(owner: str, soft: object, hard: object) -> None:
    """Raise :class:`ConfigurationError` naming ``owner.perform_hard_timeout`` unless it is
    ``None``, or a finite number of seconds above ``perform_timeout`` (which must be set:
    the soft limit comes first)."""
    check_perform_timeout(owner, hard, "perform_hard_timeout")
    if hard is None:
        return
    if soft is None:
        raise ConfigurationError(
            f"{owner}.perform_hard_timeout needs {owner}.perform_timeout (the soft limit, "
            f"below it) set too, got perform_hard_timeout={hard!r} alone"
        )
    assert isinstance(hard, (int, float)) and isinstance(soft, (int, float))
    if hard <= soft:
        raise ConfigurationError(
            f"{owner}.perform_hard_timeout ({hard!r}) must be above "
            f"{owner}.perform_timeout ({soft!r})"
        )


def stuck_threshold(worker: type[Worker]) -> float | None:
    """Seconds a batch of ``worker`` may run before ``/live`` calls it stuck:
    ``perform_timeout`` + :data:`STUCK_GRACE`, or ``None`` (``settings.stuck_after``)."""
    timeout = worker.perform_timeout
    return None if timeout is None else timeout + STUCK_GRACE


def stuck_floor(worker: type[Worker]) -> float | None:
    """Seconds a batch of ``worker`` may run at least before ``/live`` calls it stuck,
    whatever ``settings.stuck_after`` says: ``max_perform_seconds`` + :data:`STUCK_GRACE`
    (a worker that asks its performs to stop after that long runs them that long), or
    ``None``."""
    seconds = worker.max_perform_seconds
    return None if seconds is None else seconds + STUCK_GRACE


def _shown(ids: list[str]) -> str:
    shown = ", ".join(repr(job_id) for job_id in ids[:SHOWN_IDS])
    more = len(ids) - SHOWN_IDS
    return f"{shown} and {more} more" if more > 0 else shown


#: Called on a thread of its own with a perform past its hard limit (see
#: :func:`hard_limit_handler`).
HardLimitHandler = Callable[["Watched"], None]


@dataclass(eq=False, slots=True)
class Watched:
    """One perform under a limit: where it runs, what it performs, and its deadlines."""

    worker: type[Worker]
    #: ``Worker:shard`` (the worker alone outside a shard handler).
    shard: str
    batch: Batch
    #: The performing thread: its id and name.
    thread: int
    thread_name: str
    #: Its soft limit, in seconds.
    timeout: float
    #: Its hard limit, in seconds (``None``: none).
    hard_timeout: float | None = None
    #: What gives the perform up past its hard limit (``None``: nothing can, here).
    on_hard: HardLimitHandler | None = field(default=None, repr=False)
    #: When the limit started, and the soft and hard limits end (the watchdog's clock).
    started: float = 0.0
    deadline: float = 0.0
    hard_deadline: float = math.inf
    #: The soft deadline passed while it ran: it was interrupted (or could not be).
    fired: bool = False
    #: How many times the exception was raised (or the task cancelled) in all.
    raises: int = 0
    #: The hard deadline passed while it ran: it was given up.
    cut: bool = False
    #: The perform ended: nothing is raised in its thread any more.
    done: bool = False
    #: When it is raised in (or cancelled) next, and when the watchdog looks at it next
    #: (its item in the heap at that time is the current one).
    raise_at: float = 0.0
    next_at: float = 0.0
    #: The task of an ``async def perform`` and its loop, while the loop runs it.
    task: asyncio.Future[Any] | None = field(default=None, repr=False)
    loop: asyncio.AbstractEventLoop | None = field(default=None, repr=False)

    @property
    def ids(self) -> list[str]:
        """The batch's ids, in pop order."""
        return list(self.batch)

    def describe(self) -> str:
        """``Worker:shard`` and the ids, for messages."""
        return f"{self.shard} perform of {_shown(self.ids)}"

    def error(self) -> PerformTimeout:
        """The exception the batch fails with past the soft limit."""
        return PerformTimeout(
            f"{self.describe()} ran past {self.worker.__name__}.perform_timeout ({self.timeout:g}s)"
        )

    def hard_error(self) -> PerformHardTimeout:
        """The exception the batch fails with past the hard limit."""
        return PerformHardTimeout(
            f"{self.describe()} ran past {self.worker.__name__}.perform_hard_timeout "
            f"({self.hard_timeout or 0:g}s): its thread was given up and its process stopped"
        )

    def stuck(self, now: float) -> str | None:
        """Why it is stuck, when it runs (by ``time.monotonic`` ``now``) past its limit +
        :data:`STUCK_GRACE`: it could not be interrupted; else ``None``."""
        if now <= self.deadline + STUCK_GRACE:
            return None
        return (
            f"in perform of {self.shard} ({_shown(self.ids)}) for {now - self.started:.1f}s: "
            f"past {self.worker.__name__}.perform_timeout ({self.timeout:g}s) "
            f"+ {STUCK_GRACE:g}s, it could not be interrupted (a C call?)"
        )

    def follow(self, now: float) -> tuple[bool, bool]:
        """What is due at ``now``: a raise (the first, or one of the repeats) and the hard
        limit; sets when to look next.  The watchdog's lock is held."""
        raise_now = now >= self.raise_at
        give_up = not self.cut and now >= self.hard_deadline
        if raise_now:
            self.raise_at = now + REPEAT_EVERY
        if give_up:
            self.cut = True
        self.next_at = self.raise_at if self.cut else min(self.raise_at, self.hard_deadline)
        return raise_now, give_up


def interrupt_thread(ident: int, exception: type[BaseException] | None) -> bool:
    """Raise ``exception`` in thread ``ident`` at its next bytecode (``None``: clear one
    that has not landed yet); ``False`` when that cannot be done (no such thread, or not
    CPython)."""
    if platform.python_implementation() != "CPython":
        return False
    target = ctypes.c_ulong(ident)
    count = ctypes.pythonapi.PyThreadState_SetAsyncExc(
        target, None if exception is None else ctypes.py_object(exception)
    )
    if count > 1:  # never expected: undo, as the C API asks
        ctypes.pythonapi.PyThreadState_SetAsyncExc(target, None)
        return False
    return bool(count == 1)


class Watchdog:
    """One thread that fires the deadlines of the performs in progress (a heap and a
    condition: it sleeps until the earliest)."""

    def __init__(
        self,
        interrupt: Callable[[int, type[BaseException] | None], bool] = interrupt_thread,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.interrupt = interrupt
        self.clock = clock
        # The performing threads take the bare lock: its ``with`` runs no Python code
        # before the block (a Condition's ``__enter__`` does, where a raise that lands
        # would leave the lock held).
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._heap: list[tuple[float, int, Watched]] = []
        self._running: set[Watched] = set()
        self._order = itertools.count()
        self._thread: threading.Thread | None = None

    def watch(self, entry: Watched) -> None:
        """Start the limits of ``entry``, now."""
        entry.started = self.clock()
        entry.deadline = entry.started + entry.timeout
        if entry.hard_timeout is not None:
            entry.hard_deadline = entry.started + entry.hard_timeout
        entry.raise_at = entry.next_at = entry.deadline
        with self._lock:
            self._start()
            self._running.add(entry)
            self._push(entry)
            if self._heap[0][2] is entry:
                self._changed.notify()
            if len(self._heap) > 64 + 2 * len(self._running):
                self._compact()

    def unwatch(self, entry: Watched) -> bool:
        """End the limit of ``entry`` (on its thread; idempotent): nothing is raised in the
        thread after this, and a raise that did not land yet is cleared.  ``True`` when
        the deadline passed while it ran."""
        with self._lock:
            if entry.fired and not entry.done:
                self.interrupt(entry.thread, None)
            entry.done = True
            self._running.discard(entry)
            return entry.fired

    def attach(self, entry: Watched, loop: asyncio.AbstractEventLoop, task: Any) -> bool:
        """``entry``'s perform runs ``task`` on ``loop``: its deadline cancels the task
        instead.  ``False`` when the deadline already passed (the task must not run)."""
        with self._lock:
            if entry.fired:
                self.interrupt(entry.thread, None)
                return False
            entry.loop, entry.task = loop, task
            return True

    def detach(self, entry: Watched) -> None:
        """The loop no longer runs ``entry``'s task."""
        with self._lock:
            entry.loop = entry.task = None

    @contextmanager
    def while_running(self, entry: Watched) -> Iterator[bool]:
        """Inside, ``entry``'s perform cannot end (its thread waits to take its deadline
        back); yields whether it still runs.  Take no other lock the performing thread
        may hold inside."""
        with self._lock:
            yield not entry.done

    def performs(self) -> list[Watched]:
        """The performs under a limit now."""
        with self._lock:
            return list(self._running)

    def _start(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._run, name="lowkiq-watchdog", daemon=True)
            self._thread.start()

    def _push(self, entry: Watched) -> None:
        heapq.heappush(self._heap, (entry.next_at, next(self._order), entry))

    def _compact(self) -> None:
        """Drop the deadlines of performs that ended (they are left in the heap)."""
        self._heap = [item for item in self._heap if not item[2].done]
        heapq.heapify(self._heap)

    def _run(self) -> None:
        while True:
            try:
                self._turn()
            except Exception:  # a bug here must not end the watchdog
                log.exception("the perform_timeout watchdog failed; going on")
                time.sleep(0.1)

    def _turn(self) -> None:
        """Fire the deadlines due, or sleep until the next one (or a new earlier one)."""
        with self._changed:
            fired, given_up = self._fire_due()
            if not fired and not given_up:
                self._changed.wait(self._wait())
        for entry, how in fired:
            log.warning(
                "%s ran past %s.perform_timeout (%gs): %s",
                entry.describe(),
                entry.worker.__name__,
                entry.timeout,
                how,
            )
        for entry in given_up:
            self._give_up(entry)

    def _wait(self) -> float | None:
        if not self._heap:
            return None
        return min(max(self._heap[0][0] - self.clock(), 0.0), MAX_WAIT)

    def _fire_due(self) -> tuple[list[tuple[Watched, str]], list[Watched]]:
        """Interrupt the performs past their deadline, again those past it since the last
        raise (:data:`REPEAT_EVERY`), and list those past their hard limit (the lock is
        held)."""
        now = self.clock()
        fired, given_up = [], []
        while self._heap and (self._heap[0][2].done or self._heap[0][0] <= now):
            at, _, entry = heapq.heappop(self._heap)
            if entry.done or at != entry.next_at:
                continue  # ended, or an older item of a perform looked at since
            raise_now, give_up = entry.follow(now)
            if raise_now:
                how = self._fire(entry)
                if not entry.fired:
                    entry.fired = True
                    fired.append((entry, how))
                else:
                    log.debug("%s: raised again (%d): %s", entry.describe(), entry.raises, how)
            if give_up:
                given_up.append(entry)
            self._push(entry)
        return fired, given_up

    def _fire(self, entry: Watched) -> str:
        """Cancel the perform's task, or raise :class:`PerformTimeout` in its thread; says
        which."""
        entry.raises += 1
        if entry.task is not None and entry.loop is not None:
            try:
                entry.loop.call_soon_threadsafe(entry.task.cancel)
            except RuntimeError:  # its loop is closed: the perform ended
                return "its loop is closed"
            return f"cancelled on thread {entry.thread_name}"
        if self.interrupt(entry.thread, PerformTimeout):
            return f"PerformTimeout raised in thread {entry.thread_name}"
        return f"PerformTimeout could not be raised in thread {entry.thread_name}"

    def _give_up(self, entry: Watched) -> None:
        """``entry`` ran past its hard limit: its handler acts on a thread of its own (the
        watchdog goes on keeping the other deadlines)."""
        handler = entry.on_hard
        if handler is None:
            log.error(
                "%s ran past %s.perform_hard_timeout (%gs): nothing stops it here (only a "
                "lowkiq worker process's executor thread can be given up)",
                entry.describe(),
                entry.worker.__name__,
                entry.hard_timeout or 0,
            )
            return
        threading.Thread(
            target=handler, args=(entry,), name="lowkiq-hard-timeout", daemon=True
        ).start()


_watchdog: Watchdog | None = None
_made = threading.Lock()


def watchdog() -> Watchdog:
    """The process's watchdog (made on first use)."""
    global _watchdog
    if _watchdog is None:
        with _made:
            if _watchdog is None:
                _watchdog = Watchdog()
    return _watchdog


def performs() -> list[Watched]:
    """The performs under a limit in this process now (none before any started)."""
    return [] if _watchdog is None else _watchdog.performs()


def _forget_in_child() -> None:
    """A forked child has none of its parent's threads: it makes its own watchdog."""
    global _watchdog, _made
    _watchdog, _made = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)


_handlers = threading.local()


@contextmanager
def hard_limit_handler(handler: HardLimitHandler) -> Iterator[None]:
    """Inside, on this thread, a perform past its worker's ``perform_hard_timeout`` is
    given to ``handler`` (called on a thread of its own, once): a ``lowkiq worker``
    process's executor threads run inside (:mod:`lowkiq.runtime.executor`)."""
    previous = getattr(_handlers, "handler", None)
    _handlers.handler = handler
    try:
        yield
    finally:
        _handlers.handler = previous


def perform_within_limit(worker: type[Worker], batch: Batch) -> None:
    """``worker.perform(batch)`` (run on the thread's loop when it is a coroutine) under
    ``worker.perform_timeout`` (and ``perform_hard_timeout``); raises
    :class:`PerformTimeout` when it ran past the soft limit."""
    dog = watchdog()
    entry = _watched(worker, batch)
    if inspect.iscoroutinefunction(worker.perform):
        thread_loop()  # made before the limit starts: no raise lands while it is made
    caught: BaseException | None = None
    try:
        try:
            dog.watch(entry)  # a raise that lands from here on is caught below
            _run(dog, entry, worker, batch)
        except BaseException as exc:  # noqa: BLE001 - judged below, once the limit is off
            caught = exc
    except PerformTimeout as late:  # a repeated raise landed as the last one was caught
        caught = caught or late
    finally:
        while True:  # a raise fired as the perform ended may land here, once
            try:
                fired = dog.unwatch(entry)
                break
            except PerformTimeout:
                continue
    if fired and (caught is None or isinstance(caught, (Exception, asyncio.CancelledError))):
        error = entry.error()
        if caught is not None:
            error = error.with_traceback(caught.__traceback__)
        ours = caught is None or isinstance(caught, (PerformTimeout, asyncio.CancelledError))
        raise error from (None if ours else caught)
    if caught is not None:
        raise caught


def _watched(worker: type[Worker], batch: Batch) -> Watched:
    """A perform of ``batch`` on the calling thread, its limits not started yet."""
    now = running.get()
    shard = now.handler.name if now is not None else worker.__name__
    thread = threading.current_thread()
    ident = thread.ident or threading.get_ident()
    hard = worker.perform_hard_timeout
    return Watched(
        worker,
        shard,
        batch,
        ident,
        thread.name,
        float(worker.perform_timeout or 0),
        None if hard is None else float(hard),
        getattr(_handlers, "handler", None),
    )


def _run(dog: Watchdog, entry: Watched, worker: type[Worker], batch: Batch) -> None:
    """Call ``perform``; a coroutine runs as a task that the deadline cancels."""
    result = worker.perform(batch)
    try:
        if result is None or not inspect.isawaitable(result):
            return
        task = asyncio.ensure_future(result, loop=thread_loop())
    except BaseException:
        if inspect.iscoroutine(result):
            result.close()  # interrupted before it ran: never awaited, and that is fine
        raise
    loop = task.get_loop()
    try:
        if dog.attach(entry, loop, task):
            loop.run_until_complete(task)
    finally:
        dog.detach(entry)
        if not task.done():
            task.cancel()  # it never ran, or the loop was interrupted: it ends next time
