"""Queue metrics, every queue's metrics with their totals, and the ``/api/v1/stats`` document."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

from lowkiq.clients.connection import Client
from lowkiq.storage import layout as layouts
from lowkiq.storage.queue import Queue
from lowkiq.storage.scripts import run_pipelined


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
    #: Seconds since the oldest due payload became due (0 when nothing is due): the
    #: earliest due ``perform_in``, or earlier, when a hot id yielded its place to
    #: the ids already due, the time it first became due.
    lag: float
    #: Jobs processed successfully, ever.
    processed: int
    #: Jobs whose batch failed, ever (each retry counts).
    failed: int
    #: Jobs in processing areas now.
    busy: int
    #: Jobs dropped without a retry by ``lowkiq.Discard``, ever.
    discarded: int
    #: Calls that named a batch no longer in its shard's processing area, ever: they
    #: changed nothing (a worker met a Redis fault between a batch's pop and its end).
    stale_calls: int
    #: Jobs put off by ``lowkiq.Snooze`` (due again later, not failed).
    snoozed: int
    #: Jobs of running batches cancelled by ``Worker.actions().cancel``, ever.
    cancelled: int


def _decode(shard_replies: Sequence[Sequence[Any]], now: float | None) -> QueueMetrics:
    """One queue's metrics from the ``metrics`` script's reply of each of its shards; the
    lag on Redis's clock (each shard's master's), unless a test fixes ``now``."""
    fresh = retries = morgue_length = processed = failed = busy = discarded = stale = 0
    snoozed = cancelled = 0
    lag = 0.0
    for reply in shard_replies:
        fresh += int(reply[0])
        retries += int(reply[1])
        morgue_length += int(reply[2])
        processed += int(reply[3])
        failed += int(reply[4])
        busy += int(reply[5])
        discarded += int(reply[8])
        stale += int(reply[10])
        snoozed += int(reply[11])
        cancelled += int(reply[12])
        if reply[6]:
            at = float(reply[7]) if now is None else now
            due = float(reply[6])
            if reply[9]:
                due = min(due, float(reply[9]))
            lag = max(lag, at - due)
    return {
        "length": fresh + retries,
        "fresh": fresh,
        "retries": retries,
        "morgue_length": morgue_length,
        "lag": lag,
        "processed": processed,
        "failed": failed,
        "busy": busy,
        "discarded": discarded,
        "stale_calls": stale,
        "snoozed": snoozed,
        "cancelled": cancelled,
    }


def queue_metrics(queue: Queue, now: float | None = None) -> QueueMetrics:
    """``length``, ``fresh``, ``retries``, ``morgue_length``, ``lag``, ``processed``,
    ``failed``, ``busy`` and ``discarded`` of one queue, in one round trip."""
    return many_queue_metrics(queue.client, [queue], now)[0]


def many_queue_metrics(
    client: Client, queues: Sequence[Queue], now: float | None = None
) -> list[QueueMetrics]:
    """The metrics of several queues in one pipelined round trip (a script call per shard)."""
    fresh = layouts.read_many(client, [(q.name, q.default_shards_count) for q in queues])
    shards = [q.refresh_layout(layout).shards for q, layout in zip(queues, fresh, strict=True)]
    calls = [
        (queue.scripts.metrics, [queue.keys.prefix(shard)], ())
        for queue, numbers in zip(queues, shards, strict=True)
        for shard in numbers
    ]
    replies = run_pipelined(client, calls)
    metrics, start = [], 0
    for numbers in shards:
        metrics.append(_decode(replies[start : start + len(numbers)], now))
        start += len(numbers)
    return metrics


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


def overview(client: Client, queues: Mapping[str, Queue], now: float | None = None) -> Overview:
    """The metrics of ``queues`` (worker name -> queue) and their totals, in one round trip."""
    metrics = many_queue_metrics(client, list(queues.values()), now)
    now = time.time() if now is None else now
    totals = QueueMetrics(
        length=sum(m["length"] for m in metrics),
        fresh=sum(m["fresh"] for m in metrics),
        retries=sum(m["retries"] for m in metrics),
        morgue_length=sum(m["morgue_length"] for m in metrics),
        lag=max((m["lag"] for m in metrics), default=0.0),
        processed=sum(m["processed"] for m in metrics),
        failed=sum(m["failed"] for m in metrics),
        busy=sum(m["busy"] for m in metrics),
        discarded=sum(m["discarded"] for m in metrics),
        stale_calls=sum(m["stale_calls"] for m in metrics),
        snoozed=sum(m["snoozed"] for m in metrics),
        cancelled=sum(m["cancelled"] for m in metrics),
    )
    return Overview(dict(zip(queues, metrics, strict=True)), totals, now)
