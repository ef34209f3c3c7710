"""Process one batch of one shard: pop, run the middlewares around ``perform``, ack or fail.

The ack of a successful batch is deferred: it rides on the next pop of the
same shard (one Redis round trip per batch), and a thread settles it before
it turns to another shard or goes idle (:class:`DeferredAck`).

After a Redis error the handler does not know what the interrupted script
did, so it restores the shard's processing area before popping again: a
batch is never dropped, at worst performed twice (at-least-once).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import redis

from lowkiq.middleware import Batch, ServerMiddleware, chain
from lowkiq.storage.queue import PoppedJob, Queue
from lowkiq.worker import Worker

log = logging.getLogger("lowkiq.shard_handler")


def run_perform(
    worker: type[Worker], batch: Batch, middlewares: Sequence[ServerMiddleware]
) -> None:
    """Call ``worker.perform(batch)`` inside the server middlewares, the first outermost."""

    def perform(final_worker: type[Worker], final_batch: Batch) -> None:
        final_worker.perform(final_batch)

    chain(middlewares, perform)(worker, batch)


class DeferredAck:
    """The one handler of a thread whose successful batch is not acked yet."""

    def __init__(self) -> None:
        self.holder: ShardHandler | None = None

    def settle(self) -> None:
        """Ack the held batch now, in its own round trip."""
        holder = self.holder
        if holder is not None:
            self.holder = None
            holder.ack_now()

    def ride(self, popper: ShardHandler) -> ShardHandler | None:
        """Hand the held batch to ``popper``'s next pop to ack, when it can carry it.

        A pop acks a shard of its own queue on its own connection in the same
        script; any other held batch is acked now.  Returns the handler whose
        batch the pop must ack, or ``None``.
        """
        holder = self.holder
        if holder is None:
            return None
        self.holder = None
        same_queue = holder.queue.name == popper.queue.name
        if same_queue and holder.queue.client is popper.queue.client:
            return holder
        holder.ack_now()
        return None


class ShardHandler:
    """Processes the batches of one shard of one worker."""

    def __init__(
        self,
        worker: type[Worker],
        shard: int,
        queue: Queue,
        deferred: DeferredAck | None = None,
        middlewares: Sequence[ServerMiddleware] = (),
        format_error: Callable[[BaseException], str] = str,
    ) -> None:
        self.worker = worker
        self.shard = shard
        self.queue = queue
        self.deferred = deferred or DeferredAck()
        self.middlewares = middlewares
        self.format_error = format_error
        # A Redis call was interrupted: the processing area's state is unknown.
        self.unsure = False

    @property
    def name(self) -> str:
        """``Worker:shard``, for logs."""
        return f"{self.worker.__name__}:{self.shard}"

    def __repr__(self) -> str:
        return f"<ShardHandler {self.name}>"

    def process(self) -> bool:
        """Pop and run one batch; ``False`` when nothing was due.

        Raises ``redis.RedisError`` when Redis fails (the handler then restores
        the shard on its next call) and lets a ``BaseException`` that is not an
        ``Exception`` escape from ``perform``, leaving the batch in processing.
        """
        if self.unsure:
            self.restore()
        riding = self.deferred.ride(self)
        try:
            batch = self.queue.pop(
                self.shard,
                self.worker.batch_size,
                ack_shard=None if riding is None else riding.shard,
            )
        except redis.RedisError:
            # Neither this pop nor the ack it carried is known to have happened.
            self.unsure = True
            if riding is not None:
                riding.unsure = True
            raise
        if batch is None:
            # Our shard's processing area holds a batch we do not know of.
            log.warning("%s: processing area occupied; restoring it", self.name)
            self.restore()
            return True
        if not batch:
            return False
        try:
            run_perform(self.worker, {job.id: job.payloads for job in batch}, self.middlewares)
        except Exception as exc:
            self._fail(batch, exc)
            return True
        self.deferred.holder = self
        return True

    def ack_now(self) -> None:
        """Ack this shard's finished batch in its own round trip."""
        self._guarded(lambda: self.queue.ack(self.shard))

    def restore(self) -> int:
        """Put the shard's processing area back into the queue; returns how many jobs."""
        if self.deferred.holder is self:
            self.deferred.holder = None
        count = self._guarded(lambda: self.queue.restore(self.shard))
        self.unsure = False
        if count:
            log.info("%s: restored %d job(s) left in processing", self.name, count)
        return count

    def _guarded(self, call: Callable[[], Any]) -> Any:
        try:
            return call()
        except redis.RedisError:
            self.unsure = True
            if self.deferred.holder is self:
                self.deferred.holder = None
            raise

    def _fail(self, batch: Sequence[PoppedJob], exc: Exception) -> None:
        log.warning(
            "%s: batch of %d job(s) failed: %s: %s",
            self.name,
            len(batch),
            type(exc).__name__,
            exc,
            exc_info=exc,
        )
        try:
            error = self.format_error(exc)
        except Exception:
            log.exception("%s: format_error raised; storing str(exc)", self.name)
            error = str(exc)
        morgue = self._guarded(
            lambda: self.queue.fail(
                self.shard, batch, error, self._retry_in, self.worker.max_retry_count
            )
        )
        if morgue:
            try:
                self.worker.retries_exhausted(morgue)
            except Exception:
                log.exception("%s: retries_exhausted raised", self.name)

    def _retry_in(self, retry_count: int) -> float:
        try:
            return float(self.worker.retry_in(retry_count))
        except Exception:
            log.exception("%s: retry_in raised; using the default delay", self.name)
            return float(Worker.retry_in(retry_count))
