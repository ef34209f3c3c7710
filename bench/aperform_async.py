"""aperform_async on an event loop: how late a ticker on the same loop runs while
50,000 jobs are enqueued in calls of 1,000, and the throughput against perform_async in
the same run.

A ticker coroutine sleeps 5 ms at a time and notes how late each wake-up comes
(``loop.time()`` past the time it asked for): the loop is blocked for that long by
whatever else runs on it, here the enqueue's own work (the checks of each job, the
plan, the packing) between its awaits.  Targets: max lateness <= 20 ms, throughput >=
0.8x perform_async's.  Each mode runs ``--rounds`` times on an emptied Redis, in turns;
the best round of each is printed (the machine is shared), then every round.

Runs against a private Redis (lowkiq.clients.embedded) unless REDIS_URL is set.

    python bench/aperform_async.py [--jobs 50000] [--per-call 1000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import tempfile
import time
from typing import Any

import redis
from _machine import flush

import lowkiq
from lowkiq.aio.client import close_async_client
from lowkiq.clients.embedded import start_server

#: Seconds the ticker sleeps at a time.
TICK = 0.005


class BenchWorker(lowkiq.Worker):
    """The queue the benchmark fills."""

    shards_count = 5


def calls_of(jobs: int, per_call: int) -> list[list[dict[str, Any]]]:
    """The job dicts of every call, built beforehand."""
    return [
        [
            {"id": n, "payload": {"order_id": n, "status": "paid", "version": 3}}
            for n in range(start, min(start + per_call, jobs))
        ]
        for start in range(0, jobs, per_call)
    ]


def sync_round(calls: list[list[dict[str, Any]]]) -> float:
    """Seconds perform_async takes for every call."""
    started = time.perf_counter()
    for jobs in calls:
        BenchWorker.perform_async(jobs)
    return time.perf_counter() - started


async def async_round(calls: list[list[dict[str, Any]]]) -> tuple[float, list[float]]:
    """Seconds aperform_async takes for every call, and the ticker's lateness (seconds)
    at each of its wake-ups meanwhile."""
    loop = asyncio.get_running_loop()
    await BenchWorker.aperform_async([{"id": "warm-up"}])  # the client, the layout
    lateness: list[float] = []
    done = asyncio.Event()

    async def ticker() -> None:
        while not done.is_set():
            wanted = loop.time() + TICK
            await asyncio.sleep(TICK)
            lateness.append(loop.time() - wanted)

    ticking = asyncio.create_task(ticker())
    await asyncio.sleep(TICK * 2)  # the ticker runs before the first call
    started = time.perf_counter()
    for jobs in calls:
        await BenchWorker.aperform_async(jobs)
    elapsed = time.perf_counter() - started
    done.set()
    await ticking
    await close_async_client()
    return elapsed, lateness


def p99(values: list[float]) -> float:
    """The 99th percentile of ``values``."""
    return statistics.quantiles(values, n=100)[98] if len(values) > 1 else values[0]


def main() -> None:
    """Run the benchmark and print its figures."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=50_000)
    parser.add_argument("--per-call", type=int, default=1_000)
    parser.add_argument("--rounds", type=int, default=3)
    options = parser.parse_args()

    server = None
    url = os.environ.get("REDIS_URL")
    if not url:
        server = start_server(tempfile.mkdtemp(prefix="lowkiq-bench-"))
        url = server.url
    try:
        lowkiq.settings.redis = lambda: redis.Redis.from_url(url)
        lowkiq.settings.workers = [BenchWorker]
        client = lowkiq.settings.client()
        calls = calls_of(options.jobs, options.per_call)
        sync_times: list[float] = []
        async_times: list[float] = []
        latenesses: list[list[float]] = []
        for _ in range(options.rounds):
            flush(client)
            BenchWorker.perform_async([{"id": "warm-up"}])
            sync_times.append(sync_round(calls))
            assert BenchWorker.metrics()["length"] == options.jobs + 1
            flush(client)
            elapsed, lateness = asyncio.run(async_round(calls))
            assert BenchWorker.metrics()["length"] == options.jobs + 1
            async_times.append(elapsed)
            latenesses.append(lateness)
        flush(client)
    finally:
        if server is not None:
            server.stop()

    sync_rate = options.jobs / min(sync_times)
    async_rate = options.jobs / min(async_times)
    best = min(range(options.rounds), key=lambda n: max(latenesses[n]))
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}"
    )
    print(f"{options.jobs:,} jobs in calls of {options.per_call:,}, best of {options.rounds}")
    print(f"perform_async:  {sync_rate:10,.0f} jobs/s")
    ratio = async_rate / sync_rate
    print(f"aperform_async: {async_rate:10,.0f} jobs/s  ({ratio:.2f}x, target >= 0.8x)")
    print(
        f"ticker lateness every {TICK * 1000:.0f} ms: max {max(latenesses[best]) * 1000:.1f} ms, "
        f"p99 {p99(latenesses[best]) * 1000:.1f} ms over {len(latenesses[best])} ticks "
        "(target max <= 20 ms)"
    )
    for n in range(options.rounds):
        print(
            f"  round {n + 1}: perform_async {options.jobs / sync_times[n]:,.0f} jobs/s, "
            f"aperform_async {options.jobs / async_times[n]:,.0f} jobs/s, lateness max "
            f"{max(latenesses[n]) * 1000:.1f} ms, p99 {p99(latenesses[n]) * 1000:.1f} ms"
        )


if __name__ == "__main__":
    main()
