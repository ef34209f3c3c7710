"""Noisy neighbours: does one busy producer hold up the jobs of the others?

``hot-id``: one producer sends ``--rate`` payloads a second (default 1,000) to one id
for ``--seconds`` (default 15), each payload costing ``--payload-ms`` of ``perform``
(default 1.5 ms: a batch of that id, 250 payloads, runs for 375 ms, so the id's
backlog grows).  Every 200 ms a job of another id of the same shard is enqueued;
printed: how long those jobs wait from ``perform_async`` to their ``perform``
(p50/p99/max; target: at most 0.5 s), and whether the hot id's payloads ran in
score order.

The worker runs in a process of its own (the default worker: 5 shards, 5 threads,
batch size 1); its ``perform`` notes when it starts (the host's monotonic clock,
shared by both processes) in Redis.  Runs against a private Redis
(lowkiq.embedded.start_server), never REDIS_URL.
Usage: python bench/noisy_neighbour.py [hot-id] [--seconds 15] [--rate 1000]
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time

import redis
from _machine import machine
from latency import WorkerProcess, configure, percentiles

import lowkiq
from lowkiq.embedded import start_server

#: Where ``perform`` notes ``"<id> <monotonic>"`` of the jobs other than the hot id.
STARTS = "bench:starts"
#: Where ``perform`` notes ``"<first score> <last score> <in order: 1|0>"`` of each batch
#: of the hot id.
HOT_BATCHES = "bench:hot"
#: The hot id.
HOT = "account-a"
#: What one payload of the hot id costs ``perform``, seconds (set by the producer in the
#: payload, so the worker process needs no configuration).
SECONDS_PER_PAYLOAD = "s"


class Neighbours(lowkiq.Worker):
    """Notes when perform starts; the hot id's payloads ``{"n": score, "s": seconds}``
    sleep their cost and have their order checked."""

    @classmethod
    def perform(cls, payloads_by_id: dict) -> None:
        monotonic = time.perf_counter()
        client = lowkiq.settings.client()
        for job_id, payloads in payloads_by_id.items():
            if job_id != HOT:
                client.rpush(STARTS, f"{job_id} {monotonic}")
                continue
            scores = [payload["n"] for payload in payloads]
            in_order = int(scores == sorted(scores))
            time.sleep(sum(payload[SECONDS_PER_PAYLOAD] for payload in payloads))
            client.rpush(HOT_BATCHES, f"{scores[0]} {scores[-1]} {in_order}")


def neighbour_ids(count: int, shards: int) -> list[str]:
    """``count`` ids in the hot id's shard."""
    queue = Neighbours.queue()
    shard = queue.shard_of(HOT)
    found: list[str] = []
    number = 0
    while len(found) < count:
        if queue.shard_of(f"b-{number}") == shard:
            found.append(f"b-{number}")
        number += 1
    return found


def hot_id(url: str, seconds: float, rate: int, payload_ms: float) -> None:
    """Run the hot-id experiment and print its figures."""
    shards, threads = 5, 5
    configure(url, threads, Neighbours, shards)
    client = redis.Redis.from_url(url)
    ids = neighbour_ids(int(seconds / 0.2) + 1, shards)
    worker = WorkerProcess(url, threads, Neighbours, shards)
    sent: dict[str, float] = {}
    stop = threading.Event()
    cost = payload_ms / 1000

    def produce() -> None:
        """``rate`` payloads a second onto the hot id, in a call every 10 ms."""
        per_call = max(1, rate // 100)
        n = 0
        start = time.monotonic()
        while not stop.is_set():
            jobs = [
                {"id": HOT, "payload": {"n": n + k, SECONDS_PER_PAYLOAD: cost}, "score": n + k}
                for k in range(per_call)
            ]
            Neighbours.perform_async(jobs)
            n += per_call
            pause = start + n / rate - time.monotonic()
            if pause > 0:
                time.sleep(pause)

    try:
        Neighbours.perform_async([{"id": "warm-up"}])
        client.blpop([STARTS], timeout=30)
        producer = threading.Thread(target=produce)
        producer.start()
        time.sleep(1.0)  # the hot id has a backlog
        end = time.monotonic() + seconds - 1.0
        for job_id in ids:
            if time.monotonic() >= end:
                break
            sent[job_id] = time.perf_counter()
            Neighbours.perform_async([{"id": job_id}])
            time.sleep(0.2)
        stop.set()
        producer.join()
        started: dict[str, float] = {}
        deadline = time.monotonic() + 600
        while len(started) < len(sent) and time.monotonic() < deadline:
            for line in client.lpop(STARTS, 1000) or []:
                job_id, monotonic = line.decode().split()
                started[job_id] = float(monotonic)
            time.sleep(0.1)
    finally:
        worker.stop(120)
    waits = [started[job_id] - at for job_id, at in sent.items() if job_id in started]
    batches = [line.decode().split() for line in client.lrange(HOT_BATCHES, 0, -1)]
    pairs = zip(batches, batches[1:], strict=False)
    in_order = all(b[2] == "1" for b in batches) and all(
        float(later[0]) > float(earlier[1]) for earlier, later in pairs
    )
    p50, p99, worst = percentiles(waits)
    print(
        f"hot id: {rate} payloads/s for {seconds:g} s ({payload_ms:g} ms each); "
        f"{len(waits)}/{len(sent)} jobs of other ids in its shard, enqueue -> perform: "
        f"p50 {p50:.3f} s, p99 {p99:.3f} s, max {worst:.3f} s (target: <= 0.5 s); "
        f"the hot id's {len(batches)} batches in score order: {in_order}"
    )


def main() -> None:
    """Run the chosen experiment on a private Redis and print its figures."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("experiment", nargs="?", default="hot-id", choices=["hot-id"])
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--rate", type=int, default=1000)
    parser.add_argument("--payload-ms", type=float, default=1.5)
    args = parser.parse_args()
    server = start_server(tempfile.mkdtemp(prefix="lowkiq-bench-"))
    try:
        print(machine())
        hot_id(server.url, args.seconds, args.rate, args.payload_ms)
    finally:
        server.stop()


if __name__ == "__main__":
    main()
