"""``Worker.perform_timeout``: how soon a perform past its limit is stopped, and what the
limit costs a batch.

1. A worker process of its own (private Redis, lowkiq.clients.embedded.start_server, never
   REDIS_URL) with ``perform_timeout = 1``: jobs whose sync ``perform`` spins (``while
   True: pass``), then jobs whose ``async def perform`` awaits forever, every thread
   busy at once; each perform notes the seconds from its own start to the
   ``PerformTimeout`` (or the cancellation) it sees.
2. In this process, no Redis: one batch through ``lowkiq.runtime.performing.perform`` (no
   middleware, an empty ``perform``) without ``perform_timeout`` and with it, on 1 and 4 threads.

Usage: python bench/perform_timeout.py [--jobs 10] [--threads 2] [--batches 200000]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import threading
import time
from typing import Any

import redis
from _machine import machine
from latency import WorkerProcess, percentiles

import lowkiq
from lowkiq.clients.embedded import start_server
from lowkiq.runtime.performing import perform
from lowkiq.runtime.shard_handler import ShardHandler
from lowkiq.storage.processing import PoppedJob
from lowkiq.telemetry.recorder import NO_RECORDER

#: Where an interrupted perform notes ``"<id> <seconds>"``.
STOPPED = "bench:stopped"
#: The limit of part 1, seconds.
LIMIT = 1.0


def _note(job_id: str, since: float) -> None:
    lowkiq.settings.client().rpush(STOPPED, f"{job_id} {time.perf_counter() - since}")


class Spin(lowkiq.Worker):
    """A sync perform that never ends by itself."""

    perform_timeout = LIMIT
    max_retry_count = 0

    @classmethod
    def perform(cls, payloads_by_id: dict[str, list[Any]]) -> None:
        since = time.perf_counter()
        try:
            while True:
                pass
        except lowkiq.PerformTimeout:
            _note(next(iter(payloads_by_id)), since)
            raise


class Forever(lowkiq.Worker):
    """An ``async def perform`` that awaits forever."""

    perform_timeout = LIMIT
    max_retry_count = 0

    @classmethod
    async def perform(cls, payloads_by_id: dict[str, list[Any]]) -> None:
        since = time.perf_counter()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            _note(next(iter(payloads_by_id)), since)
            raise


def stopped_after(url: str, worker: type[lowkiq.Worker], jobs: int, threads: int) -> list[float]:
    """Seconds from each perform's start to the limit it saw."""
    client = redis.Redis.from_url(url)
    client.delete(STOPPED)
    process = WorkerProcess(url, threads, worker, threads)
    try:
        worker.perform_async([{"id": str(n)} for n in range(jobs)])
        deadline = time.monotonic() + jobs * LIMIT * 3 + 30
        while client.llen(STOPPED) < jobs and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        process.stop()
    return [float(row.split()[1]) for row in client.lrange(STOPPED, 0, -1)]


class Empty(lowkiq.Worker):
    """A perform that does nothing."""

    @classmethod
    def perform(cls, payloads_by_id: dict[str, list[Any]]) -> None:
        return None


class LimitedEmpty(Empty):
    """The same under a limit."""

    perform_timeout = 60.0


def per_batch(worker: type[lowkiq.Worker], batches: int, threads: int) -> float:
    """Microseconds of wall time per batch through ``lowkiq.runtime.performing.perform``,
    ``threads`` threads performing at once (a shard each)."""

    def run(shard: int) -> None:
        handler = ShardHandler(worker, shard, None, "1 bench")  # type: ignore[arg-type]
        jobs = [PoppedJob("id", -1, [1])]
        for _ in range(batches // threads):
            perform(handler, jobs, NO_RECORDER)

    workers = [threading.Thread(target=run, args=(n,)) for n in range(threads)]
    started = time.perf_counter()
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join()
    return (time.perf_counter() - started) / batches * 1e6


def main() -> None:
    """Print the figures."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=10)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batches", type=int, default=200_000)
    args = parser.parse_args()
    server = start_server(tempfile.mkdtemp(prefix="lowkiq-bench-"))
    try:
        stopped = {
            w.__name__: stopped_after(server.url, w, args.jobs, args.threads)
            for w in (Spin, Forever)
        }
    finally:
        server.stop()
    print(machine())
    for name, samples in stopped.items():
        p50, _, worst = percentiles(samples)
        print(
            f"{name}: {len(samples)} performs past perform_timeout = {LIMIT:g} s on "
            f"{args.threads} busy threads, perform start -> limit seen: min {min(samples):.4f} s, "
            f"p50 {p50:.4f} s, max {worst:.4f} s"
        )
    for threads in (1, 4):
        for worker in (Empty, LimitedEmpty, Empty, LimitedEmpty):
            cost = per_batch(worker, args.batches, threads)
            limit = worker.perform_timeout
            print(
                f"performing.perform, {threads} thread(s), perform_timeout {limit}: "
                f"{cost:.2f} us per batch"
            )


if __name__ == "__main__":
    main()
