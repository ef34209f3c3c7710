"""Periodic jobs under SIGKILL: every tick enqueued exactly once, and how late.

``--processes`` `lowkiq worker` processes (default 3) run one schedule of
1-second ticks for ``--seconds`` (default 300); every ``--kill-every`` seconds
(default 20) one of them, at random, gets SIGKILL and a new one is started.
The schedule's log in Redis records each enqueue (tick and Redis's time when
it was enqueued, written by the same script that passes the tick); it is read
every few seconds.  Prints the ticks missed (no enqueue between the first and
the last tick seen), the ticks doubled (enqueued more than once), and the
enqueue delay after the tick (p50, p99, max).

Usage: python bench/periodic.py [--seconds 300] [--processes 3] [--kill-every 20]
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

from _machine import machine

from lowkiq.clients.embedded import start_server
from lowkiq.storage import schedules as store
from lowkiq.storage.queue import Queue

ROOT = Path(__file__).resolve().parents[1]
#: Seconds between two reads of the schedule's log (it keeps the latest 100 enqueues).
READ_EVERY = 5.0


def start_worker(env: dict[str, str], logs: Path, number: int) -> subprocess.Popen[bytes]:
    """One `lowkiq worker` process of the run, its output in a log file."""
    with (logs / f"worker-{number}.log").open("w") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "lowkiq", "worker", "-r", "periodic_app"],
            env=env, cwd=ROOT / "bench", stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip


def quantile(values: list[int], q: float) -> int:
    """The ``q`` quantile (nearest rank) of ``values``."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=300.0)
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--kill-every", type=float, default=20.0)
    args = parser.parse_args()
    directory = Path(tempfile.mkdtemp(prefix="lowkiq-periodic-"))
    server = start_server(directory / "redis")
    env = {**os.environ, "REDIS_URL": server.url, "PYTHONPATH": str(ROOT)}
    import redis

    client = redis.Redis.from_url(server.url)
    queue = Queue(client, "Heartbeat", 4)
    workers = [start_worker(env, directory, n) for n in range(args.processes)]
    started, kills = len(workers), 0
    seen: set[tuple[int, int]] = set()
    try:
        begin = time.monotonic()
        next_kill = begin + args.kill_every
        next_read = begin + READ_EVERY
        while time.monotonic() - begin < args.seconds:
            time.sleep(0.05)
            if time.monotonic() >= next_kill:
                victim = random.randrange(len(workers))
                workers[victim].send_signal(signal.SIGKILL)
                workers[victim].wait()
                workers[victim] = start_worker(env, directory, started)
                started, kills = started + 1, kills + 1
                next_kill += args.kill_every
            if time.monotonic() >= next_read:
                seen |= {(e.tick, e.enqueued_at) for e in store.read_state(queue, "beat").log}
                next_read += READ_EVERY
        state = store.read_state(queue, "beat")
        seen |= {(e.tick, e.enqueued_at) for e in state.log}
    finally:
        for worker in workers:
            worker.send_signal(signal.SIGTERM)
        for worker in workers:
            try:
                worker.wait(20)
            except subprocess.TimeoutExpired:
                worker.kill()
        server.stop()
    ticks = sorted(tick for tick, _ in seen)
    unique = sorted(set(ticks))
    expected = range(unique[0], unique[-1] + 1000, 1000) if unique else range(0)
    missed = len(set(expected) - set(unique))
    # runs: every tick ever enqueued (a counter the same script adds to); the log
    # shows a tick enqueued twice as two entries.
    doubled = max(state.runs - len(unique), len(ticks) - len(unique))
    delays = [at - tick for tick, at in seen]
    print(machine())
    print(
        f"{args.processes} processes, 1-second ticks, {args.seconds:.0f} s, "
        f"SIGKILL every {args.kill_every:.0f} s ({kills} kills)"
    )
    print(f"ticks enqueued: {len(unique)} (expected {len(expected)}), runs counter {state.runs}")
    print(f"missed ticks: {missed}")
    print(f"doubled ticks: {doubled}")
    if delays:
        print(
            f"enqueue delay after the tick: p50 {quantile(delays, 0.5)} ms, "
            f"p99 {quantile(delays, 0.99)} ms, max {max(delays)} ms; "
            f"{sum(delay > 50 for delay in delays)} tick(s) over 50 ms"
        )
    print(f"load average at the end: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
