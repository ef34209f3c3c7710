"""One processing thread's shards: their handlers, lag metrics and the idle wait.

The shards a thread serves change while it runs: the process's coordinator
(:mod:`lowkiq.ownership.coordinator`) acquires a shard's lease and hands the
thread its handler with :meth:`ProcessingThread.add`, and asks for a shard back with
:meth:`ProcessingThread.remove`.  The thread applies such changes only between batches
(:meth:`ProcessingThread.apply`), acking the shard's last batch and releasing its lease
itself, so a shard is never served by two threads at once.  The shards of a
paused queue (:mod:`lowkiq.pausing`) are parked the same way: their leases stay
held, but the thread neither pops nor watches them until the queue resumes.

The idle wait blocks on the shards' wake lists (pushed by every script that
makes a job due, or schedules one before every other job of its shard), so an
enqueue wakes the thread within milliseconds, while the timeout (the next
scheduled ``perform_in``, at most ``poll_interval``) picks up jobs scheduled
for later on time; the last ~100 ms before one are waited out in the thread.
Whether and when a job is due is Redis's clock's say: Redis tells how long
until each shard's earliest job is due (:meth:`ProcessingThread.due_in`), and the thread's
own clock only measures that wait, so a host whose clock is off neither spins
nor sleeps past due jobs.
On a Redis Cluster one BLPOP cannot span shards (each shard is a slot of its
own): there the idle thread looks at its shards' earliest ``perform_in``
every :data:`CLUSTER_POLL` seconds instead.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import redis

from lowkiq.connection import Client, KeyedCommand, is_cluster
from lowkiq.ownership import leases
from lowkiq.ownership.assignment import ShardKey
from lowkiq.ownership.leases import Lease
from lowkiq.shard_handler import DeferredAck, ShardHandler
from lowkiq.storage.processing import Popped
from lowkiq.storage.queue import Queue
from lowkiq.storage.rate_bucket import Throttle

log = logging.getLogger("lowkiq.processing_thread")

# Below this many seconds a blocking wait is not worth it.  Redis truncates a
# BLPOP timeout to whole milliseconds, and 0 blocks forever: keep well above 1 ms.
MIN_BLOCK = 0.01
# Seconds a BLPOP timeout may fire late: Redis checks them on its timer tick
# (1 / hz, 100 ms by default) unless other traffic wakes it first.
TIMER_SLACK = 0.11
# The last TIMER_SLACK before a scheduled job is waited out locally, checking
# the wake lists every LOCAL_STEP seconds.
LOCAL_STEP = 0.004

#: Seconds between two looks at the shards of an idle thread on a Redis Cluster.
CLUSTER_POLL = 0.025
#: A thread whose every shard waits for rate-limit tokens sleeps without a Redis call,
#: at most this many seconds at a time (for a shorter wait its finished batches' acks
#: ride on the next pops).
THROTTLE_NAP = 0.25
#: Seconds a shard whose rate-limit wait is over may wait more for the thread's other
#: shards, so that their pops go out in one write.
THROTTLE_GATHER = 0.01


def _seconds(reply: Any) -> float | None:
    """A ``due_in`` script's reply: seconds, or ``None`` (the shard holds no job)."""
    if isinstance(reply, redis.RedisError):
        raise reply
    return None if reply is None else float(reply)


@dataclass(frozen=True)
class Added:
    """The coordinator acquired a shard for this thread: serve it."""

    handler: ShardHandler


@dataclass(frozen=True)
class Removed:
    """The coordinator takes a shard back; ``release``: give its lease up (a hand-over),
    else it is lost already."""

    key: ShardKey
    release: bool


