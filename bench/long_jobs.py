"""Long jobs: an iterating perform gives the rest back, so another id of its shard waits
at most ``max_perform_seconds``, and TERM ends it within one payload.

One worker process (its own process, as in production) serves an
``lowkiq.IterableWorker`` with one shard and ``max_perform_seconds = 0.1``:

1. one id with ``--payloads`` payloads of 1 ms each is enqueued, then, once it runs,
   another id of the same (only) shard; printed: how long that id waited from its
   enqueue to its perform (target: 0.2 s), and whether every payload of the hot id ran
   exactly once, in score order;
2. the same hot id again, then TERM to the worker while it iterates; printed: TERM to
   exit (target: one payload + 0.5 s), and how many payloads were left for the next
   process, which then runs them (checked: exactly once, in order, overall).

Runs against a private Redis (lowkiq.clients.embedded.start_server), never REDIS_URL.
Usage: python bench/long_jobs.py [--payloads 10000]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import signal
import tempfile
import time
from typing import Any

import redis
from _machine import machine
from latency import configure

import lowkiq
from lowkiq.clients.embedded import start_server
from lowkiq.runtime.server import Server

#: Where ``perform_one`` notes each payload it performed, and when the other id started.
DONE = "bench:done"
OTHER = "bench:other"


class Steps(lowkiq.IterableWorker):
    """One payload at a time; the hot id's payloads take 1 ms each."""

    max_perform_seconds = 0.1

    @classmethod
    def perform_one(cls, job_id: str, payload: Any) -> None:
        client = lowkiq.settings.client()
        if job_id == "other":
            client.rpush(OTHER, time.time())
            return
        time.sleep(0.001)
        client.rpush(DONE, payload)


def run_worker(url: str) -> None:
    """The worker process: a server with its signal handlers (TERM stops it gracefully)."""
    configure(url, 2, Steps, 1)
    Server(lowkiq.settings).run()


def start_worker(url: str) -> multiprocessing.process.BaseProcess:
    """A worker process of its own (spawned) serving :class:`Steps` (1 shard, 2 threads)."""
    configure(url, 2, Steps, 1)
    process = multiprocessing.get_context("spawn").Process(target=run_worker, args=(url,))
    process.start()
    return process


def hot_id(count: int, round_: int) -> list[dict[str, Any]]:
    """``count`` payloads of the id ``hot``, ascending scores."""
    base = 1_800_000_000 + round_ * count
    return [{"id": "hot", "payload": base + n, "score": base + n} for n in range(count)]


def done(client: redis.Redis) -> list[int]:
    return [int(value) for value in client.lrange(DONE, 0, -1)]


def wait_for(check: Any, timeout: float = 120.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := check()):
        if time.monotonic() > deadline:
            raise RuntimeError("timed out")
        time.sleep(0.005)
    return value


def other_id_wait(url: str, count: int) -> tuple[float, bool]:
    """Seconds the other id waited behind the hot id; whether the hot id's payloads ran
    exactly once, in order."""
    client = redis.Redis.from_url(url)
    worker = start_worker(url)
    try:
        Steps.perform_async(hot_id(count, 0))
        wait_for(lambda: client.llen(DONE) >= 50)
        sent = time.time()
        Steps.perform_async([{"id": "other"}])
        started = float(client.blpop([OTHER], timeout=60)[1])
        wait_for(lambda: client.llen(DONE) >= count)
        expected = [payload["payload"] for payload in hot_id(count, 0)]
        return started - sent, done(client) == expected
    finally:
        os.kill(worker.pid or 0, signal.SIGKILL)
        worker.join()


def term_to_exit(url: str, count: int) -> tuple[float, int, bool]:
    """Seconds from TERM to the worker's exit while it iterates; payloads left for the next
    process; whether all ran exactly once, in order."""
    client = redis.Redis.from_url(url)
    client.delete(DONE)
    first = start_worker(url)
    Steps.perform_async(hot_id(count, 1))
    wait_for(lambda: client.llen(DONE) >= 200)
    asked = time.monotonic()
    os.kill(first.pid or 0, signal.SIGTERM)
    first.join(30)
    took = time.monotonic() - asked
    left = count - client.llen(DONE)
    second = start_worker(url)
    try:
        wait_for(lambda: client.llen(DONE) >= count)
        time.sleep(0.5)  # anything run twice would show now
        expected = [payload["payload"] for payload in hot_id(count, 1)]
        return took, left, done(client) == expected
    finally:
        os.kill(second.pid or 0, signal.SIGKILL)
        second.join()


def main() -> None:
    """Print both measurements."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--payloads", type=int, default=10_000)
    args = parser.parse_args()
    server = start_server(tempfile.mkdtemp(prefix="lowkiq-bench-"))
    try:
        waited, exact = other_id_wait(server.url, args.payloads)
        took, left, exact_after_term = term_to_exit(server.url, args.payloads)
    finally:
        server.stop()
    print(machine())
    print(
        f"hot id of {args.payloads} payloads x 1 ms, max_perform_seconds 0.1: another id of "
        f"its shard started {waited:.3f} s after its enqueue (target: 0.2 s); every payload "
        f"exactly once, in order: {exact}"
    )
    print(
        f"TERM while iterating: exited in {took:.3f} s (target: one payload + 0.5 s), "
        f"{left} payloads left to the next process; all exactly once, in order: "
        f"{exact_after_term}"
    )


if __name__ == "__main__":
    main()
