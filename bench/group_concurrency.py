"""Worker.group_concurrency under kill -9: 3 `lowkiq worker` processes x 4 threads serve
groups A (a flood), B and C with group_concurrency = 2 while the bench SIGKILLs a random
process every few seconds (and starts a new one).  Every 10 ms it counts, per group, the
batches running in live processes (``bench:running:<group>``, written by the jobs):
the peak must not exceed the cap.  It also times B and C with A's flood against B and
C alone (the other groups keep their speed).

Runs against a private Redis (lowkiq.clients.embedded.start_server), never REDIS_URL.
With ``--group-rate R`` (and ``--cap 0``) each group is rate-limited to R jobs per second
instead (``RateLimit(R, per_group=True)``): the per-group figures then show each group at
its rate beside A's flood.

Usage: python bench/group_concurrency.py [--seconds 60] [--cap 2] [--kill-every 3]
       [--group-rate R]
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import redis
from _machine import machine

import lowkiq
from lowkiq.clients.embedded import start_server

ROOT = Path(__file__).resolve().parents[1]
GROUPS = ("A", "B", "C")


def start_worker(url: str, cap: int, logs: Path, number: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "REDIS_URL": url, "BENCH_CAP": str(cap), "PYTHONPATH": str(ROOT)}
    with (logs / f"worker-{number}.log").open("w") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "lowkiq", "worker", "-r", "group_concurrency_app",
             "--threads", "4"],
            env=env, cwd=ROOT / "bench", stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip


def enqueue(url: str, counts: dict[str, int], sleep: float) -> None:
    os.environ["REDIS_URL"] = url  # the app's recorder
    from group_concurrency_app import Tenants

    for group, count in counts.items():
        for start in range(0, count, 1000):
            Tenants.perform_async(
                [
                    {"id": f"{group}{n}", "group": group, "payload": {"g": group, "sleep": sleep}}
                    for n in range(start, min(start + 1000, count))
                ]
            )


def live_running(client: redis.Redis, live: set[int]) -> dict[str, int]:
    """Batches of each group running now in the live processes."""
    pipe = client.pipeline(transaction=False)
    for group in GROUPS:
        pipe.smembers(f"bench:running:{group}")
    return {
        group: sum(1 for m in members if int(m.split(b":")[0]) in live)
        for group, members in zip(GROUPS, pipe.execute(), strict=True)
    }


def finished(client: redis.Redis) -> dict[str, list[tuple[float, float]]]:
    """Each group's performs: (start, end)."""
    by_group: dict[str, list[tuple[float, float]]] = {g: [] for g in GROUPS}
    for row in client.lrange("bench:done", 0, -1):
        group, started, ended = row.decode().split()
        by_group[group].append((float(started), float(ended)))
    return by_group


def run(url: str, cap: int, counts: dict[str, int], seconds: float, kill_every: float,
        sleep: float, logs: Path) -> tuple[dict[str, int], dict[str, float], int]:  # fmt: skip
    """One run: the peak of live running batches per group, each group's jobs/s while it
    had jobs, and the processes killed."""
    client = redis.Redis.from_url(url)
    client.flushall()
    lowkiq.settings.reset()
    lowkiq.settings.redis = lambda: redis.Redis.from_url(url)
    enqueue(url, counts, sleep)
    workers = [start_worker(url, cap, logs, n) for n in range(3)]
    peaks = dict.fromkeys(GROUPS, 0)
    killed = 0
    started = time.monotonic()
    next_kill = started + kill_every
    total = sum(counts.values())
    try:
        while time.monotonic() - started < seconds:
            if kill_every and time.monotonic() >= next_kill:
                victim = random.randrange(len(workers))
                workers[victim].send_signal(signal.SIGKILL)
                workers[victim].wait()
                killed += 1
                workers[victim] = start_worker(url, cap, logs, 10 + killed)
                next_kill = time.monotonic() + kill_every
            live = {w.pid for w in workers if w.poll() is None}
            for group, count in live_running(client, live).items():
                peaks[group] = max(peaks[group], count)
            if client.llen("bench:done") >= total and not kill_every:
                break
            time.sleep(0.01)
    finally:
        for worker in workers:
            worker.send_signal(signal.SIGTERM)
        for worker in workers:
            try:
                worker.wait(10)
            except subprocess.TimeoutExpired:
                worker.kill()
    rates = {}
    for group, spans in finished(client).items():
        if spans:
            first, last = min(s for s, _ in spans), max(e for _, e in spans)
            rates[group] = len(spans) / max(last - first, 1e-9)
    return peaks, rates, killed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--cap", type=int, default=2)
    parser.add_argument("--kill-every", type=float, default=3.0)
    parser.add_argument("--sleep", type=float, default=0.01, help="seconds a job sleeps")
    parser.add_argument("--group-rate", type=float, default=0.0, help="jobs/s per group")
    args = parser.parse_args()
    os.environ["BENCH_GROUP_RATE"] = str(args.group_rate)  # the workers' environment
    logs = Path(tempfile.mkdtemp(prefix="lowkiq-group-cap-"))
    server = start_server(str(logs / "redis"))
    try:
        print(machine())
        flood = {"A": 100_000, "B": 2_000, "C": 2_000}
        peaks, rates, killed = run(
            server.url, args.cap, flood, args.seconds, args.kill_every, args.sleep, logs
        )
        print(f"chaos, cap {args.cap}, {args.seconds:.0f} s, {killed} SIGKILLs: peak running "
              f"batches per group {peaks} (live processes, sampled every 10 ms)")  # fmt: skip
        print(
            "  jobs/s per group while it ran: "
            + ", ".join(f"{g} {r:,.0f}" for g, r in rates.items())
        )
        alone = {"B": 2_000, "C": 2_000}
        _, alone_rates, _ = run(server.url, args.cap, alone, args.seconds, 0, args.sleep, logs)
        print(
            "  B and C alone, no kills: "
            + ", ".join(f"{g} {r:,.0f}" for g, r in alone_rates.items())
        )
        with_flood_quiet, flood_rates, _ = run(
            server.url, args.cap, flood, args.seconds, 0, args.sleep, logs
        )
        print(f"  with A's flood, no kills: peaks {with_flood_quiet}, "
              + ", ".join(f"{g} {r:,.0f}" for g, r in flood_rates.items()))  # fmt: skip
        print(f"logs: {logs}")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
