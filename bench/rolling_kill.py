"""Rolling SIGKILL: how long each shard goes unserved while a fleet is killed one by one.

P `lowkiq worker` processes (``--processes``, default 6) serve Q queues (``--queues``,
default 4) of S shards each (``--shards``, default 5, a worker's default) with the
default settings (``lease_ttl`` 15 s, heartbeats every 5 s; ``--lease-ttl`` to change
it).  They are started one after another, then every ``--every`` seconds (default 5)
the oldest of them still running gets SIGKILL and a replacement starts at once, as a
deployment replacing crashed pods would, until all P were killed.  A feeder enqueues a few new
jobs every 0.2 s meanwhile (bench/rolling_kill_app.py records each one performed).

A poller reads every shard's lease holder every 50 ms: a shard is unserved while
nobody holds its lease or a killed process still does.  Once every shard is served
again after the last kill, it prints per shard the longest time it was unserved, the
target (``lease_ttl`` + 5 s: a killed process's shards wait out its lease, and not a
second one behind the next process to be killed), and, after the queue drained, the
jobs lost (enqueued, never performed).
Usage: python bench/rolling_kill.py [--processes 6] [--every 5] [--queues 4] [--shards 5]
       [--lease-ttl SECONDS]
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from types import ModuleType

import redis
from _machine import machine

import lowkiq
from lowkiq.clients.embedded import start_server
from lowkiq.ownership.leases import parse_owner, tokens
from lowkiq.ownership.membership import live_processes
from lowkiq.storage.queue import Queue

BENCH = Path(__file__).resolve().parent
#: Seconds between two readings of the leases, and between two feeds.
POLL = 0.05
FEED = 0.2
#: Seconds the queue may take to drain after the run.
DRAIN_LIMIT = 120.0


class Unserved:
    """Polls every shard's lease holder on a thread; per shard, the longest time no live
    process held its lease."""

    def __init__(self, queues: list[Queue], alive: set[int]) -> None:
        self.queues = queues
        #: The pids of the processes not killed (one is removed before it is killed).
        self.alive = alive
        self.names = [f"{queue.name}:{shard}" for queue in queues for shard in queue.shards]
        self.longest = [0.0] * len(self.names)
        self._since: list[float | None] = [None] * len(self.names)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def served(self) -> list[bool]:
        """Per shard, whether a live process holds its lease now."""
        return [
            token is not None and int(parse_owner(token).split(":")[-2]) in self.alive
            for queue in self.queues
            for token in tokens(queue)
        ]

    def start(self) -> None:
        """Start polling."""
        self._thread.start()

    def stop(self) -> list[float]:
        """Stop polling; the longest gap per shard, seconds (one still open counts)."""
        self._stop.set()
        self._thread.join()
        now = time.monotonic()
        for index, since in enumerate(self._since):
            if since is not None:
                self.longest[index] = max(self.longest[index], now - since)
        return self.longest

    def _poll(self) -> None:
        while not self._stop.wait(POLL):
            now = time.monotonic()
            for index, served in enumerate(self.served()):
                since = self._since[index]
                if not served and since is None:
                    self._since[index] = now
                elif served and since is not None:
                    self.longest[index] = max(self.longest[index], now - since)
                    self._since[index] = None


def has_members(client: redis.Redis, count: int) -> bool:
    """Whether at least ``count`` processes are live members."""
    return len(live_processes(client)[1]) >= count


def wait_for(check: Callable[[], object], timeout: float, what: str) -> None:
    """Poll ``check`` until it is truthy; exit with a message after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            sys.exit(f"gave up waiting for {what} after {timeout:.0f} s")
        time.sleep(0.05)


class Fleet:
    """The worker processes of the run, their logs in ``directory``."""

    def __init__(self, env: dict[str, str], directory: Path) -> None:
        self.env = env
        self.directory = directory
        self.processes: list[subprocess.Popen[bytes]] = []

    def start(self) -> subprocess.Popen[bytes]:
        """Start one more `lowkiq worker -r rolling_kill_app` process."""
        log = self.directory / f"worker-{len(self.processes)}.log"
        with log.open("wb") as output:
            process = subprocess.Popen(
                [sys.executable, "-m", "lowkiq", "worker", "-r", "rolling_kill_app"],
                env=self.env, cwd=BENCH, stdout=output, stderr=subprocess.STDOUT,
            )  # fmt: skip
        self.processes.append(process)
        return process

    def close(self) -> None:
        """Kill every process still running."""
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGKILL)
                process.wait(10)


