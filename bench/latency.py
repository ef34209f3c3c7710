"""Idle wake-up latency: enqueue one job into an idle server, time until ``perform`` starts;
then jobs scheduled 100 ms to 2 s ahead, time from their ``perform_in`` to ``perform``.

Runs against a private Redis (lowkiq.embedded.start_server), never REDIS_URL.
Usage: python bench/latency.py [--jobs 300] [--scheduled 300] [--threads 5] [--shards 5]
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import threading
import time

import redis
from _machine import machine

import lowkiq
from lowkiq.embedded import start_server
from lowkiq.server import Server

#: How far ahead scheduled jobs are due, seconds.
AHEAD = (0.1, 2.0)

started_at: list[float] = []
performed = threading.Event()
#: id -> wall-clock time its perform started (for scheduled jobs).
started_by_id: dict[str, float] = {}


class Timed(lowkiq.Worker):
    """Records when perform starts."""

    @classmethod
    def perform(cls, payloads_by_id: dict) -> None:
        now = time.time()
        started_at.append(time.perf_counter())
        for job_id in payloads_by_id:
            started_by_id[job_id] = now
        performed.set()


def measure(url: str, jobs: int, scheduled: int, threads: int, shards: int) -> tuple[list, list]:
    """Milliseconds from ``perform_async`` to ``perform`` starting, one job at a time;
    and from ``perform_in`` to ``perform`` starting, for jobs scheduled ahead."""
    lowkiq.settings.redis = lambda: redis.Redis.from_url(url)
    lowkiq.settings.threads_per_node = threads
    Timed.shards_count = shards
    lowkiq.settings.workers = [Timed]
    server = Server(lowkiq.settings)
    server.start()
    samples = []
    try:
        time.sleep(0.3)
        for n in range(jobs):
            performed.clear()
            sent = time.perf_counter()
            Timed.perform_async([{"id": n}])
            if not performed.wait(5):
                raise RuntimeError(f"job {n} was not performed within 5 s")
            samples.append((started_at[-1] - sent) * 1000)
            time.sleep(0.02)  # let every thread go idle again
        late = measure_scheduled(scheduled)
    finally:
        server.request_stop()
        server.stop()
    return samples, late


def measure_scheduled(jobs: int) -> list[float]:
    """Jobs enqueued every 20 ms, each due 100 ms to 2 s later: milliseconds from
    ``perform_in`` to ``perform`` starting."""
    rng = random.Random(7)
    due: dict[str, float] = {}
    for n in range(jobs):
        job_id = f"scheduled-{n}"
        due[job_id] = time.time() + rng.uniform(*AHEAD)
        Timed.perform_async([{"id": job_id, "perform_in": due[job_id]}])
        time.sleep(0.02)
    deadline = time.time() + AHEAD[1] + 5
    while len(due.keys() & started_by_id.keys()) < jobs:
        if time.time() > deadline:
            raise RuntimeError("scheduled jobs were not all performed within 5 s of their time")
        time.sleep(0.05)
    return [(started_by_id[job_id] - at) * 1000 for job_id, at in due.items()]


def percentiles(samples: list[float]) -> tuple[float, float, float]:
    """p50, p99 and max of ``samples``."""
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return statistics.median(ordered), p99, ordered[-1]


def main() -> None:
    """Print p50, p99 and max in milliseconds."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=300)
    parser.add_argument("--scheduled", type=int, default=300)
    parser.add_argument("--threads", type=int, default=5)
    parser.add_argument("--shards", type=int, default=5)
    args = parser.parse_args()
    server = start_server(tempfile.mkdtemp(prefix="lowkiq-bench-"))
    try:
        samples, late = measure(server.url, args.jobs, args.scheduled, args.threads, args.shards)
    finally:
        server.stop()
    print(machine())
    p50, p99, worst = percentiles(samples)
    print(
        f"{len(samples)} idle enqueue -> perform start: "
        f"p50 {p50:.2f} ms, p99 {p99:.2f} ms, max {worst:.2f} ms"
    )
    p50, p99, worst = percentiles(late)
    print(
        f"{len(late)} jobs scheduled {AHEAD[0] * 1000:.0f} ms-{AHEAD[1]:.0f} s ahead, "
        f"perform start - perform_in: p50 {p50:.2f} ms, p99 {p99:.2f} ms, max {worst:.2f} ms"
    )


if __name__ == "__main__":
    main()
