"""What ``lowkiq info`` shows: every worker's queue (lengths, lag, morgue, who serves
its shards) and the live worker processes, as a JSON-ready document and as a compact
table.  Read in a few round trips; plain functions of the document for the table."""

from __future__ import annotations

import time
from typing import Any

import redis

from lowkiq.clients.connection import Client, describe_redis
from lowkiq.clients.memory_policy import read_memory
from lowkiq.errors import is_out_of_memory
from lowkiq.ownership.status import processes
from lowkiq.settings import Settings, settings
from lowkiq.storage.metrics import overview
from lowkiq.storage.pausing import paused_queues

#: The worker table's columns: document key -> heading.
WORKER_COLUMNS = {
    "name": "WORKER",
    "length": "QUEUED",
    "fresh": "FRESH",
    "retries": "RETRIES",
    "morgue_length": "DEAD",
    "busy": "BUSY",
    "lag": "LAG",
    "processed": "PROCESSED",
    "failed": "FAILED",
    "served": "SERVED",
}
#: The process table's columns: document key -> heading.
PROCESS_COLUMNS = {
    "id": "PROCESS",
    "threads": "THREADS",
    "shards": "SHARDS",
    "busy": "BUSY",
    "up": "UP",
    "state": "STATE",
}


def read_info(config: Settings = settings) -> dict[str, Any]:
    """The document of ``lowkiq info --json``: ``redis`` (its URL, no password),
    ``redis_memory`` (each server's ``maxmemory-policy`` and memory, ``allow_eviction``,
    what is wrong: ``eviction``, ``full``; ``None`` when ``INFO`` is refused), ``at``,
    ``workers`` (name, queue, paused, shards, served_shards and the queue metrics),
    ``total`` and ``processes`` (each live process, oldest first)."""
    client = config.client()
    memory = _memory(client, config.allow_eviction)
    try:
        found = overview(client, {w.__name__: w.queue(client, config) for w in config.workers})
    except redis.ResponseError as exc:  # a queue's layout, written at its first use
        if memory is None or not memory["full"] or not is_out_of_memory(exc):
            raise
        raise redis.exceptions.OutOfMemoryError(f"{memory['full']}: {exc}") from exc
    serving = processes(config)
    owners = {queue.worker: queue for queue in serving.queues}
    live = serving.processes
    paused = paused_queues(client)
    workers = []
    for worker in config.workers:
        queue = owners[worker.__name__]
        workers.append(
            {
                "name": worker.__name__,
                "queue": worker.queue_name,
                "paused": worker.queue_name in paused,
                "shards": len(queue.owners),
                "served_shards": sum(queue.live),
                **found.by_worker[worker.__name__],
            }
        )
    return {
        "redis": describe_redis(client),
        "redis_memory": memory,
        "at": found.at,
        "workers": workers,
        "total": dict(found.totals),
        "processes": [
            {
                "id": p.id,
                "host": p.host,
                "pid": p.pid,
                "version": p.version,
                "threads": p.threads,
                "queues": p.queues,
                "shards": len(p.shards),
                "busy": p.busy,
                "started_at": p.started_at,
                "beat_age": p.beat_age,
                "quiet": p.quiet,
                "mode": p.mode,
            }
            for p in live
        ],
    }


def _memory(client: Client, allow_eviction: bool) -> dict[str, Any] | None:
    """The ``redis_memory`` of the document (``None`` when ``INFO`` is refused)."""
    try:
        return read_memory(client).document(allow_eviction)
    except redis.ResponseError:
        return None


def memory_lines(memory: dict[str, Any] | None) -> list[str]:
    """The lines about Redis's memory: its policy and ``allow_eviction``, then what is
    wrong (an evicting policy, a full Redis)."""
    if memory is None:
        return ["maxmemory-policy unknown (INFO refused): it must be noeviction"]
    policies = sorted({str(policy) for policy in memory["policies"].values()})
    allowed = "yes" if memory["allow_eviction"] else "no"
    lines = [f"maxmemory-policy {', '.join(policies)} (allow_eviction: {allowed})"]
    if memory["eviction"]:
        lines.append(f"WARNING: {memory['eviction']}")
    if memory["full"]:
        lines.append(f"WARNING: {memory['full']}")
    return lines


def render_info(info: dict[str, Any], now: float | None = None) -> str:
    """The document of :func:`read_info` as the compact tables ``lowkiq info`` prints."""
    now = time.time() if now is None else now
    rows = [_worker_row(worker) for worker in info["workers"]]
    if len(rows) > 1:
        rows.append(_worker_row({"name": "total", **info["total"]}))
    lines = [f"Redis {info['redis']}"]
    if "redis_memory" in info:
        lines += memory_lines(info["redis_memory"])
    lines.append("")
    if rows:
        lines += _table(WORKER_COLUMNS, rows)
    else:
        lines.append("no workers: the app sets no settings.workers")
    lines.append("")
    found = info["processes"]
    if found:
        lines.append(f"{len(found)} live worker process{'es' if len(found) > 1 else ''}")
        lines += _table(PROCESS_COLUMNS, [_process_row(p, now) for p in found])
    else:
        lines.append("no live worker process: start one with `lowkiq worker -r APP`")
    return "\n".join(lines)


def _worker_row(worker: dict[str, Any]) -> dict[str, str]:
    row = {key: str(worker.get(key, "")) for key in WORKER_COLUMNS}
    row["lag"] = duration(worker["lag"])
    if "shards" in worker:
        row["served"] = f"{worker['served_shards']}/{worker['shards']} shards"
        if worker["paused"]:
            row["served"] += ", paused"
    return row


def _process_row(process: dict[str, Any], now: float) -> dict[str, str]:
    row = {key: str(process.get(key, "")) for key in PROCESS_COLUMNS}
    row["up"] = duration(max(0.0, now - process["started_at"]))
    row["state"] = "quiet" if process["quiet"] else "running"
    return row


def duration(seconds: float) -> str:
    """``0s``, ``4.2s``, ``12m``, ``3h``, ``2d``: a short, rounded duration."""
    if seconds < 60:
        return "0s" if seconds < 0.05 else f"{seconds:.1f}s"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f}{unit}"
    return f"{seconds:.0f}s"  # not reached


def _table(columns: dict[str, str], rows: list[dict[str, str]]) -> list[str]:
    """Rows under their headings, the first column left-aligned, the others right."""
    keys = list(columns)
    widths = {k: max(len(columns[k]), *(len(row[k]) for row in rows)) for k in keys}

    def line(cells: dict[str, str]) -> str:
        first, *rest = keys
        parts = [cells[first].ljust(widths[first])]
        parts += [cells[k].rjust(widths[k]) for k in rest]
        return "  ".join(parts).rstrip()

    return [line(columns), *(line(row) for row in rows)]