class Feeder:
    """Enqueues a few new jobs of every queue every :data:`FEED` seconds, on a thread."""

    def __init__(self, workers: list[type[lowkiq.Worker]], per_round: int) -> None:
        self.workers = workers
        self.per_round = per_round
        #: ``<queue>:<id>`` of every job enqueued.
        self.sent: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._feed, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop feeding."""
        self._stop.set()
        self._thread.join()

    def _feed(self) -> None:
        number = 0
        while not self._stop.wait(FEED):
            for worker in self.workers:
                ids = [f"job{number + n}" for n in range(self.per_round)]
                worker.perform_async([{"id": i, "payload": {}} for i in ids])
                self.sent += [f"{worker.queue_name}:{i}" for i in ids]
            number += self.per_round


def run(args: argparse.Namespace, directory: Path) -> None:
    """Start Redis and the fleet, kill it one by one, print the figures."""
    server = start_server(directory / "redis")
    env = {
        **os.environ,
        "REDIS_URL": server.url,
        "BENCH_SHARDS": str(args.shards),
        "BENCH_QUEUES": str(args.queues),
        "PYTHONPATH": str(BENCH.parent),
    }
    if args.lease_ttl:
        env["BENCH_LEASE_TTL"] = str(args.lease_ttl)
    os.environ.update({key: env[key] for key in env if key.startswith(("REDIS", "BENCH"))})
    sys.path.insert(0, str(BENCH))
    import rolling_kill_app  # the settings and workers the processes run (after the env)

    client = redis.Redis.from_url(server.url)
    lowkiq.settings.redis = lambda: redis.Redis.from_url(server.url)
    fleet = Fleet(env, directory)
    try:
        measure(args, rolling_kill_app, client, fleet)
    finally:
        fleet.close()
        server.stop()


def measure(args: argparse.Namespace, app: ModuleType, client: redis.Redis, fleet: Fleet) -> None:
    """The run itself: the fleet up, the kills, the figures (``app``: the workers' app)."""
    settings, workers = lowkiq.settings, app.WORKERS
    print(machine())
    print(
        f"{args.processes} processes, {args.queues} queue(s) of {args.shards} shards, "
        f"one SIGKILL (and a replacement) every {args.every:g} s; lease_ttl "
        f"{settings.lease_ttl:g} s, heartbeat_interval {settings.heartbeat_interval:g} s"
    )
    originals = []
    for _ in range(args.processes):
        originals.append(fleet.start())
        wait_for(partial(has_members, client, len(originals)), 30, "a process to join")
    queues = [worker.queue() for worker in workers]
    for queue in queues:
        queue.refresh_layout()
    alive = {process.pid for process in originals}
    unserved = Unserved(queues, alive)
    wait_for(lambda: all(unserved.served()), settings.lease_ttl * 3, "every shard served")
    unserved.start()
    feeder = Feeder(workers, args.shards)
    started = time.monotonic()
    for number, victim in enumerate(originals):
        time.sleep(max(0.0, started + number * args.every - time.monotonic()))
        alive.discard(victim.pid)
        victim.send_signal(signal.SIGKILL)
        alive.add(fleet.start().pid)
    wait_for(lambda: all(unserved.served()), settings.lease_ttl * 4, "every shard served again")
    feeder.stop()
    longest = unserved.stop()
    target = settings.lease_ttl + 5
    for name, gap in zip(unserved.names, longest, strict=True):
        print(f"  {name:<14} longest unserved {gap:5.1f} s{'  OVER' if gap > target else ''}")
    print(
        f"longest unserved: {max(longest):.1f} s (target {target:g} s); "
        f"{sum(gap > target for gap in longest)} of {len(longest)} shards over"
    )

    def drained() -> bool:
        return all(w.metrics()["length"] == 0 and w.metrics()["busy"] == 0 for w in workers)

    wait_for(drained, DRAIN_LIMIT, "the queue to drain")
    done = {item.decode() for item in client.smembers(app.DONE)}
    lost = [job for job in feeder.sent if job not in done]
    print(f"jobs: {len(feeder.sent)} enqueued, {len(lost)} lost")


def main() -> None:
    """Parse the arguments and run."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=6)
    parser.add_argument("--every", type=float, default=5.0, help="seconds between two kills")
    parser.add_argument("--shards", type=int, default=5, help="shards per queue")
    parser.add_argument("--queues", type=int, default=4)
    parser.add_argument("--lease-ttl", type=float, default=0.0, help="default: the setting's")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="lowkiq-rolling-") as directory:
        run(args, Path(directory))


if __name__ == "__main__":
    main()
