"""The dispatcher: one thread per worker process that owns every batch's lifecycle.

It serves every shard whose lease the process holds.  Each turn it

1. takes in ownership's changes (:meth:`Dispatcher.tell`, :meth:`Dispatcher.pause`): a
   shard with no batch in flight is given up at once (its finished batch acked, its
   lease released), one with a batch in flight once that batch is settled;
2. settles the works the executor finished (:mod:`lowkiq.runtime.executor`);
3. pops the idle shards the plan puts first (:mod:`lowkiq.runtime.planning`), as many as
   the executor has room for, each pop carrying its shard's ack, with the acks of the
   other idle shards in one write (one per master on a Redis Cluster), and hands each
   popped batch to the executor;
4. when nothing was popped, waits for a completion, a change, or a job of an idle
   shard to become due (:mod:`lowkiq.runtime.idling`); with no batch in flight and at
   most :data:`POPS_BEHIND` idle shards, their pops go out with the wait, and Redis runs
   them when it ends: the job that woke an idle process is popped in the same round trip.
   That wait is lent to an idle executor thread (:meth:`Executor.lend`), which performs
   the job it woke for; the dispatcher goes on once the wait's replies are landed.

A shard never has two batches in flight, and a shard whose lease was lost and taken
again is not popped until its old batch ended, so ``perform`` never holds one id
twice in a process.  Every Redis call of the batches is made by the dispatcher's code
(on an executor thread only for a lent wait, while the dispatcher's thread waits for
it); the executor's threads otherwise only perform.  A shard's states are in
:mod:`lowkiq.runtime.lifecycle`.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import redis

from lowkiq.clients.connection import Client
from lowkiq.clients.outages import MasterDown
from lowkiq.clients.retry import Retries
from lowkiq.errors import LowkiqError
from lowkiq.health.heartbeats import Heartbeat, Heartbeats
from lowkiq.limits.group_caps import GroupCaps
from lowkiq.ownership import leases
from lowkiq.ownership.assignment import ShardKey
from lowkiq.ownership.events import Change, Grant, Mailbox, Released, Revoke
from lowkiq.ownership.leases import Lease
from lowkiq.runtime import suspects
from lowkiq.runtime.backoff import redis_backoff
from lowkiq.runtime.executor import Executor, Work
from lowkiq.runtime.group_claiming import GroupClaiming
from lowkiq.runtime.idling import CLUSTER_POLL, Idler
from lowkiq.runtime.lifecycle import LEAVING, POPPING, RUNNING, SETTLING
from lowkiq.runtime.performing import cancelled_ids
from lowkiq.runtime.planning import Candidate, Shares, first_look, plan_round
from lowkiq.runtime.shard_handler import Request, ShardHandler, Taken
from lowkiq.runtime.shard_ranges import shard_ranges
from lowkiq.storage.queue import Popped, holds_jobs
from lowkiq.strategies.schedulers import Scheduler
from lowkiq.telemetry.recorder import Recorder

log = logging.getLogger("lowkiq.dispatcher")

#: Works in flight per executor thread (one performing, one waiting: no round trip
#: between two batches), and with no thread (``lowkiq.testing.drain``: all shards).
IN_FLIGHT_PER_THREAD = 2
IN_FLIGHT_INLINE = 1_000_000
#: Most idle shards whose pops are sent behind an idle process's wait.  Each such wait
#: runs them all when it ends, before Redis answers any: past about 8 the pops cost the
#: wake-up more than the round trip they save, and a process with more idle shards pops
#: after its wake-up.
POPS_BEHIND = 6


def _call(request: Request) -> Any:
    """Run a request that is a call of its own: its reply, or the error it raised."""
    try:
        return request()  # type: ignore[operator]
    except (redis.RedisError, LowkiqError) as exc:
        return exc


class Dispatcher:
    """Every batch of the shards this process leases, from pop to ack (see the module)."""

    def __init__(
        self,
        client: Client,
        threads: int,
        scheduler: Scheduler,
        poll_interval: float,
        stop: threading.Event,
        waker: Client | None = None,
        heartbeats: Heartbeats | None = None,
        recorder: Recorder | None = None,
        fatal: Callable[[BaseException], None] = lambda exc: None,
        clock: Callable[[], float] = time.monotonic,
        thread_scope: Callable[[], AbstractContextManager[None]] = nullcontext,
        shutdown_timeout: float = 25.0,
        group_caps: dict[str, GroupCaps] | None = None,
        reports: Mailbox[Released] | None = None,
        handoff: Callable[[list[ShardKey]], object] = lambda keys: None,
    ) -> None:
        """``group_caps``: each worker's, by queue name (shared by its shards' handlers).
        ``reports``: where released leases are reported (:mod:`lowkiq.ownership.events`);
        ``handoff(keys)``: wakes the next owners of released shards (its own connection).
        ``waker``: another connection, for other threads to end the dispatcher's BLPOP;
        ``thread_scope``: what each executor thread runs inside."""
        self.client = client
        self.shutdown_timeout = shutdown_timeout
        #: Shards whose batch still ran past ``shutdown_timeout``: their leases lapse.
        self.abandoned: list[ShardHandler] = []
        self.scheduler = scheduler
        self.poll_interval = poll_interval
        self.stop = stop
        self.waker = waker
        self.clock = clock
        self.heartbeats = heartbeats or Heartbeats()
        self.heartbeat: Heartbeat = self.heartbeats.thread(-1, "dispatcher")
        self.executor = Executor(
            threads, self._finished, self.heartbeats, recorder, fatal, thread_scope=thread_scope
        )
        self.capacity = threads * IN_FLIGHT_PER_THREAD if threads else IN_FLIGHT_INLINE
        self.reports = reports
        self.handoff = handoff
        #: The shards served (leases held), and those of paused queues (kept, not popped).
        self.handlers: list[ShardHandler] = []
        self.parked: list[ShardHandler] = []
        self.paused: frozenset[str] = frozenset()
        self.in_flight: dict[ShardKey, Work] = {}
        #: Batches each worker started, by weight (:mod:`lowkiq.runtime.planning`).
        self.shares = Shares()
        self.group_caps: dict[str, GroupCaps] = group_caps or {}
        #: Shards asked back while their batch was in flight: given up once it is settled.
        self.leaving: dict[ShardKey, ShardHandler] = {}
        # Shards whose batch stays in processing for the next owner (a BaseException that
        # is not an Exception, a hard timeout): never popped again.
        self._broken: set[ShardKey] = set()
        # The suspect batch waiting to run alone, or running alone (lowkiq.runtime.suspects).
        self._suspect: Work | None = None
        self._alone = False
        self._lock = threading.Lock()
        self._inbox: Mailbox[Change] = Mailbox()
        self._pausing: frozenset[str] | None = None
        # Set by anything the dispatcher must look at: a change, a finished work, a stop.
        self._kick = threading.Event()
        self._done: queue.SimpleQueue[Work] = queue.SimpleQueue()
        #: How the dispatcher waits when a round popped nothing, and claims group places.
        self.idler = Idler(client, self._kick, clock, poll_interval, waker)
        self.claiming = GroupClaiming(client, self.idler.packs)
        # When each shard was last popped, and whether that pop left a backlog.
        self._last_pop: dict[ShardKey, tuple[float, bool]] = {}
        # The pops behind a wait that took no batch (or failed): landed after the wait
        # returned, by the dispatcher, once the thread of a lent wait has its batch.
        self._unlanded: tuple[list[ShardHandler], list[Any]] | None = None

    # -- from other threads -----------------------------------------------------------

    def tell(self, change: Change) -> None:
        """Take ``change`` in at the next turn (a granted shard's user calls go to the
        executor)."""
        if isinstance(change, Grant):
            change.handler.call_user = self.executor.call
            # The jobs its acquisition buried are reported now, on the granting thread,
            # whatever the lease does next: they are in the morgue already, and a lease
            # that lapses or is lost before the shard's first round must not lose them.
            change.handler.report_exhausted()
            self.shares.weights[change.handler.queue.name] = change.handler.worker.weight
        self._inbox.post(change)
        self.wake()

    def pause(self, queues: frozenset[str]) -> None:
        """Pop no shard of ``queues`` (every paused queue), keeping their leases."""
        with self._lock:
            self._pausing = queues
        self.wake()

    def wake(self, client: Client | None = None) -> None:
        """End the dispatcher's wait (a BLPOP through ``client`` or the waker)."""
        self.idler.wake(client)

    def _finished(self, work: Work) -> None:
        """On an executor thread: ``work`` ended."""
        self._done.put(work)
        self.wake()

    @property
    def busy(self) -> int:
        """How many batches are in ``perform`` now."""
        return self.executor.performing

    def running_batches(self) -> list[dict[str, object]]:
        """The batches performed now: ``shard`` (``Queue:shard``), ``thread``,
        ``started_at`` (Unix time) and ``stopping`` (asked to stop: a stop, a hand-over or
        a cancel)."""
        return [
            {
                "shard": f"{work.handler.queue.name}:{work.handler.shard}",
                "thread": f"lowkiq-{work.thread}",
                "started_at": work.started_at,
                "stopping": work.handler.stopping or bool(cancelled_ids(work.handler)),
            }
            for work in list(self.in_flight.values())
            if work.started_at is not None
        ]

    def describe(self) -> str:
        """The shards served, e.g. ``OrderWorker:0-7 MailWorker:0,3``."""
        served = _shard_ranges(self.handlers) or "(none yet)"
        if self.parked:
            served += " (paused: " + _shard_ranges(self.parked) + ")"
        return served

    # -- the dispatcher's thread ------------------------------------------------------

    def run(self) -> None:
        """Turn until the process stops, backing off on errors; then :meth:`shutdown`."""
        self.executor.start()
        retries = Retries("dispatcher", log, redis_backoff(self.poll_interval))
        try:
            while not self.stop.is_set():
                self.heartbeat.stamp()
                try:
                    self.turn()
                except redis.RedisError as exc:
                    self._kick.wait(retries.failed(exc))
                except Exception as exc:  # a bug, or a reply no call expected: survived
                    log.exception("the dispatcher's turn raised; going on (please report this)")
                    self._distrust()
                    self._kick.wait(retries.failed(exc, logged=True))
                else:
                    retries.succeeded()
        finally:
            self.shutdown()

    def _distrust(self) -> None:
        """After an unexpected error: every shard with no batch in flight is UNSURE."""
        for handler in self.handlers + self.parked:
            if handler.key not in self.in_flight and not handler.lost:
                handler.interrupted()

    def turn(self) -> None:
        """One turn (see the module)."""
        self._kick.clear()
        self.apply()
        self.collect()
        if self.group_caps:
            self.keep_claims()
        if self.round() == 0 and not self._kick.is_set():
            self.wait()

    def apply(self) -> bool:
        """Take in ownership's changes, in order; ``True`` when the shards changed.  A
        shard given up with no batch in flight is given up now (:meth:`_give_up`)."""
        changes = self._inbox.take()
        with self._lock:
            pausing, self._pausing = self._pausing, None
        if not changes and pausing is None:
            return False
        if pausing is not None:
            self.paused = pausing
        every = self.handlers + self.parked
        released: list[ShardHandler] = []
        for change in changes:
            if isinstance(change, Grant):
                every.append(change.handler)
                continue
            if isinstance(change, Revoke):
                released += [h for h in every if h.key == change.key]
            every = [h for h in every if h.key != change.key]
        self.handlers = [h for h in every if h.queue.name not in self.paused]
        self.parked = [h for h in every if h.queue.name in self.paused]
        self.idler.forget()
        self._give_up(self._leave(released))
        return True

    def _leave(self, handlers: Sequence[ShardHandler]) -> list[ShardHandler]:
        """Of ``handlers``, asked back, those that may be given up now: no batch in flight,
        or one no thread took yet (put back unperformed); the others once settled."""
        free = []
        for handler in handlers:
            if handler in self.abandoned:
                continue  # its lease is kept until the process exits
            work = self.in_flight.get(handler.key)
            if work is None or work.handler is not handler:
                free.append(handler)
            elif work.claim():
                self._drop(work)
                try:
                    handler.restore()
                except redis.RedisError as exc:
                    log.warning("%s: could not put its batch back (%s)", handler.name, exc)
                free.append(handler)
            else:
                handler.stopping = True  # its perform sees should_stop()
                handler.life.to(LEAVING)
                self.leaving[handler.key] = handler
        return free

    def collect(self) -> int:
        """Settle the works the executor finished; returns how many."""
        count = 0
        while True:
            try:
                work = self._done.get_nowait()
            except queue.Empty:
                return count
            count += 1
            self._settle(work)

    def _drop(self, work: Work) -> None:
        """``work`` is no longer in flight: its group places go with the next write."""
        handler = work.handler
        if self.in_flight.get(handler.key) is work:
            del self.in_flight[handler.key]
        if work is self._suspect:
            self._suspect, self._alone = None, False
        if handler.group_caps is not None:
            handler.group_caps.release(handler.key)

    def _settle(self, work: Work) -> None:
        handler = work.handler
        self._drop(work)
        leaving = self.leaving.get(handler.key) is handler
        served = handler in self.handlers or handler in self.parked
        handler.life.to(SETTLING)
        if work.fatal is not None:  # its batch stays in processing for the next owner
            self._broken.add(handler.key)
            handler.interrupted()
        if work.stuck:  # past perform_hard_timeout: leased until the process ends
            self._broken.add(handler.key)
            self.abandoned.append(handler)
        try:
            if work.fatal is None:
                handler.settle(work.outcomes, work.unrun)
                if handler.unacked and (work.suspect or not (served or leaving)):
                    handler.ack_now()  # it ran alone, or its lease lapsed meanwhile
        finally:
            if leaving:
                del self.leaving[handler.key]
                if not work.stuck:  # a stuck shard's lease is kept until the process exits
                    self._give_up([handler])

    def _give_up(self, handlers: list[ShardHandler]) -> None:
        """Ack the finished batches of ``handlers`` and release their leases (a Redis error
        leaves a batch for the next owner to restore, a lease to lapse)."""
        if not handlers:
            return
        try:
            self._send([], [h for h in handlers if h.unacked and not h.lost])
        except redis.RedisError as exc:
            log.warning("could not ack the last batch of a shard given up (%s)", exc)
        finally:
            self._release(handlers)

    def _release(self, handlers: list[ShardHandler]) -> None:
        """Release the leases of ``handlers`` not lost, wake the next owners, report them."""
        held = [h for h in handlers if not h.lost]
        if held:
            with contextlib.suppress(redis.RedisError):
                leases.release_many(Lease(h.queue, h.shard, h.token) for h in held)
                log.info("released %s", _shard_ranges(held))
                self.handoff([h.key for h in held])
        if self.reports is not None:
            self.reports.post(Released(tuple(handlers)))

    def round(self) -> int:
        """Pop and ack what :func:`plan_round` says, in one write; hand the batches to the
        executor; returns how many shards gave a batch."""
        if self.stop.is_set():
            return 0
        if self._suspect is not None:
            self._run_suspect_alone()
            return 0
        room = self.capacity - len(self.in_flight)
        idle = self._idle()
        ready = [h for h in idle if h.ready()] if room > 0 else []
        if room <= 0:  # a worker with no batch in flight still gets a place, once woken
            if self.idler.polls:
                self.idler.look(self._unserved())
            ready = [h for h in self._unserved() if h.key in self.idler.woken and h.ready()]
            room = len({h.queue.name for h in ready})
        woken = self.idler.take_woken()
        by_key = {h.key: h for h in idle + self.parked}
        candidates = [
            Candidate(h.key, *self._last_pop.get(h.key, (0.0, False)), h.key in woken)
            for h in ready
        ]
        considered, due = first_look(candidates, self.scheduler.reads_due, bool(woken))
        if due is None:  # (with no batch in flight, the wait on the idle shards comes next)
            shards = [by_key[c.key] for c in considered]
            due = self.idler.due_in(shards, trust_empty=not self.in_flight)
        finished = [h.key for h in idle + self.parked if h.unacked]
        plan = plan_round(considered, due, room, self.scheduler.order, finished, self.shares)
        # A woken shard that was ready but got no turn is still due: the next round's.
        self.idler.woken |= {c.key for c in considered if c.woken}.difference(plan.pops)
        if plan.empty:
            return 0
        self.idler.forget()  # a pop changes what is due
        return self._send([by_key[key] for key in plan.pops], [by_key[key] for key in plan.acks])

    def _unserved(self) -> list[ShardHandler]:
        """The idle shards of the workers with no batch in flight: they get a place even
        when the executor has no room (:mod:`lowkiq.runtime.waiting` runs them next)."""
        busy = {key[0] for key in self.in_flight}
        return [h for h in self._idle() if h.queue.name not in busy]

    def _idle(self) -> list[ShardHandler]:
        """The served shards with no batch in flight (nor an old one of theirs)."""
        return [
            h
            for h in self.handlers
            if h.key not in self.in_flight and h.key not in self._broken and not h.lost
        ]

    def _send(self, chosen: Sequence[ShardHandler], acks: Sequence[ShardHandler]) -> int:
        """Pop ``chosen`` (each acking its own finished batch) and ack ``acks``, in one
        write when their queues can (a call each when a write waits for replicas:
        ``settings.wait_replicas``); returns how many shards gave a batch.  Every reply is
        read before the first Redis error is raised (its shard is then unsure: restored
        before its next pop)."""
        if not chosen and not acks:
            return 0
        packed = all(h.queue.pipelines_pops for h in (*chosen, *acks))
        requests = [h.pop_command(packed) for h in chosen] + [h.ack_command(packed) for h in acks]
        client: Any = self.client
        try:
            replies = client.run_keyed(requests) if packed else [_call(r) for r in requests]
        except redis.RedisError:
            for handler in [*chosen, *acks]:
                handler.interrupted()
            raise
        return self._land(chosen, acks, replies)

    def _land(
        self, chosen: Sequence[ShardHandler], acks: Sequence[ShardHandler], replies: list[Any]
    ) -> int:
        """Read the replies of the pops of ``chosen`` and the acks of ``acks`` (in that
        order) and hand the batches to the executor (see :meth:`_send`)."""
        failure: redis.RedisError | None = None
        for handler, reply in zip(acks, replies[len(chosen) :], strict=True):
            if isinstance(reply, MasterDown) and not reply.sent:
                continue  # not sent: acked once its master answers
            try:
                handler.acked(reply)
            except MasterDown:
                pass  # its shard is unsure; the other masters' shards go on
            except redis.RedisError as exc:
                failure = failure or exc
        popped: list[tuple[ShardHandler, Taken]] = []
        for handler, reply in zip(chosen, replies[: len(chosen)], strict=True):
            if isinstance(reply, MasterDown):
                # Its master did not answer: the other masters' shards go on.
                if reply.sent:
                    handler.interrupted()
                else:
                    handler.unsent()
                continue
            if isinstance(reply, Exception):
                handler.interrupted()
                failure = failure or (reply if isinstance(reply, redis.RedisError) else None)
                continue
            try:  # taken in whatever the others raise: its ack is done, its batch popped
                read = reply if isinstance(reply, Popped) else handler.queue.read_popped(reply)
                popped.append((handler, handler.take(read)))
            except redis.RedisError as exc:
                handler.interrupted()  # its batch is restored before its next pop
                failure = failure or exc
        worked = sum(
            self._dispatch(handler, taken) for handler, taken in self.claiming.claim(popped)
        )
        if failure is not None:
            raise failure
        return worked

    def keep_claims(self) -> None:
        """Send the group claims' releases and renewals due, and ask which groups are full
        while some are (:mod:`lowkiq.runtime.group_claiming`)."""
        self.claiming.keep(self.group_caps, self.handlers)

    def _dispatch(self, handler: ShardHandler, taken: Taken) -> int:
        """Hand a pop's batches to the executor (a suspect waits to run alone)."""
        key = handler.key
        backlog = (bool(taken.batches) and not taken.drained) or taken.again
        self._last_pop[key] = (self.clock(), backlog)
        if not taken.batches:
            return 1 if taken.again else 0
        if taken.suspect and self._suspect is not None:  # it waits in its queue
            if handler.group_caps is not None:
                handler.group_caps.release(key)
            handler.restore(reason="suspect_waits")
            handler.not_before = time.monotonic() + suspects.RETRY
            return 0
        self.shares.started(key[0], len(taken.batches))
        work = Work(handler, taken.batches, suspect=taken.suspect)
        handler.life.to(RUNNING)
        self.in_flight[key] = work
        if taken.suspect:
            self._suspect = work
        elif not self.executor.submit(work) and len(self.in_flight) == 1:
            # The one batch of an idle process, for a thread woken: let it have the GIL.
            time.sleep(0)
        return 1

    def _run_suspect_alone(self) -> None:
        """Run the waiting suspect once it is the process's only batch in flight and every
        finished batch is acked (:mod:`lowkiq.runtime.suspects`)."""
        suspect = self._suspect
        if suspect is None or self._alone or len(self.in_flight) > 1:
            return
        unacked = [h for h in self.handlers + self.parked if h.unacked]
        if unacked:
            self._send([], unacked)
        self._alone = True
        self.executor.submit(suspect)

    # -- waiting ----------------------------------------------------------------------

    def wait(self) -> None:
        """Block until a kick, a wake-up of an idle shard, its next due job, or
        poll_interval (:mod:`lowkiq.runtime.idling`)."""
        idler = self.idler
        if len(self.in_flight) >= self.capacity:
            # Full: only a wake-up of a worker with no batch in flight (no due-time read;
            # on a Redis Cluster the next round looks, CLUSTER_POLL from now).
            idle = [h for h in self._unserved() if not h.lapsed()]
            if idle and self._suspect is None and not idler.polls:
                idler.block(idle, self.clock() + idler.max_block)
            else:
                self._kick.wait(CLUSTER_POLL if idle and idler.polls else self.poll_interval)
            return
        idle = [h for h in self._idle() if not h.lapsed()]
        if not idle or self._suspect is not None:
            self._kick.wait(self.poll_interval)
            return
        behind = self._pops_behind(idle)
        try:
            if behind:  # an idle process: the thread its wake-up wakes performs the job
                self.executor.lend(lambda: self._wait_idle(idle, behind))
            else:
                self._wait_idle(idle, behind)
        finally:
            self._land_unlanded()

    def _wait_idle(self, idle: Sequence[ShardHandler], behind: Sequence[ShardHandler]) -> None:
        """:meth:`wait` for ``idle``, the pops of ``behind`` sent behind the BLPOP.  Only
        the pops that took a batch are landed here, so that the thread of a lent wait
        starts its job first; the others are left to :meth:`_land_unlanded`."""
        idler = self.idler
        try:
            replies = idler.wait(idle, self._group_retry, behind)
        except redis.RedisError:
            for handler in behind:  # its pop went out: what it did is unknown
                if handler.life.state is POPPING:
                    handler.interrupted()
            for handler in idle:  # its BLPOP may have taken a wake-up: ask the due times
                handler.empty_since = None
            raise
        if replies:  # the shards popped after the wake-up are no longer woken
            idler.woken.difference_update({h.key for h in behind})
            idler.forget()
            took: tuple[list[ShardHandler], list[Any]] = ([], [])
            others: tuple[list[ShardHandler], list[Any]] = ([], [])
            for handler, reply in zip(behind, replies, strict=True):
                part = took if holds_jobs(reply) else others
                part[0].append(handler)
                part[1].append(reply)
            self._unlanded = others if others[0] else None
            if took[0] and self._land(took[0], [], took[1]):
                self.shares.calm()  # there was room for every idle shard: no turns taken

    def _land_unlanded(self) -> None:
        """Land the pops :meth:`_wait_idle` left (what they raise is raised here)."""
        unlanded, self._unlanded = self._unlanded, None
        if unlanded is not None and self._land(unlanded[0], [], unlanded[1]):
            self.shares.calm()

    def _pops_behind(self, idle: Sequence[ShardHandler]) -> list[ShardHandler]:
        """The shards whose pops go out in the same write as the wait's BLPOP, so that a
        job enqueued into an idle process costs one round trip to start, not two
        (:meth:`lowkiq.runtime.idling.Idler.wait`): when no batch is in flight and the
        idle shards are at most :data:`POPS_BEHIND` (each pop runs whatever ends the
        wait), the ready ones.  (A pop carries its rate limit and group caps; a batch it
        takes claims its group places as a round's does.)"""
        idler = self.idler
        if self.in_flight or self.stop.is_set() or idler.polls or not idler.packs:
            return []
        if len(idle) > min(POPS_BEHIND, self.capacity):
            return []
        return [h for h in idle if h.queue.pipelines_pops and h.ready()]

    def _group_retry(self) -> float | None:
        """Seconds until a full or dry group may be served again (``None``: none waits)."""
        waiting = [c for c in self.group_caps.values() if c.waits_for_places()]
        return min((c.retry_in() for c in waiting), default=None)

    # -- stopping ---------------------------------------------------------------------

    def shutdown(self) -> None:
        """The process stops: every shard is given up, those with a batch running once it
        is settled (Redis errors are logged: a shard's next owner restores its batch)."""
        every = self.handlers + self.parked
        self.handlers, self.parked = [], []
        self._give_up(self._leave(every))
        self.executor.stop()
        for handler in list(self.leaving.values()):
            handler.announce_stop()
        deadline = self.clock() + self.shutdown_timeout
        while self.in_flight:
            self.heartbeat.stamp()
            remaining = deadline - self.clock()
            if remaining <= 0:
                self._abandon()
                return
            try:
                self._settle(self._done.get(timeout=min(1.0, remaining)))
            except queue.Empty:
                continue
            except redis.RedisError as exc:
                log.warning("could not settle a batch (%s); its next owner restores it", exc)
        self.executor.join()
        left = list(self.leaving.values())
        self.leaving.clear()
        self._give_up(left)

    def _abandon(self) -> None:
        """``shutdown_timeout`` passed: the running batches are left in processing, their
        leases held until the process exits (the stop was announced: no restore counted)."""
        names = " ".join(work.handler.name for work in self.in_flight.values())
        log.warning(
            "shutdown_timeout (%ss) passed with batches still running on %s: left for "
            "their shards' next owners", self.shutdown_timeout, names,
        )  # fmt: skip
        self.abandoned.extend(work.handler for work in self.in_flight.values())
        self.leaving.clear()


def _shard_ranges(handlers: Iterable[ShardHandler]) -> str:
    """The shards of ``handlers`` as ranges: ``OrderWorker:0-63``."""
    return shard_ranges((h.worker.__name__, h.shard) for h in handlers)
