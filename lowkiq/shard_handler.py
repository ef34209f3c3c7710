"""Process one batch of one shard: pop, run the middlewares around ``perform``, ack or fail.

A handler works only while its process holds the shard's lease
(:mod:`lowkiq.ownership.leases`): every pop, ack, fail and restore carries
the lease token, and when Redis refuses it (the lease expired, or another
process took the shard) the handler drops that result, logs it, and calls
``on_lost`` so its thread stops serving the shard; the new owner restores the
batch.

The ack of a successful batch is deferred: it rides on the thread's next pop
(one Redis round trip per batch), and a thread acks it on its own before it goes idle
or gives the shard up (:class:`DeferredAck`).  Under a rate limit one pop may take
several batches, as many as the shard performs in :data:`GROUP_SECONDS`: they run one
after the other and are acked together.

After a Redis error the handler does not know what the interrupted script
did, so it restores the shard's processing area before popping again: a
batch is never dropped, at worst performed twice (at-least-once).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import redis

from lowkiq import suspects
from lowkiq.connection import KeyedCommand
from lowkiq.coroutines import settle
from lowkiq.errors import LeaseLost
from lowkiq.middleware import Batch, Next, ServerMiddleware, chain
from lowkiq.ownership.leases import Term
from lowkiq.running import Running, RunningBatch, running
from lowkiq.storage.queue import ACK_FENCED, Popped, PoppedJob, Queue
from lowkiq.storage.rate_bucket import Throttle
from lowkiq.telemetry.recorder import NO_RECORDER, BatchRecorder
from lowkiq.throttling import RateLimits, ShardThrottle
from lowkiq.worker import Worker

log = logging.getLogger("lowkiq.shard_handler")

#: Seconds between two pops of a shard a reshard holds (unless its wake list fires).
HELD_RETRY = 0.5
#: Under a rate limit one pop takes several batches (at most what the shard's reserved
#: tokens pay for), as many as the shard performs in this many seconds judging by its
#: last batches: a round trip, and a wake-up of Redis, serves them all.
GROUP_SECONDS = 0.05
#: How fast the time a shard's batches take is forgotten (per batch): one slow batch
#: shrinks the next pops at once, and they grow back over a few dozen batches.
BATCH_TIME_DECAY = 0.8


def _perform(worker: type[Worker], batch: Batch) -> None:
    settle(worker.perform(batch))


def perform_chain(middlewares: Sequence[ServerMiddleware]) -> Next[type[Worker], Batch]:
    """``call(worker, batch)``: ``worker.perform(batch)`` inside the server middlewares,
    the first outermost; a coroutine ``perform`` runs on the calling thread's event loop."""
    return chain(middlewares, _perform)


def _ack_of(acked: ShardHandler | None) -> tuple[int | None, str]:
    """The ``ack_shard`` and ``ack_token`` of a pop that carries ``acked``'s ack."""
    return (None, "") if acked is None else (acked.shard, acked.token)


class DeferredAck:
    """The handlers of one thread whose successful batch is not acked yet.

    Each shard's ack waits for that shard's next pop, which acks it in the
    same script, or for the thread to go idle or give the shard up: one script
    per batch rather than two.  A thread sends its due shards' pops together
    (:meth:`~lowkiq.processing_thread.ProcessingThread.process`), so up to one performed
    batch per shard of the thread (under a rate limit, the batches of its last pop) runs
    again after a crash.  On one server a pop may also ack another shard of its queue
    (the round-robin scheduler pops a different shard each time); on a Redis Cluster a
    script touches one shard (one slot).
    """

    def __init__(self) -> None:
        self.pending: list[ShardHandler] = []

    def defer(self, handler: ShardHandler) -> None:
        """``handler``'s batch succeeded: ack it later (with any other batch of the same
        pop)."""
        if handler not in self.pending:
            self.pending.append(handler)

    def forget(self, handler: ShardHandler) -> None:
        """Drop ``handler``'s pending ack (its lease is lost, or its state unknown)."""
        if handler in self.pending:
            self.pending.remove(handler)

    def flush(self, keep: Sequence[object] = ()) -> None:
        """Ack the pending batches now, a round trip each, but those of ``keep``.

        Every ack is tried; when Redis fails some, the first error is raised once the
        others are done (a failed one's shard is unsure: restored before its next pop,
        or by its next owner)."""
        failure: redis.RedisError | None = None
        for waiting in [h for h in self.pending if h not in keep]:
            self.pending.remove(waiting)
            try:
                waiting.ack_now()
            except redis.RedisError as exc:
                failure = failure or exc
        if failure is not None:
            raise failure

    def ack_with_pop(self, popper: ShardHandler) -> ShardHandler | None:
        """Hand a pending ack to ``popper``'s next pop, when it can carry it.

        A pop acks its own shard's batch, and on one server any shard's of its
        own queue on its own connection, in the same script; on one server any
        other pending batch is acked now.  Returns the handler whose batch the pop
        must ack, or ``None``.
        """
        if popper in self.pending:
            self.pending.remove(popper)
            return popper
        if not self.pending or popper.queue.cluster:
            return None
        waiting = self.pending.pop()
        same_queue = waiting.queue.name == popper.queue.name
        if same_queue and waiting.queue.client is popper.queue.client:
            return waiting
        waiting.ack_now()
        return None


