"""Report failed batches to Sentry (needs ``sentry-sdk``, which lowkiq does not install).

lowkiq catches a failing ``perform`` to retry it, so the exception never
reaches Sentry's own hooks; this server middleware reports it first, with the
worker, queue and shard as tags and the batch's ids and retry counts as the
``lowkiq`` context, then lets the failure go on to the retry rules::

    import sentry_sdk
    from lowkiq.integrations.sentry import report_failures

    sentry_sdk.init(dsn=...)
    lowkiq.settings.server_middlewares = [report_failures]
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

try:
    import sentry_sdk
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "lowkiq.integrations.sentry needs sentry-sdk: pip install sentry-sdk"
    ) from exc

from lowkiq.middleware import Batch, Next
from lowkiq.running import batch_of

if TYPE_CHECKING:
    from lowkiq.worker import Worker


def report_failures(worker: type[Worker], batch: Batch, call_next: Next[Any, Any]) -> Any:
    """A server middleware: capture a failing batch's exception in Sentry, then re-raise."""
    try:
        return call_next(worker, batch)
    except Exception as exc:
        running = batch_of(worker, batch)
        with sentry_sdk.new_scope() as scope:
            scope.set_tag("lowkiq.worker", worker.__name__)
            scope.set_tag("lowkiq.queue", worker.queue_name)
            scope.set_tag("lowkiq.shard", str(running.shard))
            scope.set_context(
                "lowkiq",
                {
                    "worker": worker.__name__,
                    "shard": running.shard,
                    "ids": running.ids,
                    "retry_counts": dict(running.retry_counts),
                    "max_retry_count": worker.max_retry_count,
                },
            )
            sentry_sdk.capture_exception(exc)
        raise
