"""Enqueue throughput and memory: 100,000 jobs with a small dict payload, 1,000 per call.

Runs against a private Redis (lowkiq.embedded) unless REDIS_URL is set, and
prints jobs/s and Redis bytes per queued job (INFO used_memory delta).

    python bench/enqueue.py [--jobs 100000] [--per-call 1000]
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time

import redis

import lowkiq
from lowkiq.embedded import start_server


class BenchWorker(lowkiq.Worker):
    """The queue the benchmark fills."""

    shards_count = 5


def main() -> None:
    """Run the benchmark and print its figures."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--per-call", type=int, default=1_000)
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
        client.flushall()
        before = client.info("memory")["used_memory"]
        started = time.perf_counter()
        for start in range(0, options.jobs, options.per_call):
            BenchWorker.perform_async(
                [
                    {"id": n, "payload": {"order_id": n, "status": "paid", "version": 3}}
                    for n in range(start, min(start + options.per_call, options.jobs))
                ]
            )
        elapsed = time.perf_counter() - started
        used = client.info("memory")["used_memory"] - before
        queued = BenchWorker.metrics()["length"]
        print(
            f"machine: {platform.machine()}, {os.cpu_count()} cores, "
            f"Python {platform.python_version()}, Redis {client.info('server')['redis_version']}"
        )
        print(f"enqueued {queued} jobs, {options.per_call} per call, in {elapsed:.2f} s")
        print(f"throughput: {options.jobs / elapsed:,.0f} jobs/s")
        print(f"memory: {used / queued:.0f} bytes per queued job")
    finally:
        if server:
            server.stop()


if __name__ == "__main__":
    main()
