"""Queue metrics (SPEC §5) and the ``/api/v1/stats`` document."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import redis

from lowkiq.storage.queue import Queue


def _decode(reply: Sequence[Any], now: float) -> dict[str, Any]:
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


def queue_metrics(queue: Queue, now: float | None = None) -> dict[str, Any]:
    """``length``, ``fresh``, ``retries``, ``morgue_length``, ``lag``, ``processed``,
    ``failed`` and ``busy`` of one queue, in one round trip."""
    return many_queue_metrics(queue.client, [queue], now)[0]


def many_queue_metrics(
    client: redis.Redis, queues: Sequence[Queue], now: float | None = None
) -> list[dict[str, Any]]:
    """The metrics of several queues in one pipelined round trip."""
    now = time.time() if now is None else now
    pipe = client.pipeline(transaction=False)
    for queue in queues:
        queue.scripts.metrics(keys=[queue.keys.prefix], args=[queue.shards_count], client=pipe)
    return [_decode(reply, now) for reply in pipe.execute()]


def stats_document(names: Sequence[str], metrics: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The ``/api/v1/stats`` document: totals (lag is the maximum) and per worker."""
    by_worker = {
        name: {key: m[key] for key in ("length", "morgue_length", "lag")}
        for name, m in zip(names, metrics, strict=True)
    }
    return {
        "total": {
            "length": sum(m["length"] for m in by_worker.values()),
            "morgue_length": sum(m["morgue_length"] for m in by_worker.values()),
            "lag": max((m["lag"] for m in by_worker.values()), default=0.0),
        },
        "by_worker": by_worker,
    }
