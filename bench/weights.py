"""Weights: do backlogged workers sharing a process start batches as their weights say,
and does a heavy worker beside a flood get a free place at once?

``share``: workers ``Three`` (weight 3) and ``One`` (weight 1), 8 shards each, both
with a backlog, one process of ``--threads`` threads (default 4); each batch (batch
size 1) takes ``--batch-ms`` (default 4).  Printed: batches each started over
``--seconds`` (default 10) after a second of warm-up, and their ratio (target 3 : 1
± 10 %).

``urgent``: a ``Flood`` worker (weight 1, 16 shards) with a backlog that fills every
thread, and an ``Urgent`` worker (``--urgent-weight``, default 10, 2 shards) given one
job every 50 ms for ``--seconds``.  Printed: how long Urgent's jobs wait from
``perform_async`` to ``perform`` (p50 / p99 / max; target p99 ≤ 50 ms), with weight 10
and, for comparison, with weight 1, and with no flood at all (the host's floor now).

Runs against a private Redis (lowkiq.clients.embedded.start_server), never REDIS_URL.
Usage: python bench/weights.py [share|urgent|all] [--seconds 10] [--threads 4]
"""

from __future__ import annotations

import argparse
import multiprocessing
import multiprocessing.synchronize
import tempfile
import time

import redis
from _machine import machine
from latency import percentiles

import lowkiq
from lowkiq.clients.embedded import start_server
from lowkiq.runtime.server import Server

#: Where ``perform`` notes ``"<worker> <id> <monotonic>"`` of each batch it starts.
STARTS = "bench:starts"
#: Seconds each batch takes (set in the worker process from the command line).
BATCH_SECONDS = 0.004


def _note(name: str, payloads_by_id: dict) -> None:
    now = time.perf_counter()
    job_id = next(iter(payloads_by_id))
    lowkiq.settings.client().rpush(STARTS, f"{name} {job_id} {now}")
    time.sleep(BATCH_SECONDS)


def _worker(name: str, shards: int, weight: float, doc: str) -> type[lowkiq.Worker]:
    """A worker class ``name`` whose ``perform`` notes its start, then takes BATCH_SECONDS."""

    def perform(cls: type[lowkiq.Worker], payloads_by_id: dict) -> None:
        _note(name, payloads_by_id)

    attributes = {"__doc__": doc, "shards_count": shards, "weight": weight}
    return type(name, (lowkiq.Worker,), {**attributes, "perform": classmethod(perform)})


Three = _worker("Three", 8, 3.0, "Weight 3.")
One = _worker("One", 8, 1.0, "Weight 1.")
Flood = _worker("Flood", 16, 1.0, "Weight 1, a backlog that fills every thread.")
Urgent = _worker("Urgent", 2, 1.0, "A few jobs that should not wait behind the flood.")

WORKERS = {"Three": Three, "One": One, "Flood": Flood, "Urgent": Urgent}


def configure(url: str, threads: int, names: list[str], weights: dict[str, float]) -> None:
    """Point lowkiq at the private Redis, with the named workers and their weights."""
    lowkiq.settings.redis = lambda: redis.Redis.from_url(url)
    lowkiq.settings.threads_per_node = threads
    for name, weight in weights.items():
        WORKERS[name].weight = weight
    lowkiq.settings.workers = [WORKERS[name] for name in names]


def serve(
    url: str,
    threads: int,
    names: list[str],
    weights: dict[str, float],
    batch_seconds: float,
    stop: multiprocessing.synchronize.Event,
) -> None:
    """The worker process: a server until ``stop`` is set."""
    global BATCH_SECONDS
    BATCH_SECONDS = batch_seconds
    configure(url, threads, names, weights)
    server = Server(lowkiq.settings)
    server.start()
    stop.wait(600)
    server.request_stop()
    server.stop()


def run_process(
    url: str, threads: int, names: list[str], weights: dict[str, float], batch_seconds: float
) -> tuple[multiprocessing.process.BaseProcess, multiprocessing.synchronize.Event]:
    """A worker process of its own (spawned), and the event that stops it."""
    context = multiprocessing.get_context("spawn")
    stop = context.Event()
    process = context.Process(
        target=serve, args=(url, threads, names, weights, batch_seconds, stop)
    )
    process.start()
    return process, stop


def ended(
    process: multiprocessing.process.BaseProcess, stop: multiprocessing.synchronize.Event
) -> None:
    """Stop the worker process (killed if not gone within 30 s)."""
    stop.set()
    process.join(30)
    if process.is_alive():
        process.kill()


