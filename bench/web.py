"""Dashboard response times: p50/p95 of /api/v1/stats, the dashboard and the first page of
an enqueued and a dead list, with 20 workers and 1,000,000 queued jobs.

Runs against a private Redis (lowkiq.clients.embedded.start_server), never REDIS_URL.
Requests go through Flask's test client (the app and Redis, no HTTP server).
Targets: stats <= 20 ms, dashboard <= 50 ms, list pages <= 100 ms (p95).

    python bench/web.py [--jobs 1000000] [--workers 20] [--dead 20000] [--requests 200]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import redis
from _machine import machine

import lowkiq
from lowkiq.clients.embedded import start_server
from lowkiq.ownership import leases
from lowkiq_web import create_app

TARGETS_MS = {
    "stats": 20,
    "dashboard": 50,
    "enqueued": 100,
    "dead": 100,
    "fresh": 100,
    "by id": 100,
    "deep tie": 100,
}


def make_workers(count: int) -> list[type[lowkiq.Worker]]:
    """``count`` worker classes of 5 shards (the default), named Worker00…"""
    return [type(f"Worker{n:02d}", (lowkiq.Worker,), {"shards_count": 5}) for n in range(count)]


def fill(workers: list[type[lowkiq.Worker]], jobs: int, dead: int) -> float:
    """Enqueue ``jobs`` jobs spread over the workers, 1,000 per call, and bury ``dead`` of the
    first worker's (pop + fail with no retries left).  Every queued job gets the same
    perform_in, one tie as deep as a worker's queue; returns it."""
    per_worker = jobs // len(workers)
    now = time.time()
    for worker in workers:
        for start in range(0, per_worker, 1000):
            batch = [
                {
                    "id": f"order-{n}",
                    "payload": {"order": n, "status": "paid"},
                    "perform_in": now + 600,
                }
                for n in range(start, min(start + 1000, per_worker))
            ]
            worker.perform_async(batch)
    first = workers[0]
    first.perform_async(
        [{"id": f"dead-{n}", "payload": {"n": n}, "perform_in": 1e9} for n in range(dead)]
    )
    queue = first.queue()
    for shard in queue.shards:
        lease, _, _ = leases.acquire(queue, shard, "bench", 60.0)
        assert lease is not None
        while (popped := queue.pop(shard, lease.token, 1000)).jobs:
            queue.fail(
                shard, lease.token, popped.batch, popped.jobs, "RuntimeError: gave up",
                lambda c: 60.0, 0,
            )  # fmt: skip
        leases.release(queue, [lease])
    return now + 600


def measure(client, url: str, requests: int) -> tuple[float, float]:
    """p50 and p95 in milliseconds of ``requests`` GETs of ``url`` (after 5 warm-ups)."""
    for _ in range(5):
        assert client.get(url).status_code == 200, url
    times = []
    for _ in range(requests):
        start = time.perf_counter()
        response = client.get(url)
        times.append((time.perf_counter() - start) * 1000)
        assert response.status_code == 200, url
    quantiles = statistics.quantiles(times, n=100)
    return quantiles[49], quantiles[94]


def main() -> None:
    """Fill a private Redis, then time each page."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--workers", type=int, default=20)
    parser.add_argument("--dead", type=int, default=20_000)
    parser.add_argument("--requests", type=int, default=200)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="lowkiq-bench-") as directory:
        server = start_server(directory)
        try:
            lowkiq.settings.redis = lambda: redis.Redis.from_url(server.url)
            workers = make_workers(args.workers)
            lowkiq.settings.workers = workers
            started = time.perf_counter()
            tie = fill(workers, args.jobs, args.dead)
            filled = time.perf_counter() - started
            total = lowkiq.stats()["total"]
            print(machine())
            print(
                f"{args.workers} workers, {total['length']:,} queued, "
                f"{total['morgue_length']:,} dead "
                f"(filled in {filled:.1f} s); {args.requests} requests per page, Flask test client"
            )
            client = create_app().test_client()
            name = workers[0].__name__
            pages = {
                "stats": "/api/v1/stats",
                "dashboard": "/",
                "enqueued": f"/{name}/enqueued",
                "dead": f"/{name}/dead",
                "fresh": f"/{name}/enqueued?by=retry_count&dir=desc&from=-1",
                "by id": f"/{name}/enqueued?by=id&per=100",
                # A page from the middle of the one big perform_in tie.
                "deep tie": f"/{name}/enqueued?by=perform_in&per=100&after={tie!r}"
                f"&after_id=order-{args.jobs // args.workers // 2}",
            }
            print(f"{'page':<10} {'url':<45} {'p50 ms':>8} {'p95 ms':>8} {'target':>8}")
            for key, url in pages.items():
                p50, p95 = measure(client, url, args.requests)
                verdict = "ok" if p95 <= TARGETS_MS[key] else "OVER"
                print(f"{key:<10} {url:<45} {p50:8.2f} {p95:8.2f} {TARGETS_MS[key]:>6} {verdict}")
        finally:
            server.stop()


if __name__ == "__main__":
    main()