class ProcessingThread:
    """The shards one thread serves, on the thread's own Redis connection."""

    def __init__(
        self,
        client: Client,
        handlers: Sequence[ShardHandler],
        deferred: DeferredAck,
        poll_interval: float,
        stop: threading.Event,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.handlers = list(handlers)
        self.deferred = deferred
        self.poll_interval = poll_interval
        self.stop = stop
        self.clock = clock
        #: Called by this lane's thread with the handlers whose leases it released.
        self.on_released: Callable[[list[ShardHandler]], None] = lambda handlers: None
        self._lock = threading.Lock()
        # The coordinator's changes, in the order it made them.
        self._changes: list[Added | Removed] = []
        self._pausing: frozenset[str] | None = None
        #: Names of the paused queues, and the handlers of their shards (not served).
        self.paused: frozenset[str] = frozenset()
        self.parked: list[ShardHandler] = []
        self._changed = threading.Event()
        self.polls = is_cluster(client)
        # A processing thread's client packs and sends commands itself (see due_in).
        self._pack: Callable[..., bytes] | None = getattr(client, "pack", None)
        self._heads: list[KeyedCommand] = []
        # The last due_in() reading (clock time, heads) of a step, for its idle wait.
        self._reading: tuple[float, list[float | None]] | None = None
        # A blocking read must end before the socket times out.
        socket_timeout = getattr(client, "socket_timeout", None)
        self.max_block = (
            min(poll_interval, socket_timeout * 0.8) if socket_timeout else poll_interval
        )
        self._index()

    def _index(self) -> None:
        self._reading = None
        self.wake_keys = [h.queue.keys.wake_list(h.shard) for h in self.handlers]
        # Whether a round's pops go out in one write (see process).
        self._pipelines = all(h.queue.pipelines_pops for h in self.handlers)
        if self._pack is not None:
            # A processing thread's client: every shard's head in one write (per master).
            self._heads = [h.queue.due_in_command(h.shard) for h in self.handlers]
        # Consecutive handlers of one queue, so due_in() asks each queue once.
        self._shards_by_queue: list[tuple[Queue, list[int]]] = []
        for handler in self.handlers:
            if self._shards_by_queue and self._shards_by_queue[-1][0].name == handler.queue.name:
                self._shards_by_queue[-1][1].append(handler.shard)
            else:
                self._shards_by_queue.append((handler.queue, [handler.shard]))

    # -- changes, from the coordinator's thread ----------------------------

    def add(self, handler: ShardHandler) -> None:
        """Serve ``handler``'s shard (its lease is held) from the next step on."""
        with self._lock:
            self._changes.append(Added(handler))
        self._changed.set()

    def remove(self, key: ShardKey, release: bool) -> None:
        """Stop serving a shard after the running batch; ``release``: give its lease up."""
        with self._lock:
            self._changes.append(Removed(key, release))
        self._changed.set()

    def pause(self, queues: frozenset[str]) -> None:
        """Park the shards of ``queues`` (the paused queues, all of them) after the
        running batch; serve again those of queues no longer in it."""
        with self._lock:
            self._pausing = queues
        self._changed.set()

    def wake(self, client: Client) -> None:
        """Interrupt this lane's blocking wait from another connection."""
        self._changed.set()
        if self.wake_keys:
            client.rpush(self.wake_keys[0], "1")

    # -- on the lane's own thread ------------------------------------------

    def apply(self) -> bool:
        """Take in the coordinator's changes, in the order they were made (a shard whose
        lease was lost and acquired again is removed, then added); ``True`` when the
        shards changed."""
        if not self._changed.is_set():
            return False
        with self._lock:
            self._changed.clear()
            changes, self._changes = self._changes, []
            pausing, self._pausing = self._pausing, None
        if not changes and pausing is None:
            return False
        if pausing is not None:
            self.paused = pausing
        every = self.handlers + self.parked
        released: list[ShardHandler] = []
        for change in changes:
            if isinstance(change, Added):
                every.append(change.handler)
                continue
            if change.release:
                released += [h for h in every if h.key == change.key]
            every = [h for h in every if h.key != change.key]
        self.handlers = [h for h in every if h.queue.name not in self.paused]
        self.parked = [h for h in every if h.queue.name in self.paused]
        self._index()
        try:
            # The acks of shards given up or parked; a shard served on keeps its ack for
            # its next pop.
            self.deferred.flush(keep=self.handlers)
        finally:
            # Even when Redis failed mid-ack: a shard whose last batch is not known to be
            # acked is given up all the same (its next owner restores the batch), and the
            # coordinator learns it, so no lease is renewed for a shard nobody serves.
            if released:
                self._release(released)
        return True

    def release_all(self) -> None:
        """Ack the last batch and give up every lease (the process is stopping)."""
        self.deferred.flush()
        held = [h for h in self.handlers + self.parked if not h.lost]
        self.handlers, self.parked = [], []
        self._index()
        if held:
            self._release(held)

    def _release(self, handlers: list[ShardHandler]) -> None:
        with contextlib.suppress(redis.RedisError):
            leases.release_many(Lease(h.queue, h.shard, h.token) for h in handlers)
        log.info("released %s", " ".join(h.name for h in handlers))
        self.on_released(handlers)

    def due_in(self) -> list[float | None]:
        """Seconds until the earliest job of each shard is due, on Redis's clock (negative:
        due already; ``None``: empty, or held by a reshard for now): a round trip per
        queue, or on a processing thread's client one write (per master)."""
        heads: list[float | None]
        if self._pack is not None:
            client: Any = self.client
            heads = [_seconds(reply) for reply in client.run_keyed(self._heads)]
        else:
            heads = []
            for queue, shards in self._shards_by_queue:
                heads += queue.due_in(shards)
        now = time.monotonic()
        for index, handler in enumerate(self.handlers):
            if handler.held_until > now:
                heads[index] = None
            throttle, head = handler.throttle, heads[index]
            if throttle is not None and throttle.until > now and head is not None:
                # Due no sooner than the rate limit lets the shard be popped.
                heads[index] = max(head, throttle.until - now)
        self._reading = (self.clock(), list(heads))
        return heads

    def _due_in_for_wait(self) -> list[float | None]:
        """:meth:`due_in` for the idle wait: the reading the step took just before it found
        nothing to pop (no pop since, at most TIMER_SLACK old, aged by the time since), else
        a new one: one read per idle round instead of two.  A job made due since, or
        scheduled sooner than its shard's others, pushed the wake list, which ends the
        wait at once; a job deleted since costs at most an early look."""
        reading, self._reading = self._reading, None
        if reading is not None:
            age = self.clock() - reading[0]
            if 0 <= age <= TIMER_SLACK:
                return [None if head is None else head - age for head in reading[1]]
        heads = self.due_in()
        self._reading = None
        return heads

    def throttled(self, handlers: Sequence[ShardHandler]) -> int:
        """How many of ``handlers`` wait for rate-limit tokens now (their shards have due
        jobs: a pop reserves the next one's tokens only then)."""
        return sum(1 for handler in handlers if handler.throttle and handler.throttle.waiting())

    def _nap(self) -> bool:
        """When every shard of the thread waits for rate-limit tokens, sleep until the
        first may be popped (and the others that may be within THROTTLE_GATHER after it,
        so that their pops go out together), without a Redis call, at most THROTTLE_NAP
        at a time (a longer wait acks the finished batches first, and the thread looks at
        its changes between naps); ``False`` otherwise."""
        untils = []
        for handler in self.handlers:
            throttle = handler.throttle
            if throttle is None or not throttle.waiting():
                return False
            untils.append(throttle.until)
        first = min(untils)
        pause = max(u for u in untils if u <= first + THROTTLE_GATHER) - time.monotonic()
        if pause > THROTTLE_NAP:
            self.deferred.flush()
            pause = THROTTLE_NAP
        self.stop.wait(max(pause, 0.0))
        return True

    def wait(self) -> None:
        """Ack any finished batch, then block until a wake-up, the next due job or
        poll_interval (a wait for rate-limit tokens is slept, see :meth:`_nap`)."""
        if self.handlers and self._nap():
            return
        self.deferred.flush()
        if self.stop.is_set() or self._changed.is_set():
            return
        if not self.handlers:
            self._changed.wait(self.poll_interval)
            return
        scheduled = [delay for delay in self._due_in_for_wait() if delay is not None]
        # Times on this thread's clock, which only measures the wait: Redis said how long.
        now = self.clock()
        due = now + min(scheduled) if scheduled else None
        end = now + self.max_block
        if due is not None and due > end:
            due = None  # beyond this wait
        if self.polls:
            self._poll_until(end if due is None else due)
            return
        if due is not None:
            # Redis ends a blocked command's wait on its next timer tick, so it may
            # end TIMER_SLACK late: the last stretch before a due job is waited here.
            end = due - TIMER_SLACK
        woken = end - now >= MIN_BLOCK and self.client.blpop(self.wake_keys, timeout=end - now)
        if woken:
            self._woken(woken[0])
            return
        if due is not None:
            self._wait_until(due)

    def _woken(self, key: bytes | str) -> None:
        """The wake list ``key`` fired: its shard may have been opened by a reshard."""
        name = key.decode() if isinstance(key, bytes) else key
        for handler, wake_key in zip(self.handlers, self.wake_keys, strict=True):
            if wake_key == name:
                handler.held_until = 0.0

    def _wait_until(self, due: float) -> None:
        """Sleep until ``due`` in short steps; end early on a wake-up (its element is
        taken, as BLPOP would), a stop or a change of shards."""
        while not (self.stop.is_set() or self._changed.is_set()):
            left = due - self.clock()
            if left <= 0 or self.client.delete(*self.wake_keys):
                return
            time.sleep(min(left, LOCAL_STEP))

    def _poll_until(self, end: float) -> None:
        """Sleep until ``end`` in steps of CLUSTER_POLL; end early when a job of a shard is
        due, on a stop or on a change of shards."""
        while not (self.stop.is_set() or self._changed.is_set()):
            now = self.clock()
            if now >= end:
                return
            time.sleep(min(CLUSTER_POLL, end - now))
            if any(delay is not None and delay <= 0 for delay in self._due_in_for_wait()):
                return

    def process(self, handlers: Sequence[ShardHandler]) -> int:
        """Give each of ``handlers`` (shards of this lane) a batch, in this order; returns
        how many took one.  On a processing thread's client their pops go out in one
        write (per master) before the first batch runs, so a round costs one round trip
        rather than one per shard.  When the lane stops mid-round, the batches not yet
        performed go back to their queues unperformed."""
        if handlers:
            self._reading = None  # a pop changes what is due
        if len(handlers) < 2 or not self._pipelines:
            worked = 0
            for handler in handlers:
                if self.stopping():
                    break
                worked += handler.process()
            return worked
        return self._pipelined(handlers)

    def _pipelined(self, handlers: Sequence[ShardHandler]) -> int:
        if self.stopping():
            return 0
        pops: list[tuple[ShardHandler, ShardHandler | None, Throttle | None]] = []
        commands: list[KeyedCommand] = []
        for handler in handlers:
            if handler.ready():
                acked = handler.deferred.ack_with_pop(handler)
                command, throttle = handler.pop_command(acked)
                pops.append((handler, acked, throttle))
                commands.append(command)
        client: Any = self.client
        try:
            replies = client.run_keyed(commands) if commands else []
        except redis.RedisError:
            for handler, acked, _ in pops:
                handler.interrupted(acked)
            raise
        worked = 0
        failure: Exception | None = None
        read: list[Popped | Exception] = []
        suspect = -1
        for (handler, _, _), reply in zip(pops, replies, strict=True):
            if not isinstance(reply, Exception):
                reply = handler.queue.read_popped(reply)
                if reply.suspect and suspect < 0:
                    suspect = len(read)
            read.append(reply)
        order: Sequence[int] = range(len(pops))
        if suspect >= 0:
            # A job that ended a process before runs with no other batch of the round in
            # processing: the others go back unperformed first (lowkiq.suspects).
            order = [index for index in order if index != suspect] + [suspect]
        for index in order:
            (handler, acked, throttle), popped = pops[index], read[index]
            if isinstance(popped, Exception):
                handler.interrupted(acked)
                failure = failure or popped
                continue
            perform = suspect in (-1, index) and not self.stopping()
            worked += handler.take(popped, acked, perform, throttle)
        if failure is not None:
            raise failure
        return worked

    def stopping(self) -> bool:
        """Whether the thread must stop taking batches (stopping, or its shards changed)."""
        return self.stop.is_set() or self._changed.is_set()

    def flush_acks(self, keep: Sequence[object] = ()) -> None:
        """Ack the lane's finished batches waiting for their ack, but those of ``keep``
        (shards about to be popped: their acks ride on those pops)."""
        self.deferred.flush(keep)

    @property
    def busy(self) -> int:
        """How many of this lane's shards are in ``perform`` now (0 or 1)."""
        return sum(1 for handler in self.handlers if handler.busy)

    def describe(self) -> str:
        """The shards of this lane, e.g. ``OrderWorker:0 OrderWorker:3``."""
        served = " ".join(handler.name for handler in self.handlers) or "(none yet)"
        if self.parked:
            served += " (paused: " + " ".join(handler.name for handler in self.parked) + ")"
        return served
