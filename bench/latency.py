"""Idle wake-up latency: enqueue one job into an idle worker, time until ``perform`` starts;
then jobs scheduled 100 ms to 2 s ahead, time from their ``perform_in`` to ``perform``.

The worker runs in a process of its own, as behind a web app: the producer (this
process) enqueues, the worker's ``perform`` notes when it started (the host's monotonic
clock, which both processes share; wall-clock time for the scheduled jobs) in a Redis
list this process waits on.  Runs against a private Redis (lowkiq.clients.embedded.start_server),
never REDIS_URL.
It also prints the floor on this host, in the same run: a bare ``RPUSH`` waking a
``BLPOP`` in another process (which notes when it woke), with no lowkiq in between.
Usage: python bench/latency.py [--jobs 300] [--scheduled 300] [--threads 5] [--shards 5]
"""

from __future__ import annotations

import argparse
import multiprocessing
import random
import statistics
import tempfile
import time

import redis
from _machine import machine

import lowkiq
from lowkiq.clients.embedded import start_server
from lowkiq.runtime.server import Server

#: How far ahead scheduled jobs are due, seconds.
AHEAD = (0.1, 2.0)
#: Where ``perform`` notes ``"<id> <monotonic> <wall clock>"`` when it starts.
STARTS = "bench:starts"


class Timed(lowkiq.Worker):
    """Notes when perform starts."""

    @classmethod
    def perform(cls, payloads_by_id: dict) -> None:
        monotonic, now = time.perf_counter(), time.time()
        notes = [f"{job_id} {monotonic} {now}" for job_id in payloads_by_id]
        lowkiq.settings.client().rpush(STARTS, *notes)


def configure(url: str, threads: int, worker: type[lowkiq.Worker], shards: int) -> None:
    """Point lowkiq at the private Redis, with the worker and its shape."""
    lowkiq.settings.redis = lambda: redis.Redis.from_url(url)
    lowkiq.settings.threads_per_node = threads
    worker.shards_count = shards
    lowkiq.settings.workers = [worker]


def serve(
    url: str,
    threads: int,
    worker: type[lowkiq.Worker],
    shards: int,
    stop: multiprocessing.synchronize.Event,
) -> None:
    """The worker process: a server until ``stop`` is set."""
    configure(url, threads, worker, shards)
    server = Server(lowkiq.settings)
    server.start()
    stop.wait(600)
    server.request_stop()
    server.stop()


class WorkerProcess:
    """A worker process of its own (spawned), serving ``worker`` until :meth:`stop`."""

    def __init__(self, url: str, threads: int, worker: type[lowkiq.Worker], shards: int) -> None:
        configure(url, threads, worker, shards)
        context = multiprocessing.get_context("spawn")
        self.stopping = context.Event()
        self.process = context.Process(
            target=serve, args=(url, threads, worker, shards, self.stopping)
        )
        self.process.start()

    def stop(self, timeout: float = 30.0) -> None:
        """Stop it (killed if it is not gone within ``timeout`` seconds)."""
        self.stopping.set()
        self.process.join(timeout)
        if self.process.is_alive():
            self.process.kill()


def next_start(client: redis.Redis, timeout: float = 5.0) -> tuple[str, float, float]:
    """The next note of a started perform: id, monotonic and wall-clock time."""
    reply = client.blpop([STARTS], timeout=timeout)
    if reply is None:
        raise RuntimeError(f"a job was not performed within {timeout:g} s")
    job_id, monotonic, now = reply[1].decode().split()
    return job_id, float(monotonic), float(now)


def measure(url: str, jobs: int, scheduled: int, threads: int, shards: int) -> tuple[list, list]:
    """Milliseconds from ``perform_async`` to ``perform`` starting, one job at a time;
    and from ``perform_in`` to ``perform`` starting, for jobs scheduled ahead."""
    client = redis.Redis.from_url(url, socket_timeout=120)  # beyond next_start's BLPOP
    worker = WorkerProcess(url, threads, Timed, shards)
    samples = []
    try:
        Timed.perform_async([{"id": "warm-up"}])
        next_start(client, timeout=60.0)  # the worker process may still be starting
        for n in range(jobs):
            time.sleep(0.02)  # every thread idle again
            sent = time.perf_counter()
            Timed.perform_async([{"id": n}])
            samples.append((next_start(client)[1] - sent) * 1000)
        late = measure_scheduled(client, scheduled)
    finally:
        worker.stop()
    return samples, late


