"""Drain throughput: N blank jobs through one `lowkiq worker`-style server: jobs/s, and
CPU µs per job of the worker process and of Redis (``INFO cpu``), a figure far steadier
than jobs/s on a shared host.

Runs against a private Redis (lowkiq.clients.embedded.start_server), never REDIS_URL.
Usage: python bench/drain.py [--jobs 100000] [--threads 5] [--shards 5] [--track]
(``--track``: each batch size with ``Worker.track`` off and on, ``--rounds`` times, the
order turned round every round, since the first run of a pair tends to be the faster on
a shared host; then, per batch size, jobs/s on ÷ off of each round and the median CPU
µs per job off / on).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable

import redis
from _machine import flush, machine, processed, redis_cpu

import lowkiq
from lowkiq.clients.connection import Client
from lowkiq.clients.embedded import start_server
from lowkiq.runtime.server import Server


def make_worker(shards: int, batch: int, tracked: bool = False) -> type[lowkiq.Worker]:
    """A worker with a blank perform, named after its shape (``t``: with ``track``)."""

    class Blank(lowkiq.Worker):
        shards_count = shards
        batch_size = batch
        track = tracked
        queue_name = f"Blank{shards}x{batch}{'t' if tracked else ''}"

        @classmethod
        def perform(cls, payloads_by_id: dict) -> None:
            pass

    return Blank


def drain(
    make: Callable[[], Client],
    jobs: int,
    threads: int,
    shards: int,
    batch: int,
    wait: int = 0,
    track: bool = False,
) -> tuple[float, float, float]:
    """Enqueue ``jobs`` blank jobs into the Redis ``make`` connects to (a server or a
    cluster), then time a server until all are processed (``wait``: settings.wait_replicas);
    returns jobs/s and the CPU µs per job of this process (the server's threads) and of
    Redis (every master of a cluster)."""
    lowkiq.settings.reset()
    lowkiq.settings.redis = make
    lowkiq.settings.threads_per_node = threads
    lowkiq.settings.wait_replicas = wait
    worker = make_worker(shards, batch, track)
    lowkiq.settings.workers = [worker]
    client = lowkiq.settings.client()
    flush(client)
    for start in range(0, jobs, 1000):
        worker.perform_async([{"id": i, "payload": ""} for i in range(start, start + 1000)])
    server = Server(lowkiq.settings)
    cpu, redis_before = time.process_time(), redis_cpu(client)
    started = time.perf_counter()
    server.start()
    while processed(client, worker.queue_name, shards) < jobs:
        time.sleep(0.01)
    elapsed = time.perf_counter() - started
    cpu, redis_used = time.process_time() - cpu, redis_cpu(client) - redis_before
    server.request_stop()
    server.stop()
    return jobs / elapsed, cpu / jobs * 1e6, redis_used / jobs * 1e6


def print_tracking(
    batches: list[int], runs: dict[tuple[int, bool], list[tuple[float, float, float]]]
) -> None:
    """Per batch size: jobs/s with ``track`` on ÷ off in each round, and the median CPU µs
    per job of the worker and of Redis, off / on."""
    for batch in batches:
        off, on = runs[(batch, False)], runs[(batch, True)]
        ratios = [b[0] / a[0] for a, b in zip(off, on, strict=True)]
        worker = [statistics.median(run[1] for run in side) for side in (off, on)]
        server = [statistics.median(run[2] for run in side) for side in (off, on)]
        print(
            f"batch {batch}: jobs/s on ÷ off {', '.join(f'{r:.2f}' for r in ratios)} "
            f"(median {statistics.median(ratios):.2f}); worker µs/job off / on "
            f"{worker[0]:.1f} / {worker[1]:.1f}, Redis {server[0]:.1f} / {server[1]:.1f}"
        )


def main() -> None:
    """Print one row per batch size."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--threads", type=int, default=5)
    parser.add_argument("--shards", type=int, default=5)
    parser.add_argument("--batch", type=int, nargs="*", default=[1, 10])
    parser.add_argument("--track", action="store_true", help="A/B: Worker.track off, on")
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    tracking = [False, True] if args.track else [False]
    server = start_server(tempfile.mkdtemp(prefix="lowkiq-bench-"))
    try:
        print(machine())
        print(
            f"{'jobs':>8} {'threads':>7} {'shards':>6} {'batch':>5} {'track':>5} {'jobs/s':>9} "
            f"{'worker µs/job':>14} {'Redis µs/job':>13} {'ratio':>6}"
        )
        runs: dict[tuple[int, bool], list[tuple[float, float, float]]] = {}
        for round_ in range(args.rounds):
            for batch in args.batch:
                for track in tracking if round_ % 2 == 0 else tracking[::-1]:
                    rate, worker_us, redis_us = drain(
                        lambda: redis.Redis.from_url(server.url),
                        args.jobs,
                        args.threads,
                        args.shards,
                        batch,
                        track=track,
                    )
                    print(
                        f"{args.jobs:>8} {args.threads:>7} {args.shards:>6} {batch:>5} "
                        f"{'on' if track else 'off':>5} {rate:>9,.0f} {worker_us:>14.1f} "
                        f"{redis_us:>13.1f} {worker_us / redis_us:>6.2f}"
                    )
                    runs.setdefault((batch, track), []).append((rate, worker_us, redis_us))
        if args.track:
            print_tracking(args.batch, runs)
    finally:
        server.stop()


if __name__ == "__main__":
    main()
