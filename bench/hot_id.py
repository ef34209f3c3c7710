"""A hot id: 100,000 payloads enqueued onto one id, one ``perform_async`` call each.

Prints the per-enqueue p50/p99 (client round trip) over the 1,000 calls that
took the id to 1,000, 10,000 and 100,000 payloads, and the server-side durations
of the run's Redis commands (SLOWLOG with a 0 µs threshold): p50, p99, longest.

Runs against a private Redis (lowkiq.clients.embedded.start_server), never REDIS_URL.
Usage: python bench/hot_id.py [--payloads 100000]
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
from lowkiq.storage.queries import Queries

#: Payload counts at which the figures are printed: over the WINDOW enqueues up to each.
MILESTONES = (1_000, 10_000, 100_000)
WINDOW = 1_000
#: SLOWLOG entries kept; it is read every COLLECT_EVERY enqueues (each one command).
SLOWLOG_LENGTH = 1024
COLLECT_EVERY = 500


class HotWorker(lowkiq.Worker):
    """The queue the benchmark fills."""

    shards_count = 5


def percentiles(samples: list[float]) -> tuple[float, float]:
    """p50 and p99 of ``samples``."""
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


class CommandTimes:
    """Server-side durations of every Redis command: SLOWLOG logs each one (threshold
    0) and is read and reset often enough that nothing falls off its end."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self.durations: list[int] = []  # of the scripts (commands they run are logged too)
        self.longest = (0, "", 0)  # microseconds, command, payloads then
        client.config_set("slowlog-log-slower-than", 0)
        client.config_set("slowlog-max-len", SLOWLOG_LENGTH)
        client.slowlog_reset()

    def collect(self, payloads: int) -> None:
        """Take in the log so far (``payloads`` enqueued by then) and empty it."""
        for entry in self.client.slowlog_get(SLOWLOG_LENGTH):
            command = entry["command"]
            text = command.decode(errors="replace") if isinstance(command, bytes) else command
            if text.lower().startswith("slowlog"):
                continue
            if text.upper().startswith("EVALSHA"):
                self.durations.append(entry["duration"])
            if entry["duration"] > self.longest[0]:
                self.longest = (entry["duration"], str(text)[:30], payloads)
        self.client.slowlog_reset()


def main() -> None:
    """Run the benchmark and print its figures."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--payloads", type=int, default=100_000)
    options = parser.parse_args()
    server = start_server(tempfile.mkdtemp(prefix="lowkiq-bench-"))
    try:
        lowkiq.settings.redis = lambda: redis.Redis.from_url(server.url)
        lowkiq.settings.workers = [HotWorker]
        client = lowkiq.settings.client()
        client.flushall()
        HotWorker.perform_async([{"id": "warm-up"}])
        commands = CommandTimes(client)
        samples: list[float] = []
        perform_in = time.time() + 86_400  # waiting out a long retry backoff
        for n in range(options.payloads):
            job = {"id": "hot", "payload": {"version": n}, "score": n, "perform_in": perform_in}
            started = time.perf_counter()
            HotWorker.perform_async([job])
            samples.append((time.perf_counter() - started) * 1000)
            if n % COLLECT_EVERY == COLLECT_EVERY - 1:
                commands.collect(n + 1)
        commands.collect(options.payloads)
        [job] = Queries(HotWorker.queue(), payloads_limit=1).fetch(["hot"])
        count = job["payloads_count"]
        print(machine() + f", Redis {client.info('server')['redis_version']}")
        print(f"{options.payloads:,} payloads onto one id, one per call; the id holds {count:,}")
        for milestone in MILESTONES:
            if milestone > options.payloads:
                break
            p50, p99 = percentiles(samples[milestone - WINDOW : milestone])
            print(f"at {milestone:,} payloads: p50 {p50:.3f} ms, p99 {p99:.3f} ms")
        p50, p99 = percentiles([float(d) for d in commands.durations])
        duration, command, when = commands.longest
        print(f"push script in Redis: p50 {p50:.0f} µs, p99 {p99:.0f} µs")
        print(f"longest Redis command: {duration} µs ({command}..., by {when:,} payloads)")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
