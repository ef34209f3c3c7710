"""One giant ``perform_async``: 2,000,000 ids in one call, while another process pings
Redis every millisecond.

Prints the worst and the 99.9th percentile PING latency seen by that other client
during the call, the longest single Redis command (SLOWLOG), the number of script
calls, and the total time.  Runs against a private Redis (lowkiq.clients.embedded) unless
REDIS_URL is set.

    python bench/giant_enqueue.py [--jobs 2000000] [--shards 5]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import tempfile
import time
from multiprocessing.connection import Connection

import redis
from _machine import machine

import lowkiq
from lowkiq.clients.embedded import start_server
from lowkiq.storage.push_plan import ROUND_BYTES, ROUND_JOBS


class GiantWorker(lowkiq.Worker):
    """The queue the benchmark fills."""

    shards_count = 5


def ping(url: str, results: Connection) -> None:
    """Ping ``url`` every millisecond until told to stop; send back every latency (s)."""
    client = redis.Redis.from_url(url)
    client.ping()
    results.send("ready")
    latencies: list[float] = []
    while not results.poll():
        started = time.perf_counter()
        client.ping()
        latencies.append(time.perf_counter() - started)
        time.sleep(0.001)
    results.send(latencies)


def main() -> None:
    """Run the benchmark and print its figures."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=2_000_000)
    parser.add_argument("--shards", type=int, default=5)
    options = parser.parse_args()
    GiantWorker.shards_count = options.shards

    server = None
    url = os.environ.get("REDIS_URL")
    if not url:
        server = start_server(tempfile.mkdtemp(prefix="lowkiq-bench-"))
        url = server.url
    try:
        lowkiq.settings.redis = lambda: redis.Redis.from_url(url)
        lowkiq.settings.workers = [GiantWorker]
        client = lowkiq.settings.client()
        client.flushall()
        GiantWorker.perform_async([{"id": "warm-up"}])
        client.config_set("slowlog-log-slower-than", 1000)  # µs: every round's script
        client.config_set("slowlog-max-len", 100_000)
        client.slowlog_reset()
        client.config_resetstat()
        jobs = [{"id": n, "payload": {"n": n}} for n in range(options.jobs)]

        ours, theirs = multiprocessing.Pipe()
        pinger = multiprocessing.Process(target=ping, args=(url, theirs), daemon=True)
        pinger.start()
        ours.recv()
        started = time.perf_counter()
        GiantWorker.perform_async(jobs)
        elapsed = time.perf_counter() - started
        ours.send("stop")
        latencies = sorted(ours.recv())
        pinger.join()

        durations = sorted(e["duration"] / 1000 for e in client.slowlog_get(100_000)) or [0.0]
        stats = client.info("commandstats")
        calls = stats.get("cmdstat_evalsha", {}).get("calls", 0)
        queued = GiantWorker.metrics()["length"]
        print(f"{machine()}, Redis {client.info('server')['redis_version']}")
        print(
            f"{options.jobs:,} jobs in one perform_async, {options.shards} shards: "
            f"{elapsed:.1f} s ({options.jobs / elapsed:,.0f} jobs/s), {queued - 1:,} queued"
        )
        print(
            f"rounds of at most {ROUND_JOBS:,} jobs and {ROUND_BYTES // 1024**2} MB: "
            f"{calls:,} script calls, median {durations[len(durations) // 2]:.1f} ms, p99 "
            f"{durations[int(len(durations) * 0.99)]:.1f} ms, the longest {durations[-1]:.1f} ms"
        )
        print(
            f"another client's PING during the call ({len(latencies):,} pings): worst "
            f"{latencies[-1] * 1000:.1f} ms, p99.9 "
            f"{latencies[int(len(latencies) * 0.999)] * 1000:.1f} ms, median "
            f"{latencies[len(latencies) // 2] * 1000:.2f} ms"
        )
    finally:
        if server:
            server.stop()


if __name__ == "__main__":
    main()
