"""The works waiting for an executor thread, taken by weight.

A free thread takes the work of the worker that started the fewest batches lately for
its ``Worker.weight`` (counts that fade by half every :data:`HALF_LIFE` seconds; ties:
the work waiting longest), so a worker whose backlog just began is served by the next
free thread, ahead of a flood's queued works (:mod:`lowkiq.runtime.planning` shares the
pops the same way).  Calls of the user's code other than ``perform`` go first; a stop
goes last, once nothing else waits.
"""

from __future__ import annotations

import itertools
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

#: Seconds after which a batch started counts half as much.
HALF_LIFE = 1.0


class _Waiter(Protocol):
    """What a waiting work says of itself."""

    @property
    def queue_name(self) -> str: ...

    @property
    def weight(self) -> float: ...

    @property
    def size(self) -> int: ...


W = TypeVar("W", bound=_Waiter)


class Waiting(Generic[W]):
    """Works, calls and stops waiting for a thread (see the module)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        # One token per work, call or stop put: a thread takes a token, then the thing
        # that goes first (a C-level queue and lock: a batch's hand-over costs little).
        self._tokens: queue.SimpleQueue[None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._calls: deque[Callable[[], object]] = deque()
        self._works: dict[str, deque[tuple[int, W]]] = {}
        self._stops = 0
        self._order = itertools.count()
        # Batches each queue started lately (fading), as of when.
        self._started: dict[str, tuple[float, float]] = {}

    def put_work(self, work: W) -> None:
        """``work`` waits for a thread."""
        with self._lock:
            works = self._works.get(work.queue_name)
            if works is None:
                works = self._works[work.queue_name] = deque()
            works.append((next(self._order), work))
        self._tokens.put(None)

    def put_call(self, call: Callable[[], object]) -> None:
        """``call`` waits for a thread, ahead of the works."""
        with self._lock:
            self._calls.append(call)
        self._tokens.put(None)

    def put_stop(self) -> None:
        """One thread ends, once no work or call waits."""
        with self._lock:
            self._stops += 1
        self._tokens.put(None)

    def take(self, timeout: float) -> W | Callable[[], object] | None:
        """The next thing to do; :class:`queue.Empty` after ``timeout`` seconds of nothing."""
        self._tokens.get(timeout=timeout)  # raises queue.Empty
        with self._lock:
            if self._calls:
                return self._calls.popleft()
            waiting = [works for works in self._works.values() if works]
            if not waiting:
                self._stops -= 1
                return None
            now = self.clock()
            work = min(waiting, key=lambda works: self._turn(works, now)).popleft()[1]
            self._started[work.queue_name] = (self.lately(work.queue_name, now) + work.size, now)
            return work

    def lately(self, queue_name: str, now: float) -> float:
        """Batches ``queue_name`` started lately, faded to ``now``."""
        count, at = self._started.get(queue_name, (0.0, now))
        return float(count * 0.5 ** ((now - at) / HALF_LIFE))

    def _turn(self, works: deque[tuple[int, W]], now: float) -> tuple[float, int]:
        order, first = works[0]
        return (self.lately(first.queue_name, now) / first.weight, order)
