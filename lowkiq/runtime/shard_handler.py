"""One shard's batches: pop, then ack or fail what was performed (SPEC §4).

Every pop, ack, fail and restore carries the shard's lease token and names its batch;
when Redis refuses the token the handler is LOST (``on_lost``: the process stops
serving the shard, whose new owner restores the batch).  The dispatcher
(:mod:`lowkiq.runtime.dispatcher`) makes every Redis call of a shard; an executor
thread (:mod:`lowkiq.runtime.executor`) performs its batches
(:mod:`lowkiq.runtime.performing`), the user's code and no Redis.

A succeeded batch's ack waits (:attr:`ShardHandler.unacked`): it rides on the shard's
next pop, or the dispatcher's next write.  One pop may take several batches (as many
as the shard performs in :data:`POP_SECONDS`, at most :data:`MAX_BATCHES`), each its
own success or failure, acked together.  After a Redis error the shard is UNSURE: a
batch that ran is acked by its number, then the processing area is restored (never
dropped, nothing that ran run again) before the next pop.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import redis

from lowkiq.clients.connection import KeyedCommand
from lowkiq.clients.outages import MasterDown
from lowkiq.errors import LeaseLost, StaleBatch
from lowkiq.limits.group_caps import GroupCaps
from lowkiq.limits.throttling import RateLimits, ShardThrottle
from lowkiq.middleware import ServerMiddleware
from lowkiq.outcomes import Verdict
from lowkiq.ownership.leases import Term
from lowkiq.perform.coroutines import call_retries_exhausted
from lowkiq.runtime.job_ends import job_ends, judge_batch
from lowkiq.runtime.lifecycle import (
    FINISHED,
    HOLDING,
    IDLE,
    LOST,
    POPPING,
    UNSURE,
    Lifecycle,
    State,
)
from lowkiq.runtime.performing import Outcome, perform_chain
from lowkiq.storage.queue import ACK_FENCED, ACK_STALE, Popped, PoppedJob, Queue
from lowkiq.storage.rate_bucket import Throttle
from lowkiq.worker import Worker
from lowkiq.workflows.relayer import RELAYER

log = logging.getLogger("lowkiq.shard_handler")

#: A round's command for one shard: packed, or a call of its own (its reply or error).
Request = KeyedCommand | Callable[[], Any]

#: Seconds between two pops of a shard a reshard holds (unless its wake list fires).
HELD_RETRY = 0.5
#: A pop takes as many batches as the shard performs in this many seconds (at most
#: MAX_BATCHES; under a rate limit, what its reserved tokens pay for): one round trip
#: serves them, and a crash performs that much again.
POP_SECONDS = 0.05
MAX_BATCHES = 64


@dataclass(slots=True)
class Taken:
    """What a pop gave a shard: its batches in order, whether its one job is a suspect
    (:mod:`lowkiq.runtime.suspects`), whether it did work though it left nothing to
    perform (pop again at once), its jobs of each group (their places are claimed), and
    whether it took fewer jobs than it asked for, so left none due behind (``drained``)."""

    batches: list[list[PoppedJob]] = field(default_factory=list)
    suspect: bool = False
    again: bool = False
    groups: Mapping[str, int] = field(default_factory=dict)
    drained: bool = False


class ShardHandler:
    """Pops and settles the batches of one shard of one worker (its executor thread performs
    them: :mod:`lowkiq.runtime.performing`)."""

    def __init__(
        self,
        worker: type[Worker],
        shard: int,
        queue: Queue,
        token: str,
        middlewares: Sequence[ServerMiddleware] = (),
        format_error: Callable[[BaseException], str] = str,
        on_lost: Callable[[ShardHandler], None] | None = None,
        rate_limits: RateLimits | None = None,
        group_caps: GroupCaps | None = None,
    ) -> None:
        self.worker = worker
        self.shard = shard
        self.queue = queue
        self.token = token
        self.middlewares = middlewares
        #: ``call(worker, batch)``: perform inside the middlewares (runtime.performing).
        self.call_perform = perform_chain(middlewares)
        self.name = f"{worker.__name__}:{shard}"
        #: ``(queue name, shard)``: what leases and the assignment are keyed by.
        self.key: tuple[str, int] = (queue.name, shard)
        self.format_error = format_error
        self.on_lost = on_lost
        #: Runs the user's code besides ``perform`` (``retries_exhausted``): at once, or
        #: on an executor thread.
        self.call_user: Callable[[Callable[[], None]], None] = lambda call: call()
        self.life = Lifecycle(self.name)
        #: The batch the processing area holds, as its pop said (0: none known): every
        #: call that ends it names it, and changes nothing when the area holds another.
        self.batch = 0
        #: The process stops or the shard is handed over: ``should_stop()`` is true.
        self.stopping = False
        #: No pop before this time (time.monotonic; 0: any time): a reshard holds the
        #: shard, its groups are full, or another suspect runs first.  A wake-up of the
        #: shard, or a group place freed, ends the wait.
        self.not_before = 0.0
        #: When its last pop found it holding no job at all (time.monotonic; ``None``:
        #: not so): an idle process asks not its due time until a wake-up or another pop.
        self.empty_since: float | None = None
        #: The worker's group caps in this process (``None``: none applied).
        self.group_caps = group_caps
        #: The worker's rate limit, as this shard applies it (``None``: never limited).
        self.throttle = (
            None
            if rate_limits is None or worker.queue_name not in rate_limits.class_limits
            else ShardThrottle(rate_limits, queue, worker.batch_size)
        )
        #: The lease's local deadline, kept by the renewer (``None``: not tracked).
        self.term: Term | None = None
        #: Jobs the acquisition moved to the morgue (``max_restores``): reported as the
        #: shard is granted to the dispatcher (:meth:`report_exhausted`).
        self.exhausted: list[dict[str, Any]] = []
        #: Recent batches' time, decaying (``None``: none ran yet).
        self.batch_seconds: float | None = None
        # What the last pop carried: the ack of a finished batch, its rate-limit arguments,
        # and the jobs it asked for, when its answer says whether it left due jobs behind
        # (0: not known, under a rate limit or group caps).
        self._pop_acks = False
        # A call that acked the finished batch (:attr:`batch`) failed, its outcome unknown:
        # the batch is acked by its number before the area is restored (it ran: it must
        # not run again).
        self._ack_unknown = False
        self._pop_throttle: Throttle | None = None
        self._pop_limit = 0
        self._lapse_logged: float | None = None  # one warning per lapse
        #: The processing area holds workflow members: the script that ends its batch
        #: notes them (its ack flagged, ``w``), then the process's relayer tells their
        #: workflows (:mod:`lowkiq.workflows.relayer`).
        self.members = False
        self._stale_logged = False

    @property
    def lost(self) -> bool:
        """Redis refused the lease token: the handler is never used again."""
        return self.life.state is LOST

    @property
    def unacked(self) -> bool:
        """Whether a finished batch waits in the processing area for its ack."""
        return self.life.state is FINISHED

    def __repr__(self) -> str:
        return f"<ShardHandler {self.name}>"

    # -- the dispatcher's side: every Redis call -------------------------------------

    def ready(self) -> bool:
        """Whether a pop may be tried now: the lease held and confirmed in time (one that
        may have lapsed waits for a renewal; logged once per lapse), the processing area
        known (restored first when it was not; not while its master does not answer), no
        wait (:attr:`not_before`, a rate limit)."""
        if self.lost:
            return False
        if self.lapsed():
            self._log_lapse()
            return False
        try:  # after an interrupted call the processing area's state is unknown
            if self.life.state is UNSURE and not self._recover():
                return False
        except MasterDown:
            return False
        if self.not_before:
            if time.monotonic() < self.not_before:
                return False
            self.not_before = 0.0
        return self.throttle is None or not self.throttle.waiting()

    def pop_command(self, packed: bool = True) -> Request:
        """The shard's pop, acking its finished batch in the same script: packed to go out
        with other shards' pops in one write, or a call of its own (not ``packed``: a
        client that cannot pack them, e.g. one waiting for replicas).  What it carries is
        kept to read its reply (:meth:`take`)."""
        acking = self._pop_acks = self.unacked
        caps = self.group_caps
        throttle = None if self.throttle is None else self.throttle.args(self.batches())
        self._pop_throttle = throttle
        capped = None if caps is None else caps.skipped()
        # One batch when rate-limited: the throttle's arguments say how many it takes, and
        # a per-group rate's tokens are claimed after the pop (a bucket holds one batch).
        one = throttle is not None or (caps is not None and caps.rate() is not None)
        batches = 1 if one else self.batches()
        plain = throttle is None and capped is None
        self._pop_limit = self.worker.batch_size * batches if plain else 0
        self.life.to(POPPING)
        args: dict[str, Any] = {
            "shard": self.shard,
            "token": self.token,
            "limit": self.worker.batch_size,
            "ack_shard": self.shard if acking else None,
            "ack_token": self.token if acking else "",
            "throttle": throttle,
            "batches": batches,
            "capped": capped,
            "ack_batch": (f"{self.batch}w" if self.members else self.batch) if acking else 0,
        }
        if packed:
            return self.queue.pop_command(**args)
        return functools.partial(self.queue.pop, **args)

    def batches(self) -> int:
        """How many batches a pop may take (see :data:`POP_SECONDS`); one until a batch ran."""
        seconds = self.batch_seconds
        if seconds is None:
            return 1
        return max(1, min(MAX_BATCHES, int(POP_SECONDS / max(seconds, 1e-6))))

    def unsent(self) -> None:
        """Its pop was not sent (its master is out): as it was."""
        self.life.to(FINISHED if self._pop_acks else IDLE)

    def interrupted(self) -> None:
        """A call for this shard failed: what it did is unknown (restored before the next
        pop; a finished batch it may have acked, acked first)."""
        state = self.life.state
        if state is FINISHED or (state is POPPING and self._pop_acks):
            self._ack_unknown = True
        self.life.to(UNSURE)

    def _recover(self) -> bool:
        """After an interrupted call: the finished batch whose ack's outcome is unknown
        acked by its number (the area held nothing else then: done), else whatever the
        processing area holds put back; ``False`` when the lease is lost."""
        if self._ack_unknown:
            self.ack_now()  # a stale batch (acked already) leaves the shard UNSURE
            self._ack_unknown = False
            if self.life.state is not UNSURE:
                return not self.lost
        return self.restore(reason="redis_error")

    def take(self, popped: Popped) -> Taken:
        """Read the reply of its pop (:meth:`pop_command`): the batches to perform.  The
        shard stays POPPING until they are handed over, IDLE when none."""
        acking, throttle = self._pop_acks, self._pop_throttle
        self._pop_acks = False  # (its ack's outcome is known now)
        self.empty_since = time.monotonic() if popped.empty else None
        if acking and popped.acked == ACK_FENCED:
            self.lease_lost("its finished batch was not acked")
            return Taken()
        if acking and popped.acked == ACK_STALE:
            self.stale("its ack")
        if acking and self.members and popped.acked >= 0:  # (of the batch it acked)
            self.relay_members()
        if not popped.jobs:
            self.life.to(IDLE)
            self.members = False
        else:
            self.batch = popped.batch
            self.members = popped.members
        if popped.fenced:
            self.lease_lost("nothing popped")
            return Taken()
        if popped.held:
            self.not_before = time.monotonic() + HELD_RETRY
            return Taken()
        if throttle is not None and self.throttle is not None:  # only such a pop is limited
            self.throttle.after(popped, throttle)
            if popped.limited:
                return Taken()
        if popped.occupied:  # its processing area holds a batch we do not know of
            log.warning("%s: processing area occupied; restoring it", self.name)
            self.restore(reason="redis_error")
            return Taken(again=True)
        jobs = popped.jobs
        if not jobs:
            if self.group_caps is not None and self.group_caps.waits_for_places():
                self.not_before = time.monotonic() + self.group_caps.retry_in()
            return Taken()
        undecodable = [job for job in jobs if job.undecodable is not None]
        if undecodable:
            jobs = [job for job in jobs if job.undecodable is None]
            if not self._bury(undecodable):
                return Taken(again=True)
            if any(job.workflows for job in undecodable):
                self.relay_members()
            if not jobs:
                self.life.to(IDLE)
                return Taken(again=True)
        size = self.worker.batch_size
        if len(jobs) <= size:
            batches = [jobs]
        elif size == 1:  # (no slices)
            batches = [[job] for job in jobs]
        else:
            batches = [jobs[i : i + size] for i in range(0, len(jobs), size)]
        # (A suspect is popped alone, whatever else is due.)
        drained = len(popped.jobs) < self._pop_limit and not popped.suspect
        return Taken(batches, popped.suspect, groups=popped.groups, drained=drained)

    def settle(self, outcomes: Sequence[Outcome], unrun: bool = False) -> None:
        """Record what a pop's batches did: their cancelled jobs end as cancelled, each
        failed batch fails (one script each), the others wait for their ack (FINISHED);
        ``unrun``: some were not performed, so the rest of the area goes back to the queue.
        A Redis error is raised (UNSURE); LOST: nothing."""
        if self.lost:
            return
        cancelled = [job_id for outcome in outcomes for job_id in outcome.cancelled]
        if cancelled and not self._cancel(cancelled):
            return  # lost, or its batch ended already
        if unrun:
            self._log_lapse()
        yields: dict[str, list[int]] = {}
        succeeded = False
        for outcome in outcomes:
            if outcome.error is None:
                succeeded = True
                if outcome.yields:
                    yields.update(outcome.yields)
            elif not self._fail(outcome.jobs, outcome.error, outcome.verdict):
                return  # lost, or its batch ended already
        if unrun:
            self.restore(reason="given_up")
        elif yields:
            self._end(
                lambda: self.queue.ack_yield(self.shard, self.token, self.batch, yields), "its ack"
            )
        else:
            self.life.to(FINISHED if succeeded else IDLE)
        if self.members:
            self.relay_members()

    def relay_members(self) -> None:
        """The scripts noted workflow members of this shard's batch in its outbox: have
        the process's relayer tell their workflows (no Redis call here)."""
        RELAYER.notify(self.queue.name, self.shard)

    def ack_command(self, packed: bool = True) -> Request:
        """The shard's ack, as :meth:`pop_command`'s; its reply is read by :meth:`acked`."""
        if packed:
            return self.queue.ack_command(self.shard, self.token, self.batch, self.members)
        return functools.partial(self.queue.ack, self.shard, self.token, self.batch, self.members)

    def acked(self, reply: Any) -> None:
        """Read the reply of :meth:`ack_command` (an error reply raised as the call's)."""

        def read() -> Any:
            if isinstance(reply, redis.ResponseError):
                self.queue.raise_refusal(reply, self.shard)
            if isinstance(reply, Exception):
                raise reply
            return reply

        self._ack(read)

    def ack_now(self) -> None:
        """Ack this shard's finished batch in its own round trip."""
        self._ack(lambda: self.queue.ack(self.shard, self.token, self.batch, self.members))

    def _ack(self, call: Callable[[], Any]) -> None:
        if self._end(call, "its ack")[0] and self.members:
            self.relay_members()

    def _end(
        self, call: Callable[[], Any], what: str, then: State | None = IDLE
    ) -> tuple[bool, Any]:
        """The one place a batch ends: run ``call``, a script that acks, fails, yields,
        buries or restores the batch (or part of it) it names.  Returns whether it did,
        and its reply; the shard is then ``then`` (``None``: unchanged).  A refused lease
        makes it LOST; a stale batch (nothing changed) or an error (raised) UNSURE."""
        try:
            reply = call()
        except LeaseLost:
            self.lease_lost(f"{what} was refused")
            return False, None
        except StaleBatch:
            self.stale(what)
            self.life.to(UNSURE)
            return False, None
        except redis.RedisError:
            self.interrupted()
            raise
        if then is not None:
            self.life.to(then)
        return True, reply

    def announce_stop(self) -> None:
        """The process stops while the batch runs: said in Redis, so that a kill's restore
        counts no restore."""
        self.stopping = True
        if self.lost:
            return
        try:
            self.queue.announce_stop(self.shard, self.token)
        except LeaseLost:
            self.lease_lost("its stop was not announced")
        except redis.RedisError as exc:
            log.warning("%s: could not announce the stop (%s)", self.name, exc)

    def should_stop(self) -> bool:
        """Whether a running perform should end soon: a stop, a hand-over, or the lease
        lost or within a quarter of its TTL of lapsing."""
        if self.stopping or self.lost:
            return True
        term = self.term
        return term is not None and term.remaining() < term.ttl / 4

    def give_back(self) -> None:
        """Put a batch not run back (its group is full); a Redis error leaves it UNSURE."""
        with contextlib.suppress(redis.RedisError):
            self.restore(quiet=True, reason="group_full")

    def restore(self, quiet: bool = False, reason: str = "given_up") -> bool:
        """Put the shard's batch back into the queue: the one it popped while the area holds
        it, else whatever the area holds; ``False`` when the lease is lost.  ``quiet``:
        never run (no log line); ``reason``: for its jobs' events (``RESTORE_REASONS``)."""
        batch = self.batch if self.life.state in HOLDING else None
        _, count = self._end(
            lambda: self.queue.restore(self.shard, self.token, batch, reason=reason), "its restore"
        )
        if count and not quiet:
            log.info("%s: restored %d job(s) left in processing", self.name, count)
        return not self.lost

    def lease_lost(self, what: str) -> None:
        """Redis refused this handler's lease token: stop serving the shard."""
        if self.lost:
            return
        self.life.to(LOST)
        log.warning(
            "%s: lease epoch %s is no longer held (%s); the shard's new owner restores its batch",
            self.name, self.token.split(" ", 1)[0], what,
        )  # fmt: skip
        if self.on_lost is not None:
            self.on_lost(self)

    def stale(self, what: str) -> None:
        """The batch a call named is no longer in processing (nothing changed): counted in
        Redis (``stale_calls``), logged once per shard."""
        with contextlib.suppress(redis.RedisError):
            self.queue.count_stale(self.shard)
        if not self._stale_logged:
            self._stale_logged = True
            log.warning(
                "%s: %s named batch %d, no longer in processing; nothing was changed",
                self.name, what, self.batch,
            )  # fmt: skip

    def _fail(
        self, batch: Sequence[PoppedJob], exc: Exception, verdict: Verdict | None = None
    ) -> bool:
        """Settle a batch whose ``perform`` raised ``exc`` in one script, each job as
        ``verdict`` says; ``retries_exhausted`` gets those buried.  Returns whether it
        was settled (:meth:`_end`)."""
        verdict = verdict or self.judge(batch, exc)
        ends = job_ends(self.name, self.worker, batch, verdict)
        settled, morgue = self._end(
            lambda: self.queue.settle_failed(
                self.shard, self.token, self.batch, ends, self.worker.max_retry_count
            ),
            "the failure of its batch",
            then=None,
        )
        if morgue:
            self.call_user(lambda: call_retries_exhausted(self.worker, morgue, self.name))
        return settled

    def _cancel(self, ids: list[str]) -> bool:
        """Settle ``ids`` of the batch as cancelled (``Worker.actions().cancel``), in one
        script; whether it was (:meth:`_end`)."""
        settled, count = self._end(
            lambda: self.queue.run_fenced(
                "cancel_settle", self.shard, self.token, self.batch, *ids
            ),
            "the cancel of its jobs",
            then=None,
        )
        if settled:
            log.info("%s: %d job(s) settled as cancelled: %s", self.name, count, ids[:10])
        return settled

    def judge(self, batch: Sequence[PoppedJob], exc: Exception) -> Verdict:
        """How each job of ``batch`` ends now that ``perform`` raised ``exc``
        (:mod:`lowkiq.runtime.job_ends`)."""
        return judge_batch(self.name, self.format_error, batch, exc)

    def report_exhausted(self) -> None:
        """Tell the worker about the jobs the acquisition moved to the morgue (none: no
        call), as the shard is granted to the dispatcher, on the granting thread
        (:meth:`lowkiq.runtime.dispatcher.Dispatcher.tell`): no Redis call; the hook
        runs by :attr:`call_user`."""
        if not self.exhausted:
            return
        jobs, self.exhausted = self.exhausted, []
        # The acquisition's restore noted the workflow members it buried (if any).
        self.relay_members()
        for job in jobs:
            log.error("%s: job %r: %s", self.name, job["id"], job["error"])
        self.call_user(lambda: call_retries_exhausted(self.worker, jobs, self.name))

    def _bury(self, jobs: Sequence[PoppedJob]) -> bool:
        """Send undecodable jobs to the morgue (bytes kept); the rest of the batch goes on.
        Returns whether they were buried (:meth:`_end`)."""
        errors = [(job.id, f"{job.undecodable}; moved to the morgue unperformed") for job in jobs]
        for job_id, error in errors:
            log.error("%s: job %r: %s", self.name, job_id, error)
        buried, _ = self._end(
            lambda: self.queue.bury(self.shard, self.token, self.batch, errors),
            "the burial of its undecodable jobs",
            then=None,
        )
        return buried

    def lapsed(self) -> bool:
        """Whether the lease may have lapsed by this process's clock (a batch not yet
        performed then goes back)."""
        return self.term is not None and self.term.remaining() <= 0

    def _log_lapse(self) -> None:
        """Warn that the lease may have lapsed, once until a renewal is confirmed."""
        confirmed = None if self.term is None else self.term.confirmed_at
        if confirmed is not None and confirmed == self._lapse_logged:
            return
        self._lapse_logged = confirmed
        log.warning(
            "%s: lease epoch %s may have lapsed (no renewal confirmed in time); no batch "
            "is performed until one is, and those taken go back to the queue unperformed",
            self.name, self.token.split(" ", 1)[0],
        )  # fmt: skip
