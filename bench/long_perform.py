"""A long perform and the other shards: while one shard's ``perform`` runs for 10 s, how
long do the jobs of the process's other shards wait between their enqueue and their
``perform``?

One worker process (its own process, as in production) with 4 shards and 2 threads:
one job sleeps ``--seconds`` in ``perform``; meanwhile a job of another shard (a
random one of the three) is enqueued every 50 ms, and each one's delay from
``perform_async`` to its ``perform`` is measured on the host's monotonic clock.
Runs against a private Redis (lowkiq.clients.embedded.start_server), never REDIS_URL.
Usage: python bench/long_perform.py [--seconds 10] [--threads 2] [--shards 4]
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time

import redis
from _machine import machine
from latency import WorkerProcess, configure, next_start, percentiles

import lowkiq
from lowkiq.clients.embedded import start_server

#: Where ``perform`` notes ``"<id> <monotonic> <wall clock>"`` when it starts.
STARTS = "bench:starts"


class Sleepy(lowkiq.Worker):
    """Notes when perform starts; a payload ``{"sleep": s}`` sleeps ``s`` seconds."""

    @classmethod
    def perform(cls, payloads_by_id: dict) -> None:
        monotonic, now = time.perf_counter(), time.time()
        client = lowkiq.settings.client()
        client.rpush(STARTS, *[f"{job_id} {monotonic} {now}" for job_id in payloads_by_id])
        for payloads in payloads_by_id.values():
            for payload in payloads:
                if isinstance(payload, dict) and "sleep" in payload:
                    time.sleep(payload["sleep"])


def measure(url: str, seconds: float, threads: int, shards: int) -> list[float]:
    """Milliseconds from ``perform_async`` to ``perform`` of the other shards' jobs while
    the long perform runs."""
    configure(url, threads, Sleepy, shards)
    client = redis.Redis.from_url(url)
    queue = Sleepy.queue()
    ids = {shard: [] for shard in range(shards)}
    number = 0
    while any(len(found) < 400 for found in ids.values()):
        shard = queue.shard_of(str(number))
        ids[shard].append(str(number))
        number += 1
    worker = WorkerProcess(url, threads, Sleepy, shards)
    samples: list[float] = []
    try:
        Sleepy.perform_async([{"id": ids[1][-1]}])
        next_start(client)  # the worker is up
        Sleepy.perform_async([{"id": ids[0][0], "payload": {"sleep": seconds}}])
        assert next_start(client)[0] == ids[0][0]
        rng = random.Random(7)
        end = time.monotonic() + seconds - 0.5
        n = 0
        while time.monotonic() < end:
            time.sleep(0.05)
            n += 1
            job_id = ids[rng.randrange(1, shards)][n]
            sent = time.perf_counter()
            Sleepy.perform_async([{"id": job_id}])
            started_id, started, _ = next_start(client, seconds + 5)
            assert started_id == job_id, (started_id, job_id)
            samples.append((started - sent) * 1000)
    finally:
        worker.stop(seconds + 30)
    return samples


def main() -> None:
    """Print p50, p99 and max in milliseconds."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--shards", type=int, default=4)
    args = parser.parse_args()
    server = start_server(tempfile.mkdtemp(prefix="lowkiq-bench-"))
    try:
        samples = measure(server.url, args.seconds, args.threads, args.shards)
    finally:
        server.stop()
    print(machine())
    p50, p99, worst = percentiles(samples)
    print(
        f"{len(samples)} jobs of the other shards during a {args.seconds:g} s perform, "
        f"enqueue -> perform start: p50 {p50:.2f} ms, p99 {p99:.2f} ms, max {worst:.2f} ms "
        f"(target: max <= 50 ms)"
    )


if __name__ == "__main__":
    main()
