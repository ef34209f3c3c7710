"""Queue metrics, every queue's metrics with their totals, and the ``/api/v1/stats`` document."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

import redis

from lowkiq.storage.queue import Queue


class QueueMetrics(TypedDict):
    """One queue's metrics (or the totals of several)."""

    #: Queued jobs: ``fresh + retries``.
    length: int
    #: Queued jobs that never failed (``retry_count`` -1).
    fresh: int
    #: Queued jobs waiting for a retry (``retry_count`` >= 0).
    retries: int
    #: Jobs in the morgue.
    morgue_length: int
    #: Seconds since the earliest due ``perform_in`` (0 when nothing is due).
    lag: float
    #: Jobs processed successfully, ever.
    processed: int
    #: Jobs whose batch failed, ever (each retry counts).
    failed: int
    #: Jobs in processing areas now.
    busy: int


def _decode(reply: Sequence[Any], now: float) -> QueueMetrics:
    fresh, retries, morgue_length, processed, failed, busy, earliest = reply
    lag = max(0.0, now - float(earliest)) if earliest else 0.0
    return {
        "length": int(fresh) + int(retries),
        "fresh": int(fresh),
        "retries": int(retries),
        "morgue_length": int(morgue_length),
        "lag": lag,
        "processed": int(processed),
        "failed": int(failed),
        "busy": int(busy),
    }


def queue_metrics(queue: Queue, now: float | None = None) -> QueueMetrics:
    """``length``, ``fresh``, ``retries``, ``morgue_length``, ``lag``, ``processed``,
    ``failed`` and ``busy`` of one queue, in one round trip."""
    return many_queue_metrics(queue.client, [queue], now)[0]


def many_queue_metrics(
    client: redis.Redis, queues: Sequence[Queue], now: float | None = None
) -> list[QueueMetrics]:
    """The metrics of several queues in one pipelined round trip."""
    now = time.time() if now is None else now
    pipe = client.pipeline(transaction=False)
    for queue in queues:
        queue.scripts.metrics(keys=[queue.keys.prefix], args=[queue.shards_count], client=pipe)
    return [_decode(reply, now) for reply in pipe.execute()]


@dataclass(frozen=True)
class Overview:
    """Every worker's queue metrics (in settings order), their totals, and when they were read."""

    by_worker: dict[str, QueueMetrics]
    #: Counts summed over the workers; ``lag`` is the largest.
    totals: QueueMetrics
    #: Unix time of the reading.
    at: float

    def stats(self) -> dict[str, Any]:
        """The ``/api/v1/stats`` document: ``length``, ``morgue_length`` and ``lag``,
        in total and by worker."""
        return {
            "total": _stats_entry(self.totals),
            "by_worker": {name: _stats_entry(m) for name, m in self.by_worker.items()},
        }


def _stats_entry(metrics: QueueMetrics) -> dict[str, Any]:
    return {key: metrics[key] for key in ("length", "morgue_length", "lag")}


def overview(
    client: redis.Redis, queues: Mapping[str, Queue], now: float | None = None
) -> Overview:
    """The metrics of ``queues`` (worker name -> queue) and their totals, in one round trip."""
    now = time.time() if now is None else now
    metrics = many_queue_metrics(client, list(queues.values()), now)
    totals = QueueMetrics(
        length=sum(m["length"] for m in metrics),
        fresh=sum(m["fresh"] for m in metrics),
        retries=sum(m["retries"] for m in metrics),
        morgue_length=sum(m["morgue_length"] for m in metrics),
        lag=max((m["lag"] for m in metrics), default=0.0),
        processed=sum(m["processed"] for m in metrics),
        failed=sum(m["failed"] for m in metrics),
        busy=sum(m["busy"] for m in metrics),
    )
    return Overview(dict(zip(queues, metrics, strict=True)), totals, now)
