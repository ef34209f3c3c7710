"""How the dispatcher waits when a round popped nothing, and its reading of when the
idle shards' next jobs are due.

On one Redis it blocks on the idle shards' wake lists (BLPOP), which every script that
makes a job due pushes, until the first scheduled job is due; Redis may fire a BLPOP
timeout up to :data:`TIMER_SLACK` late, so that last stretch is waited out here.  A
BLPOP that waits for a wake-up (not for a due time) may carry pops in the same write:
Redis runs a client's next commands as soon as its blocking one returns, so the job
that woke it is popped without a round trip of its own.  On a
Redis Cluster one BLPOP cannot span shards: it polls the due times every
:data:`CLUSTER_POLL`.  When every idle shard waits for rate-limit tokens it sleeps with
no Redis call.  Another thread ends any wait with :meth:`Idler.wake`.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import redis

from lowkiq.clients.connection import Client, is_cluster
from lowkiq.clients.outages import MasterDown
from lowkiq.ownership.assignment import ShardKey
from lowkiq.runtime.shard_handler import ShardHandler

# The shortest blocking wait (Redis truncates a BLPOP timeout to whole ms; 0 is forever).
MIN_BLOCK = 0.01
# How late a BLPOP timeout may fire (Redis checks them every 1 / hz, 100 ms by default);
# that last stretch before a scheduled job is waited out here, in LOCAL_STEP steps.
TIMER_SLACK = 0.11
LOCAL_STEP = 0.004
#: Seconds between two looks at the idle shards on a Redis Cluster.
CLUSTER_POLL = 0.025
#: Most seconds at a time a dispatcher whose idle shards all wait for rate-limit tokens
#: sleeps (no Redis call), and how long it may wait more to pop them in one write.
THROTTLE_NAP = 0.25
THROTTLE_GATHER = 0.01
#: What a wake-up pushes to the wake list blocked on (not a shard's own wake-up).
KICK = b"kick"


def _seconds(reply: Any) -> float | None:
    """A ``due_in`` reply: seconds, or ``None`` (no job, or its master does not answer)."""
    if isinstance(reply, MasterDown):
        return None
    if isinstance(reply, redis.RedisError):
        raise reply
    return None if reply is None else float(reply)


class Idler:
    """The dispatcher's waits on ``client`` (see the module); ``kick`` is set by anything
    the dispatcher must look at, ``waker`` (another connection) ends a BLPOP for it."""

    def __init__(
        self,
        client: Client,
        kick: threading.Event,
        clock: Callable[[], float],
        poll_interval: float,
        waker: Client | None = None,
    ) -> None:
        self.client = client
        self.kick = kick
        self.clock = clock
        self.waker = waker
        #: Whether due times are polled (a Redis Cluster), and whether the client sends
        #: several reads in one write.
        self.polls = is_cluster(client)
        self.packs = getattr(client, "pack", None) is not None
        socket_timeout = getattr(client, "socket_timeout", None)  # a BLPOP ends before it
        #: The longest wait.
        self.max_block = (
            min(poll_interval, socket_timeout * 0.8) if socket_timeout else poll_interval
        )
        #: The shards whose wake list ended a wait (likely due, the others not).
        self.woken: set[ShardKey] = set()
        self._blocking_key: str | None = None  # the wake list blocked on now
        # The last due_in() reading: (clock, shards, heads), for the wait after a round.
        self._reading: tuple[float, tuple[ShardKey, ...], list[float | None]] | None = None
        self._next_look = 0.0  # the next look at the unserved shards (look)
        self._behind: list[Any] = []  # the replies of the pops sent behind a BLPOP

    def wake(self, client: Client | None = None) -> None:
        """End the wait (a BLPOP through ``client`` or the waker)."""
        self.kick.set()
        key = self._blocking_key
        sender = client or self.waker
        if key is not None and sender is not None:
            with contextlib.suppress(redis.RedisError):
                sender.rpush(key, KICK)

    def take_woken(self) -> set[ShardKey]:
        """The shards woken since the last call."""
        woken, self.woken = self.woken, set()
        return woken

    def forget(self) -> None:
        """What is due changed (a pop, another set of shards): read it again."""
        self._reading = None

    def due_in(
        self, handlers: Sequence[ShardHandler], trust_empty: bool = False
    ) -> list[float | None]:
        """Seconds until each shard's earliest job is due, on Redis's clock (negative: due;
        ``None``: empty or held for now), no sooner than its rate limit lets it pop.

        ``trust_empty``: a wait on these shards' wake lists comes next, before anything
        else is popped (an idle process): a shard whose pop of the last wait found it
        holding no job is not asked, since a job written into it wakes that wait."""
        now = time.monotonic()
        empty = [trust_empty and self._known_empty(h, now) for h in handlers]
        asked = [h for h, known in zip(handlers, empty, strict=True) if not known]
        read: list[float | None] = []
        if asked and self.packs:
            client: Any = self.client
            commands = [h.queue.due_in_command(h.shard) for h in asked]
            read = [_seconds(reply) for reply in client.run_keyed(commands)]
        elif asked:
            read = [h.queue.due_in([h.shard])[0] for h in asked]
        answers = iter(read)
        heads = [None if known else next(answers) for known in empty]
        now = time.monotonic()
        for index, handler in enumerate(handlers):
            if handler.not_before > now:
                heads[index] = None
            throttle, head = handler.throttle, heads[index]
            if throttle is not None and throttle.until > now and head is not None:
                heads[index] = max(head, throttle.until - now)
        self._reading = (self.clock(), tuple(h.key for h in handlers), list(heads))
        return heads

    def _known_empty(self, handler: ShardHandler, now: float) -> bool:
        """Whether ``handler``'s pop found it holding no job within the last wait (and no
        wake-up came since); never on a Redis Cluster, whose due times are polled."""
        since = handler.empty_since
        return since is not None and not self.polls and now - since <= self.max_block + TIMER_SLACK

    def _due_in_for_wait(self, handlers: Sequence[ShardHandler]) -> list[float | None]:
        """:meth:`due_in` for the wait: the round's reading of the same shards, aged, when
        at most TIMER_SLACK old."""
        reading, self._reading = self._reading, None
        if reading is not None and reading[1] == tuple(h.key for h in handlers):
            age = self.clock() - reading[0]
            if 0 <= age <= TIMER_SLACK:
                return [None if head is None else head - age for head in reading[2]]
        heads = self.due_in(handlers, trust_empty=True)
        self._reading = None
        return heads

    def look(self, unserved: Sequence[ShardHandler]) -> None:
        """On a Redis Cluster (no wake lists blocked on), read whether ``unserved`` are due,
        at most every CLUSTER_POLL: the due ones count as woken."""
        if not self.polls or not unserved or self.clock() < self._next_look:
            return
        self._next_look = self.clock() + CLUSTER_POLL
        for handler, due in zip(unserved, self.due_in(unserved), strict=True):
            if due is not None and due <= 0:
                self.woken.add(handler.key)

    def wait(
        self,
        idle: Sequence[ShardHandler],
        retry_in: Callable[[], float | None],
        behind: Sequence[ShardHandler] = (),
    ) -> list[Any]:
        """Wait for a kick, a wake-up of ``idle``, their next due job, ``retry_in()``
        seconds (a full or dry group may be served again), or at most max_block.

        ``behind``: shards whose pops (packed) go behind the BLPOP when it waits for a
        wake-up (not for a due time, which it ends before the job is due); made only
        then.  Their replies are returned (empty: not sent)."""
        if self._nap(idle):
            return []
        scheduled = [d for d in self._due_in_for_wait(idle) if d is not None]
        now = self.clock()
        due = now + min(scheduled) if scheduled else None
        end = now + self.max_block
        retry = retry_in()
        if retry is not None:
            due = now + retry if due is None else min(due, now + retry)
        if due is not None and due > end:
            due = None  # beyond this wait
        if self.polls:
            self._poll_until(idle, end if due is None else due)
            return []
        if due is not None:
            end = due - TIMER_SLACK  # the rest is waited here (_wait_until)
            behind = ()
        if not self.block(idle, end, behind) and due is not None:
            self._wait_until([h.queue.keys.wake_list(h.shard) for h in idle], due)
        replies, self._behind = self._behind, []
        return replies

    def block(
        self,
        idle: Sequence[ShardHandler],
        end: float,
        behind: Sequence[ShardHandler] = (),
    ) -> bool:
        """BLPOP the wake lists of ``idle`` until ``end`` (not when it is too near), with
        the pops of ``behind`` in the same write (see :meth:`wait`); whether a wake-up or
        a kick ended it."""
        now = self.clock()
        if end - now < MIN_BLOCK:
            return False
        keys = [h.queue.keys.wake_list(h.shard) for h in idle]
        self._blocking_key = keys[0]
        try:  # a kick before this is seen here; one after pushes the wake list
            if self.kick.is_set():
                woken = None
            elif not behind:
                woken = self.client.blpop(keys, timeout=end - now)
            else:
                woken = self._blpop_with(keys, end - now, behind)
        finally:
            self._blocking_key = None
        if woken and woken[1] != KICK:
            self._woken(idle, keys, woken[0])
        return bool(woken)

    def _blpop_with(
        self, keys: Sequence[str], timeout: float, behind: Sequence[ShardHandler]
    ) -> Any:
        """BLPOP ``keys`` with the pops of ``behind`` in one write: Redis runs them as soon
        as the BLPOP returns (a client's next commands wait for its blocking one), so the
        pop of the shard woken costs no round trip of its own.  The pops' replies are
        kept for :meth:`wait`; the BLPOP's is returned."""
        client: Any = self.client
        blpop = client.pack("BLPOP", *keys, timeout)
        pops = [h.pop_command() for h in behind]  # (packed: their queues pipeline pops)
        replies = client.run_keyed([(keys[0], blpop, None), *pops])
        if isinstance(replies[0], redis.RedisError):
            raise replies[0]  # (the pops' shards are unsure: restored before their next pop)
        self._behind = replies[1:]
        return replies[0]

    def _nap(self, idle: Sequence[ShardHandler]) -> bool:
        """When every idle shard waits for rate-limit tokens, sleep (no Redis call) until
        the first may pop, gathering those within THROTTLE_GATHER; else ``False``."""
        untils = []
        for handler in idle:
            throttle = handler.throttle
            if throttle is None or not throttle.waiting():
                return False
            untils.append(throttle.until)
        first = min(untils)
        pause = max(u for u in untils if u <= first + THROTTLE_GATHER) - time.monotonic()
        self.kick.wait(min(max(pause, 0.0), THROTTLE_NAP))
        return True

    def _woken(self, idle: Sequence[ShardHandler], keys: Sequence[str], key: bytes | str) -> None:
        """The wake list ``key`` fired: its shard may have been opened by a reshard."""
        name = key.decode() if isinstance(key, bytes) else key
        for handler, wake_key in zip(idle, keys, strict=True):
            if wake_key == name:
                handler.not_before = 0.0
                handler.empty_since = None
                self.woken.add(handler.key)

    def _wait_until(self, keys: Sequence[str], due: float) -> None:
        """Wait until ``due`` in short steps, or a wake-up (taken, as BLPOP would) or kick."""
        while not self.kick.is_set():
            left = due - self.clock()
            if left <= 0 or self.client.delete(*keys):
                return
            self.kick.wait(min(left, LOCAL_STEP))

    def _poll_until(self, idle: Sequence[ShardHandler], end: float) -> None:
        """Wait until ``end`` in CLUSTER_POLL steps, or a due job of an idle shard, or a
        kick."""
        while not self.kick.is_set():
            now = self.clock()
            if now >= end:
                return
            self.kick.wait(min(CLUSTER_POLL, end - now))
            if any(d is not None and d <= 0 for d in self._due_in_for_wait(idle)):
                return
