"""Enqueue throughput and memory: 100,000 jobs with a small dict payload, 1,000 per call.

Runs against a private Redis (lowkiq.clients.embedded; ``--redis-server`` picks its
binary, e.g. Debian's Redis 7 against the embedded 6.2) unless REDIS_URL is set, and
prints jobs/s, Redis bytes per queued job (INFO used_memory delta), and the CPU µs per job
of this process (the perform_async calls, job dicts built beforehand) and of Redis.
``--runs`` repeats the whole measurement on a flushed Redis (the host's CPU times move
from one run to the next: compare several).

    python bench/enqueue.py [--jobs 100000] [--per-call 1000] [--runs 1] [--redis-server PATH]
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time

import redis
from _machine import redis_cpu

import lowkiq
from lowkiq.clients.embedded import start_server


class BenchWorker(lowkiq.Worker):
    """The queue the benchmark fills."""

    shards_count = 5


def main() -> None:
    """Run the benchmark and print its figures."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--per-call", type=int, default=1_000)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument(
        "--redis-server", help="the redis-server binary (default: the embedded one)"
    )
    options = parser.parse_args()

    server = None
    url = os.environ.get("REDIS_URL")
    if not url:
        server = start_server(tempfile.mkdtemp(prefix="lowkiq-bench-"), binary=options.redis_server)
        url = server.url
    try:
        lowkiq.settings.redis = lambda: redis.Redis.from_url(url)
        lowkiq.settings.workers = [BenchWorker]
        client = lowkiq.settings.client()
        print(
            f"machine: {platform.machine()}, {os.cpu_count()} cores, "
            f"Python {platform.python_version()}, Redis {client.info('server')['redis_version']}"
        )
        for _ in range(options.runs):
            run(client, options.jobs, options.per_call)
    finally:
        if server:
            server.stop()


def run(client: redis.Redis, jobs_count: int, per_call: int) -> None:
    """Enqueue ``jobs_count`` jobs into a flushed Redis and print the figures."""
    client.flushall()
    before = client.info("memory")["used_memory"]
    calls = [
        [
            {"id": n, "payload": {"order_id": n, "status": "paid", "version": 3}}
            for n in range(start, min(start + per_call, jobs_count))
        ]
        for start in range(0, jobs_count, per_call)
    ]
    redis_before = redis_cpu(client)
    cpu = time.process_time()
    started = time.perf_counter()
    for jobs in calls:
        BenchWorker.perform_async(jobs)
    elapsed = time.perf_counter() - started
    cpu = time.process_time() - cpu
    redis_used = redis_cpu(client) - redis_before
    used = client.info("memory")["used_memory"] - before
    queued = BenchWorker.metrics()["length"]
    print(f"enqueued {queued} jobs, {per_call} per call, in {elapsed:.2f} s")
    print(f"throughput: {jobs_count / elapsed:,.0f} jobs/s")
    print(f"memory: {used / queued:.0f} bytes per queued job")
    print(
        f"CPU per job: Python {cpu / jobs_count * 1e6:.2f} µs, "
        f"Redis {redis_used / jobs_count * 1e6:.2f} µs"
    )


if __name__ == "__main__":
    main()
