"""Structured logging of batches: the worker, shard and ids as a log record's extra fields.

``log_batches()`` is a server middleware that logs one line per batch (done
or failed, with its duration); :class:`BatchFields` is a logging filter that
adds the running batch's fields to every record logged while a batch runs
(your own ``log.info`` calls in ``perform`` included), so a JSON formatter
picks them up.  The fields are ``lowkiq_worker``, ``lowkiq_queue``,
``lowkiq_shard`` and ``lowkiq_ids`` (see :meth:`lowkiq.running.RunningBatch.log_fields`);
lowkiq's own warning about a failed batch carries them too.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from lowkiq.middleware import Batch, Next, ServerMiddleware
from lowkiq.running import RunningBatch, batch_of, current_batch

if TYPE_CHECKING:
    from lowkiq.worker import Worker


def log_batches(
    logger: logging.Logger | None = None, level: int = logging.INFO
) -> ServerMiddleware:
    """A server middleware logging each batch to ``logger`` (default ``lowkiq.batches``)
    at ``level``, with the batch's fields plus ``lowkiq_outcome`` (``done`` or
    ``failed``) and ``lowkiq_duration`` (seconds) as extra fields."""
    target = logger or logging.getLogger("lowkiq.batches")

    def logged(worker: type[Worker], batch: Batch, call_next: Next[Any, Any]) -> Any:
        if not target.isEnabledFor(level):
            return call_next(worker, batch)
        fields = batch_of(worker, batch).log_fields()
        started = time.perf_counter()
        try:
            result = call_next(worker, batch)
        except Exception as exc:
            _log(target, level, fields, "failed", started, f" ({type(exc).__name__})")
            raise
        _log(target, level, fields, "done", started, "")
        return result

    return logged


def _log(
    target: logging.Logger,
    level: int,
    fields: dict[str, Any],
    outcome: str,
    started: float,
    suffix: str,
) -> None:
    duration = time.perf_counter() - started
    target.log(
        level,
        "%s:%d: batch of %d job(s) %s in %.1f ms%s",
        fields["lowkiq_worker"],
        fields["lowkiq_shard"],
        len(fields["lowkiq_ids"]),
        outcome,
        duration * 1000,
        suffix,
        extra={**fields, "lowkiq_outcome": outcome, "lowkiq_duration": duration},
    )


class BatchFields(logging.Filter):
    """Adds the running batch's fields to each record logged while this thread runs a
    batch (records already carrying them are left as they are); never drops a record.

    Attach it to a handler (``handler.addFilter(BatchFields())``) so that it sees
    the records of every logger."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Stamp ``record``; always ``True``."""
        running: RunningBatch | None = current_batch()
        if running is not None and not hasattr(record, "lowkiq_worker"):
            for name, value in running.log_fields().items():
                setattr(record, name, value)
        return True
