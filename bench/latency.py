"""Idle wake-up latency: enqueue one job into an idle server, time until ``perform`` starts.

Runs against a private Redis (lowkiq.embedded.start_server), never REDIS_URL.
Usage: python bench/latency.py [--jobs 300] [--threads 5] [--shards 5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time

import redis
from _machine import machine

import lowkiq
from lowkiq.embedded import start_server
from lowkiq.server import Server

started_at: list[float] = []
performed = threading.Event()


class Timed(lowkiq.Worker):
    """Records when perform starts."""

    @classmethod
    def perform(cls, payloads_by_id: dict) -> None:
        started_at.append(time.perf_counter())
        performed.set()


def measure(url: str, jobs: int, threads: int, shards: int) -> list[float]:
    """Milliseconds from calling ``perform_async`` to ``perform`` starting, one job at a time."""
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
    finally:
        server.request_stop()
        server.stop()
    return samples


def main() -> None:
    """Print p50, p99 and max in milliseconds."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=300)
    parser.add_argument("--threads", type=int, default=5)
    parser.add_argument("--shards", type=int, default=5)
    args = parser.parse_args()
    server = start_server(tempfile.mkdtemp(prefix="lowkiq-bench-"))
    try:
        samples = sorted(measure(server.url, args.jobs, args.threads, args.shards))
    finally:
        server.stop()
    p50 = statistics.median(samples)
    p99 = samples[min(len(samples) - 1, int(len(samples) * 0.99))]
    print(machine())
    print(
        f"{len(samples)} idle enqueue -> perform start: "
        f"p50 {p50:.2f} ms, p99 {p99:.2f} ms, max {samples[-1]:.2f} ms"
    )


if __name__ == "__main__":
    main()
