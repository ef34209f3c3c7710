"""Response times of the Metrics pages and /metrics with 20 workers and 72 hours of history,
every minute of it busy (the worst case: every field of every minute, ten minutes and hour set).

Runs against a private Redis (lowkiq.clients.embedded.start_server), never REDIS_URL.
Requests go through Flask's test client (the app and Redis, no HTTP server).

    python bench/metrics_pages.py [--workers 20] [--requests 50]
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
from lowkiq.telemetry import store
from lowkiq.telemetry.counts import SIZE
from lowkiq_web import create_app

PAGES = (
    "/history?window=1h",
    "/history?window=8h",
    "/history?window=72h",
    "/Worker03/history?window=1h",
    "/Worker03/history?window=8h",
    "/Worker03/history?window=72h",
    "/",
    "/metrics",
)


def fill(client: redis.Redis, workers: list[type[lowkiq.Worker]]) -> None:
    """72 hours of busy minutes for every worker, through the real flush path."""
    last = int(time.time() // 60)
    row = [5] * SIZE
    for worker in workers:
        for start in range(0, 72 * 60, 600):
            rows = {(worker.queue_name, last - m): row for m in range(start, start + 600)}
            store.add(client, rows)


def main() -> None:
    """Print p50 and p95 per page."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--workers", type=int, default=20)
    parser.add_argument("--requests", type=int, default=50)
    args = parser.parse_args()
    server = start_server(tempfile.mkdtemp(prefix="lowkiq-bench-"))
    try:
        lowkiq.settings.redis = lambda: redis.Redis.from_url(server.url)
        workers = [
            type(f"Worker{n:02d}", (lowkiq.Worker,), {"shards_count": 5})
            for n in range(args.workers)
        ]
        lowkiq.settings.workers = workers
        fill(redis.Redis.from_url(server.url), workers)
        client = create_app().test_client()
        print(machine())
        print(f"{args.workers} workers, 72 h of busy minutes each")
        print(f"{'page':<30} {'p50 ms':>8} {'p95 ms':>8}")
        for page in PAGES:
            times = []
            for _ in range(args.requests):
                started = time.perf_counter()
                response = client.get(page)
                times.append((time.perf_counter() - started) * 1000)
                assert response.status_code == 200, (page, response.status_code)
            p95 = statistics.quantiles(times, n=20)[-1]
            print(f"{page:<30} {statistics.median(times):>8.1f} {p95:>8.1f}")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
