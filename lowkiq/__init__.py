"""lowkiq: ordered background-job processing on Redis.

Jobs are sharded by id; each shard is processed by exactly one thread, and
jobs with the same id are merged, so updates about one entity are never
processed concurrently or out of order.
"""

from __future__ import annotations

from typing import Any

from lowkiq.errors import (
    ConfigurationError,
    InvalidJob,
    InvalidQuery,
    LowkiqError,
    RedisUnavailable,
)
from lowkiq.schedulers import build_lag_scheduler, build_seq_scheduler
from lowkiq.settings import settings
from lowkiq.splitters import build_by_node_splitter, build_default_splitter
from lowkiq.storage.metrics import many_queue_metrics, stats_document
from lowkiq.version import __version__
from lowkiq.worker import Worker


def stats() -> dict[str, Any]:
    """The ``/api/v1/stats`` document over ``settings.workers`` (SPEC §5)."""
    client = settings.client()
    workers = settings.workers
    metrics = many_queue_metrics(client, [worker.queue(client) for worker in workers])
    return stats_document([worker.__name__ for worker in workers], metrics)


__all__ = [
    "ConfigurationError",
    "InvalidJob",
    "InvalidQuery",
    "LowkiqError",
    "RedisUnavailable",
    "Worker",
    "__version__",
    "build_by_node_splitter",
    "build_default_splitter",
    "build_lag_scheduler",
    "build_seq_scheduler",
    "settings",
    "stats",
]