def backlog(worker: type[lowkiq.Worker], count: int) -> None:
    """``count`` jobs of distinct ids, enqueued 1,000 a call."""
    for first in range(0, count, 1000):
        worker.perform_async([{"id": str(n)} for n in range(first, min(first + 1000, count))])


def share(url: str, args: argparse.Namespace) -> None:
    """Started batches of weights 3 and 1 over ``--seconds``."""
    client = redis.Redis.from_url(url)
    client.flushall()
    configure(url, args.threads, ["Three", "One"], {"Three": 3.0, "One": 1.0})
    # More than the process can start in the window, for both.
    jobs = int((args.seconds + 2) * args.threads / (args.batch_ms / 1000)) + 1000
    backlog(Three, jobs)
    backlog(One, jobs)
    process, stop = run_process(
        url, args.threads, ["Three", "One"], {"Three": 3.0}, args.batch_ms / 1000
    )
    try:
        time.sleep(2.0 + 1.0)  # the process starts, then a second of warm-up
        first = client.llen(STARTS)
        time.sleep(args.seconds)
        rows = client.lrange(STARTS, first, client.llen(STARTS) - 1)
    finally:
        ended(process, stop)
    counts = {"Three": 0, "One": 0}
    for row in rows:
        counts[row.decode().split()[0]] += 1
    ratio = counts["Three"] / max(counts["One"], 1)
    print(
        f"share: {args.seconds:g} s, {args.threads} threads, {args.batch_ms:g} ms a batch: "
        f"weight 3 started {counts['Three']}, weight 1 started {counts['One']}: "
        f"{ratio:.2f} : 1 (target 3 : 1 ± 10 %, 2.70-3.30)"
    )


def urgent(url: str, args: argparse.Namespace, weight: float, flood: bool = True) -> list[float]:
    """Urgent's waits (seconds) beside a flood, with ``weight``."""
    client = redis.Redis.from_url(url)
    client.flushall()
    configure(url, args.threads, ["Flood", "Urgent"], {"Urgent": weight})
    if flood:
        backlog(Flood, int((args.seconds + 4) * args.threads / (args.batch_ms / 1000)) + 1000)
    process, stop = run_process(
        url, args.threads, ["Flood", "Urgent"], {"Urgent": weight}, args.batch_ms / 1000
    )
    enqueued: dict[str, float] = {}
    try:
        time.sleep(3.0)  # the process starts and the flood fills its threads
        end = time.perf_counter() + args.seconds
        n = 0
        while time.perf_counter() < end:
            job_id = f"u{n}"
            enqueued[job_id] = time.perf_counter()
            Urgent.perform_async([{"id": job_id}])
            n += 1
            time.sleep(0.05)
        time.sleep(1.0)
        rows = client.lrange(STARTS, 0, -1)
    finally:
        ended(process, stop)
    waits = []
    for row in rows:
        name, job_id, at = row.decode().split()
        if name == "Urgent" and job_id in enqueued:
            waits.append(float(at) - enqueued[job_id])
    missing = len(enqueued) - len(waits)
    if missing:
        print(f"  ({missing} of {len(enqueued)} urgent jobs not started within the run)")
    return waits


def main() -> None:
    """Run the chosen measurements and print their figures."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("what", nargs="?", default="all", choices=["share", "urgent", "all"])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--batch-ms", type=float, default=4.0)
    parser.add_argument("--urgent-weight", type=float, default=10.0)
    args = parser.parse_args()
    server = start_server(tempfile.mkdtemp(prefix="lowkiq-bench-"))
    print(machine())
    try:
        if args.what in ("share", "all"):
            share(server.url, args)
        if args.what in ("urgent", "all"):
            # The floor in the same run: the same jobs with no flood at all.
            for weight, flood in ((args.urgent_weight, True), (1.0, True), (1.0, False)):
                waits = urgent(server.url, args, weight, flood)
                if waits:
                    p50, p99, worst = (round(s * 1000, 1) for s in percentiles(waits))
                    beside = f"beside a flood on {args.threads} threads" if flood else "alone"
                    print(
                        f"urgent, weight {weight:g}, {beside} ({args.batch_ms:g} ms a batch): "
                        f"{len(waits)} jobs, enqueue -> perform "
                        f"p50 {p50} ms, p99 {p99} ms, max {worst} ms"
                        + (" (target p99 <= 50 ms)" if weight == args.urgent_weight else "")
                        + ("; the floor on this host now" if not flood else "")
                    )
    finally:
        server.stop()


if __name__ == "__main__":
    main()