def measure_scheduled(client: redis.Redis, jobs: int) -> list[float]:
    """Jobs enqueued every 20 ms, each due 100 ms to 2 s later: milliseconds from
    ``perform_in`` to ``perform`` starting."""
    rng = random.Random(7)
    due: dict[str, float] = {}
    for n in range(jobs):
        job_id = f"scheduled-{n}"
        due[job_id] = time.time() + rng.uniform(*AHEAD)
        Timed.perform_async([{"id": job_id, "perform_in": due[job_id]}])
        time.sleep(0.02)
    started: dict[str, float] = {}
    while len(started) < jobs:
        job_id, _, now = next_start(client)
        started[job_id] = now
    return [(started[job_id] - at) * 1000 for job_id, at in due.items()]


#: The list the floor's producer pushes to, and the one its consumer notes wake-ups in.
FLOOR_WAKE, FLOOR_WOKEN = "bench:floor:wake", "bench:floor:woken"


def wake_consumer(url: str, wakes: int) -> None:
    """The floor's consumer: ``wakes`` times, block on FLOOR_WAKE and note when it woke."""
    client = redis.Redis.from_url(url, socket_timeout=120)
    for _ in range(wakes):
        client.blpop([FLOOR_WAKE], timeout=10)
        client.rpush(FLOOR_WOKEN, time.perf_counter())


def measure_floor(url: str, wakes: int) -> list[float]:
    """Milliseconds from an ``RPUSH`` to the ``BLPOP`` it wakes in another process."""
    client = redis.Redis.from_url(url, socket_timeout=120)
    process = multiprocessing.get_context("spawn").Process(
        target=wake_consumer, args=(url, wakes + 1)
    )
    process.start()
    try:
        client.rpush(FLOOR_WAKE, "warm-up")
        client.blpop([FLOOR_WOKEN], timeout=30)
        samples = []
        for _ in range(wakes):
            time.sleep(0.02)
            sent = time.perf_counter()
            client.rpush(FLOOR_WAKE, "wake")
            woken = client.blpop([FLOOR_WOKEN], timeout=10)
            if woken is None:
                raise RuntimeError("the floor's consumer did not wake within 10 s")
            samples.append((float(woken[1]) - sent) * 1000)
        return samples
    finally:
        process.join(10)
        if process.is_alive():
            process.kill()


def percentiles(samples: list[float]) -> tuple[float, float, float]:
    """p50, p99 and max of ``samples``."""
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return statistics.median(ordered), p99, ordered[-1]


def main() -> None:
    """Print p50, p99 and max in milliseconds."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=300)
    parser.add_argument("--scheduled", type=int, default=300)
    parser.add_argument("--threads", type=int, default=5)
    parser.add_argument("--shards", type=int, default=5)
    args = parser.parse_args()
    server = start_server(tempfile.mkdtemp(prefix="lowkiq-bench-"))
    try:
        samples, late = measure(server.url, args.jobs, args.scheduled, args.threads, args.shards)
        floor = measure_floor(server.url, args.jobs) if args.jobs else []
    finally:
        server.stop()
    print(machine())
    if samples:
        p50, p99, worst = percentiles(samples)
        print(
            f"{len(samples)} idle enqueue -> perform start: "
            f"p50 {p50:.2f} ms, p99 {p99:.2f} ms, max {worst:.2f} ms"
        )
    if floor:
        p50, p99, worst = percentiles(floor)
        print(
            f"floor, {len(floor)} bare RPUSH -> BLPOP woken in another process: "
            f"p50 {p50:.2f} ms, p99 {p99:.2f} ms, max {worst:.2f} ms"
        )
    if late:
        p50, p99, worst = percentiles(late)
        print(
            f"{len(late)} jobs scheduled {AHEAD[0] * 1000:.0f} ms-{AHEAD[1]:.0f} s ahead, "
            f"perform start - perform_in: p50 {p50:.2f} ms, p99 {p99:.2f} ms, max {worst:.2f} ms"
        )


if __name__ == "__main__":
    main()
