"""Memory of the metrics history: bytes per worker class per day, as Redis's MEMORY USAGE counts.

Writes one day of per-minute history for one worker through the real flush
path (lowkiq.telemetry.store.add), in three shapes, and sums MEMORY USAGE of
every key it made.  Runs against a private Redis (lowkiq.clients.embedded.start_server).
Usage: python bench/metrics_memory.py
"""

from __future__ import annotations

import random
import tempfile
import time

import redis
from _machine import machine

from lowkiq.clients.embedded import start_server
from lowkiq.storage.keys import QueueKeys
from lowkiq.telemetry import store
from lowkiq.telemetry.counts import (
    DURATION_BUCKETS,
    DURATION_US,
    FAILED_JOBS,
    FAILURES,
    JOBS,
    PAYLOADS,
    PERFORMS,
    SIZE,
    SLOTS,
    WAIT_BUCKETS,
    WAIT_US,
)

DAY_MINUTES = 24 * 60
# The last day: older minutes would expire at once.
FIRST_MINUTE = int(time.time() // 60) - DAY_MINUTES + 1


def minute_counts(rng: random.Random, buckets: int, failures: bool) -> list[int]:
    """One busy minute: ~600 performs spread over ``buckets`` perform-time and wait buckets."""
    values = [0] * SIZE
    values[PERFORMS] = rng.randrange(400, 800)
    values[JOBS] = values[PERFORMS] * 3
    values[PAYLOADS] = values[JOBS] + rng.randrange(0, 500)
    values[DURATION_US] = values[PERFORMS] * rng.randrange(5_000, 50_000)
    values[WAIT_US] = values[JOBS] * rng.randrange(1_000, 900_000)
    if failures:
        values[FAILURES] = rng.randrange(1, 20)
        values[FAILED_JOBS] = values[FAILURES] * 3
    for base, total in ((DURATION_BUCKETS, values[PERFORMS]), (WAIT_BUCKETS, values[JOBS])):
        first = rng.randrange(0, SLOTS - buckets + 1)
        for slot in range(first, first + buckets):
            values[base + slot] = total // buckets
    return values


def day_bytes(client: redis.Redis, name: str, buckets: int, failures: bool) -> int:
    """Write a day of ``name``'s minutes; the MEMORY USAGE of its keys (minutes, ten
    minutes, hours, totals), summed."""
    rng = random.Random(7)
    rows = {
        (name, FIRST_MINUTE + m): minute_counts(rng, buckets, failures) for m in range(DAY_MINUTES)
    }
    for start in range(0, DAY_MINUTES, 60):  # an hour of minutes per round trip
        store.add(client, {key: rows[key] for key in list(rows)[start : start + 60]})
    keys = QueueKeys(name)
    names = [keys.span_hash(1, FIRST_MINUTE + m) for m in range(DAY_MINUTES)]
    names += {keys.span_hash(10, (FIRST_MINUTE + m) // 10) for m in range(DAY_MINUTES)}
    names += {keys.span_hash(60, (FIRST_MINUTE + m) // 60) for m in range(DAY_MINUTES)}
    pipe = client.pipeline(transaction=False)
    for key in names:
        pipe.memory_usage(key, samples=0)
    return sum(pipe.execute()) + int(client.memory_usage(keys.totals_hash, samples=0) or 0)


def main() -> None:
    """Print bytes per worker class per day and per 72 hours, for three shapes of minute."""
    server = start_server(tempfile.mkdtemp(prefix="lowkiq-bench-"))
    try:
        client = redis.Redis.from_url(server.url)
        print(machine())
        print(f"Redis {client.info()['redis_version']}")
        print(f"{'every minute busy':<40} {'bytes/day':>10} {'bytes/72 h':>11} {'bytes/min':>9}")
        shapes = [
            ("3 time + 3 wait buckets, no failures", 3, False),
            ("6 time + 6 wait buckets, failures", 6, True),
            ("all 20 + 20 buckets, failures (worst)", SLOTS, True),
        ]
        for number, (label, buckets, failures) in enumerate(shapes):
            size = day_bytes(client, f"Mem{number}", buckets, failures)
            print(f"{label:<40} {size:>10,} {size * 3:>11,} {size / DAY_MINUTES:>9,.0f}")
        print("an idle minute stores nothing")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
