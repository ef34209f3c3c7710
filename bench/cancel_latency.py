"""How long a running perform takes to see ``Worker.actions().cancel``: from the call
(on this host) to the perform's ``current_batch().should_stop()`` turning true in a
``lowkiq worker`` process, over ``--cancels`` cancels, against a private single server
and a private 3-master Redis Cluster (never REDIS_URL).

Two worker processes (default settings: heartbeat every 5 s, so what is measured is the
nudge a cancel sends, not the beat's period) run ``bench/cancel_app.py``; each round
enqueues one job, waits until it runs, waits a random 0-1 s, cancels it and waits for
its perform to record when it saw the stop.
Usage: python bench/cancel_latency.py [--cancels 50] [--targets server cluster]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import redis
from _machine import machine

import lowkiq
from lowkiq.clients.connection import Client
from lowkiq.clients.embedded import start_server
from lowkiq.clients.embedded_cluster import start_cluster

ROOT = Path(__file__).resolve().parent.parent
APP = ROOT / "bench" / "cancel_app.py"


def wait_for(check, timeout: float = 60.0):  # type: ignore[no-untyped-def]
    """``check()`` once truthy; SystemExit after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not (value := check()):
        if time.monotonic() > deadline:
            raise SystemExit("timed out")
        time.sleep(0.005)
    return value


def measure(url: str, client: Client, cancels: int) -> list[float]:
    """Seconds from each cancel call to its perform seeing should_stop()."""
    sys.path.insert(0, str(ROOT / "bench"))
    os.environ["REDIS_URL"] = url
    from cancel_app import Waiting

    lowkiq.settings.workers = [Waiting]
    processes = [
        subprocess.Popen(
            [sys.executable, "-m", "lowkiq", "worker", "-r", str(APP)],
            env={**os.environ, "REDIS_URL": url, "PYTHONPATH": str(ROOT)},
            stdout=subprocess.DEVNULL,
            stderr=None if os.environ.get("BENCH_VERBOSE") else subprocess.DEVNULL,
            cwd=ROOT,
        )
        for _ in range(2)
    ]
    latencies: list[float] = []
    try:
        for n in range(cancels):
            job_id = f"c{n}"
            Waiting.perform_async([{"id": job_id, "payload": n}])
            wait_for(lambda: client.lpos("bench:started", job_id) is not None)  # noqa: B023
            time.sleep(random.random())
            sent = time.time()
            Waiting.actions().cancel([job_id])
            entry = wait_for(lambda: client.lindex("bench:stopped", n))  # noqa: B023
            seen = json.loads(entry)
            assert seen["id"] == job_id, seen
            latencies.append(seen["at"] - sent)
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(60)
    return latencies


def report(name: str, latencies: list[float]) -> None:
    """Print the median, p99 and slowest of ``latencies``."""
    ordered = sorted(latencies)
    p99 = ordered[max(0, int(len(ordered) * 0.99 + 0.5) - 1)]
    print(
        f"{name:8} {len(ordered)} cancels: median {statistics.median(ordered) * 1000:.0f} ms, "
        f"p99 {p99 * 1000:.0f} ms, slowest {ordered[-1] * 1000:.0f} ms"
    )


def main() -> None:
    """Measure each target and print its figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cancels", type=int, default=50)
    parser.add_argument("--targets", nargs="*", default=["server", "cluster"])
    args = parser.parse_args()
    print(machine())
    for target in args.targets:
        with tempfile.TemporaryDirectory() as directory:
            if target == "server":
                server = start_server(directory)
                url, stop = server.url, server.stop
                lowkiq.settings.redis = lambda url=url: redis.Redis.from_url(url)
            else:
                cluster = start_cluster(Path(directory), masters=3)
                url, stop = cluster.url.replace("redis://", "redis+cluster://"), cluster.stop
                first = cluster.url
                lowkiq.settings.redis = lambda first=first: redis.RedisCluster.from_url(first)
            try:
                report(target, measure(url, lowkiq.settings.client(), args.cancels))
            finally:
                lowkiq.settings.reset()
                stop()


if __name__ == "__main__":
    main()