class ShardHandler:
    """Processes the batches of one shard of one worker."""

    def __init__(
        self,
        worker: type[Worker],
        shard: int,
        queue: Queue,
        token: str,
        deferred: DeferredAck | None = None,
        middlewares: Sequence[ServerMiddleware] = (),
        format_error: Callable[[BaseException], str] = str,
        on_lost: Callable[[ShardHandler], None] | None = None,
        recorder: BatchRecorder = NO_RECORDER,
        rate_limits: RateLimits | None = None,
    ) -> None:
        self.worker = worker
        self.shard = shard
        self.queue = queue
        self.token = token
        self.deferred = deferred or DeferredAck()
        self.middlewares = middlewares
        # perform inside the middlewares, chained once.
        self._perform = perform_chain(middlewares)
        #: ``Worker:shard``, for logs and the health endpoints.
        self.name = f"{worker.__name__}:{shard}"
        self.format_error = format_error
        self.on_lost = on_lost
        # Counts every performed batch for the metrics history.
        self.recorder = recorder
        # A Redis call was interrupted: the processing area's state is unknown.
        self.unsure = False
        # Redis refused the lease token: this handler must not be used again.
        self.lost = False
        # Whether perform is running now (shown on the dashboard's processes page).
        self.busy = False
        #: Until when (time.monotonic) a reshard holds the shard: no pop is tried.
        self.held_until = 0.0
        #: The worker's rate limit, as this shard applies it (``None``: never limited).
        self.throttle = (
            None
            if rate_limits is None or worker.queue_name not in rate_limits.class_limits
            else ShardThrottle(rate_limits, queue, worker.batch_size)
        )
        #: The lease's local deadline, kept by the renewer (``None``: not tracked).
        self.term: Term | None = None
        #: Jobs the shard's acquisition moved to the morgue (their process died running
        #: them ``max_restores`` times): ``retries_exhausted`` is called before the next pop.
        self.exhausted: list[dict[str, Any]] = []
        # Under a rate limit: seconds the shard's recent batches took (the longest, as it
        # decays), for the number of batches a pop takes; None before the first.
        self._batch_seconds: float | None = None

    @property
    def key(self) -> tuple[str, int]:
        """``(queue name, shard)``: what leases and the assignment are keyed by."""
        return (self.queue.name, self.shard)

    def __repr__(self) -> str:
        return f"<ShardHandler {self.name}>"

    def process(self) -> bool:
        """Pop and run one batch; ``False`` when nothing was due (or the lease is lost).

        Raises ``redis.RedisError`` when Redis fails (the handler then restores
        the shard on its next call) and lets a ``BaseException`` that is not an
        ``Exception`` escape from ``perform``, leaving the batch in processing.
        """
        if not self.ready():
            return False
        acked = self.deferred.ack_with_pop(self)
        throttle = self.throttle.args(self.batches()) if self.throttle is not None else None
        try:
            popped = self.queue.pop(
                self.shard, self.token, self.worker.batch_size, None, *_ack_of(acked), throttle
            )
        except redis.RedisError:
            self.interrupted(acked)
            raise
        return self.take(popped, acked, throttle=throttle)

    def ready(self) -> bool:
        """Whether a pop may be tried now: the lease is held, the processing area is
        known (it is restored first when it was not), and no reshard holds the shard."""
        if self.lost:
            return False
        if self.exhausted:
            self._report_exhausted()
        if self.unsure and not self.restore():
            return False
        if self.held_until:
            if time.monotonic() < self.held_until:
                return False
            self.held_until = 0.0
        return self.throttle is None or not self.throttle.waiting()

    def pop_command(self, acked: ShardHandler | None) -> tuple[KeyedCommand, Throttle | None]:
        """This shard's pop, acking ``acked``'s batch (from :meth:`DeferredAck.ack_with_pop`),
        packed to go out with other shards' pops in one write, and its rate-limit
        arguments (both for :meth:`take`)."""
        throttle = self.throttle.args(self.batches()) if self.throttle is not None else None
        command = self.queue.pop_command(
            self.shard, self.token, self.worker.batch_size, *_ack_of(acked), throttle
        )
        return command, throttle

    def batches(self) -> int:
        """How many batches a rate-limited pop of the shard may take: as many as it
        performs in :data:`GROUP_SECONDS`, judging by its recent batches (one until one
        ran); its reserved tokens bound them further (:meth:`ShardThrottle.args`)."""
        seconds = self._batch_seconds
        if seconds is None:
            return 1
        return max(1, int(GROUP_SECONDS / max(seconds, 1e-6)))

    def interrupted(self, acked: ShardHandler | None) -> None:
        """A pop carrying ``acked``'s ack failed: neither is known to have happened."""
        self.unsure = True
        if acked is not None:
            acked.unsure = True

    def take(
        self,
        popped: Popped,
        acked: ShardHandler | None,
        perform: bool = True,
        throttle: Throttle | None = None,
    ) -> bool:
        """Run the batches a pop (with the rate-limit arguments ``throttle``) took, one
        after the other, the pop having acked ``acked``'s; ``False`` when it took none.
        ``perform=False``: put them back into the queue unperformed (the thread is
        stopping, or handing the shard over) instead."""
        if acked is not None and popped.acked == ACK_FENCED:
            acked.lease_lost("its finished batch was not acked")
        if popped.fenced:
            self.lease_lost("nothing popped")
            return False
        if popped.held:
            self.held_until = time.monotonic() + HELD_RETRY
            return False
        if throttle is not None and self.throttle is not None:
            # Only a pop with rate-limit arguments is limited, or says when to come back.
            self.throttle.after(popped, throttle)
            if popped.limited:
                return False
        if popped.occupied:
            # Our shard's processing area holds a batch we do not know of.
            log.warning("%s: processing area occupied; restoring it", self.name)
            self.restore()
            return True
        if not perform:
            if popped.jobs:
                self.restore()
            return False
        jobs = popped.jobs
        if not jobs:
            return False
        size = self.worker.batch_size
        # A rate-limited pop may take several batches: they run one after the other.
        batches = (
            [jobs] if len(jobs) <= size else [jobs[i : i + size] for i in range(0, len(jobs), size)]
        )
        undecodable = [job for job in jobs if job.undecodable is not None]
        if undecodable:
            self._bury(undecodable)
            batches = [[job for job in batch if job.undecodable is None] for batch in batches]
            batches = [batch for batch in batches if batch]
            if self.lost or not batches:
                return True
        if popped.suspect:
            return self._lapsed() or self._run_suspect(batches[0])
        for batch in batches:
            if self.lost or self._lapsed():
                break
            self._run(batch)
        return True

    def _lapsed(self) -> bool:
        """Whether the lease may have lapsed while the popped batches waited (a pause, a
        slow round): then they go back unperformed (with any of them performed already,
        which run again), and the shard's owner runs them."""
        if self.term is None or self.term.remaining() > 0:
            return False
        log.warning(
            "%s: lease epoch %s may have lapsed; batch put back unperformed",
            self.name,
            self.token.split(" ", 1)[0],
        )
        self.restore()
        return True

    def _run_suspect(self, batch: Sequence[PoppedJob]) -> bool:
        """Run a job that ended a process before (:mod:`lowkiq.suspects`): alone in the
        process, the thread's finished batches acked first, itself acked at once."""
        if not suspects.running.acquire(blocking=False):
            self.restore()  # another suspect runs: this one waits in its queue
            self.held_until = time.monotonic() + suspects.RETRY
            return True
        try:
            self.deferred.flush()
            if self._run(batch):
                self.deferred.forget(self)
                self.ack_now()
        finally:
            suspects.running.release()
        return True

    def _run(self, batch: Sequence[PoppedJob]) -> bool:
        """Perform ``batch`` inside the middlewares; ``True`` when it succeeded (its ack
        is then deferred), ``False`` when it failed (the failure is recorded)."""
        self.busy = True
        context = running.set(Running(self, batch))
        started = time.time()
        failure: Exception | None = None
        try:
            self._perform(self.worker, {job.id: job.payloads for job in batch})
        except Exception as exc:
            failure = exc
        # (A BaseException escapes: the batch stays in processing, the process ends.)
        self.busy = False
        running.reset(context)
        if self.throttle is not None:
            self._timed(started)
        self.recorder.performed(batch, started, failure is not None)
        if failure is not None:
            self._fail(batch, failure)
            return False
        self.deferred.defer(self)
        return True

    def _timed(self, started: float) -> None:
        """Keep how long the shard's batches take (see :meth:`batches`)."""
        seconds = max(time.time() - started, 0.0)
        kept = self._batch_seconds
        self._batch_seconds = seconds if kept is None else max(seconds, kept * BATCH_TIME_DECAY)

    def lease_lost(self, what: str) -> None:
        """Redis refused this handler's lease token: stop serving the shard."""
        self.deferred.forget(self)
        if self.lost:
            return
        self.lost = True
        log.warning(
            "%s: lease epoch %s is no longer held (%s); the shard's new owner restores its batch",
            self.name,
            self.token.split(" ", 1)[0],
            what,
        )
        if self.on_lost is not None:
            self.on_lost(self)

    def ack_now(self) -> None:
        """Ack this shard's finished batch in its own round trip."""
        try:
            self._guarded(lambda: self.queue.ack(self.shard, self.token))
        except LeaseLost:
            self.lease_lost("its finished batch was not acked")

    def restore(self) -> bool:
        """Put the shard's processing area back into the queue; ``False`` when the lease is lost."""
        self.deferred.forget(self)
        try:
            count = self._guarded(lambda: self.queue.restore(self.shard, self.token))
        except LeaseLost:
            self.unsure = False
            self.lease_lost("its processing area was not restored")
            return False
        self.unsure = False
        if count:
            log.info("%s: restored %d job(s) left in processing", self.name, count)
        return True

    def _guarded(self, call: Callable[[], Any]) -> Any:
        try:
            return call()
        except redis.RedisError:
            self.unsure = True
            self.deferred.forget(self)
            raise

    def _fail(self, batch: Sequence[PoppedJob], exc: Exception) -> None:
        log.warning(
            "%s: batch of %d job(s) failed: %s: %s",
            self.name,
            len(batch),
            type(exc).__name__,
            exc,
            exc_info=exc,
            extra=RunningBatch.popped(self.worker, self.shard, batch).log_fields(),
        )
        try:
            error = self.format_error(exc)
        except Exception:
            log.exception("%s: format_error raised; storing str(exc)", self.name)
            error = str(exc)
        try:
            morgue = self._guarded(
                lambda: self.queue.fail(
                    self.shard,
                    self.token,
                    batch,
                    error,
                    self._retry_in,
                    self.worker.max_retry_count,
                )
            )
        except LeaseLost:
            self.lease_lost("the failure of its batch was not recorded")
            return
        if morgue:
            try:
                settle(self.worker.retries_exhausted(morgue))
            except Exception:
                log.exception("%s: retries_exhausted raised", self.name)

    def _report_exhausted(self) -> None:
        """Tell the worker about the jobs the shard's acquisition moved to the morgue."""
        jobs, self.exhausted = self.exhausted, []
        for job in jobs:
            log.error("%s: job %r: %s", self.name, job["id"], job["error"])
        try:
            settle(self.worker.retries_exhausted(jobs))
        except Exception:
            log.exception("%s: retries_exhausted raised", self.name)

    def _bury(self, jobs: Sequence[PoppedJob]) -> None:
        """Send jobs that cannot be performed (a payload cannot be decoded) straight
        to the morgue, their stored bytes kept; the rest of the batch goes on."""
        errors = [(job.id, f"{job.undecodable}; moved to the morgue unperformed") for job in jobs]
        for job_id, error in errors:
            log.error("%s: job %r: %s", self.name, job_id, error)
        try:
            self._guarded(lambda: self.queue.bury(self.shard, self.token, errors))
        except LeaseLost:
            self.lease_lost("its undecodable jobs were not buried")

    def _retry_in(self, retry_count: int) -> float:
        try:
            return float(self.worker.retry_in(retry_count))
        except Exception:
            log.exception("%s: retry_in raised; using the default delay", self.name)
            return float(Worker.retry_in(retry_count))
