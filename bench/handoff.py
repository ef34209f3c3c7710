"""Hand-off and takeover: how long a queue's shards go unowned when a process leaves.

Two `lowkiq worker` processes share a 20-shard queue (the blank app of
bench/scale.py) on a private Redis.  One of them is stopped with TERM, or
killed with SIGKILL; the survivor's time to hold every shard's lease is
measured from the moment the other process exited (lease holders polled every
millisecond).  Repeated a few times each.
Usage: python bench/handoff.py [--rounds 3] [--lease-ttl 10]
"""

from __future__ import annotations

import argparse
import signal
import statistics
import tempfile
import time
from collections.abc import Callable

import redis
from _blank import blank_env, start_blank_worker
from _machine import machine

from lowkiq.clients.embedded import start_server
from lowkiq.ownership import leases
from lowkiq.storage.queue import Queue

SHARDS = 20


def wait_for(check: Callable[[], object], timeout: float = 60.0) -> float:
    """Poll ``check()`` every millisecond until truthy; returns the monotonic time it was."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return time.monotonic()
        time.sleep(0.001)
    raise SystemExit("timed out")


def one_round(url: str, how: signal.Signals, ttl: float) -> float:
    env = blank_env(url, SHARDS, BENCH_LEASE_TTL=str(ttl))
    client = redis.Redis.from_url(url)
    client.flushall()
    queue = Queue(client, "Blank", SHARDS)
    leaving, staying = start_blank_worker(env), start_blank_worker(env)

    def owners() -> set[str]:
        return {leases.parse_owner(t) for t in leases.tokens(queue) if t}

    def pid_of(process_id: str) -> int:
        return int(process_id.split(":")[1])

    wait_for(lambda: len(owners()) == 2 and all(leases.tokens(queue)))
    leaving.send_signal(how)
    leaving.wait(60)
    exited = time.monotonic()
    held = wait_for(
        lambda: all(leases.tokens(queue)) and {pid_of(owner) for owner in owners()} == {staying.pid}
    )
    staying.terminate()
    staying.wait(60)
    return held - exited


def main() -> None:
    """Print the hand-off (TERM) and takeover (SIGKILL) times."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--lease-ttl", type=float, default=10.0)
    args = parser.parse_args()
    server = start_server(tempfile.mkdtemp(prefix="lowkiq-bench-"))
    try:
        print(machine())
        print(f"2 processes, {SHARDS} shards, lease TTL {args.lease_ttl:g} s, heartbeat 1 s")
        for how, label in ((signal.SIGTERM, "TERM hand-off"), (signal.SIGKILL, "kill -9 takeover")):
            times = [one_round(server.url, how, args.lease_ttl) for _ in range(args.rounds)]
            print(
                f"{label:>17}: median {statistics.median(times):.3f} s, "
                f"max {max(times):.3f} s (from the old process's exit to every shard owned)"
            )
    finally:
        server.stop()


if __name__ == "__main__":
    main()
