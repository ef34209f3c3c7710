"""Redis cost per job of the pop and ack path: N blank jobs drained through the storage
layer as a processing thread drains them (each round one write of every shard's pop,
each pop acking its shard's previous batch), then, from ``INFO commandstats`` (reset
before the drain) and ``INFO cpu``: scripts per job, the commands the scripts ran per
job by name, µs per job of the scripts (EVALSHA, their commands included) and of those
commands alone, and the Redis process's CPU µs per job.

Runs against a private Redis (lowkiq.clients.embedded.start_server), never REDIS_URL.
``--groups N`` spreads the jobs over N groups (job i in group ``g{i % N}``), so the pops
take them in turn across groups; 0 (the default): no group.

Usage: python bench/redis_cost.py [--jobs 20000] [--shards 5] [--batch 1 10]
       [--groups 0] [--binary /path/to/redis-server]
"""

from __future__ import annotations

import argparse
import tempfile
from dataclasses import dataclass
from typing import Any

import redis
from _machine import machine, redis_cpu

from lowkiq.clients.embedded import start_server
from lowkiq.clients.thread import ThreadClient
from lowkiq.ownership import leases
from lowkiq.storage.queue import Queue
from lowkiq.storage.scripts import source

#: Commands of the benchmark itself, not of the drain.
OWN_COMMANDS = {"info", "config", "client", "hello", "ping", "script"}


@dataclass
class Cost:
    """What one drain cost Redis, per job."""

    jobs: int
    scripts: float
    commands: dict[str, float]
    script_us: float
    command_us: float
    cpu_us: float


def fill(
    client: redis.Redis, jobs: int, shards: int, batch: int, groups: int
) -> tuple[Queue, dict[int, str]]:
    """Empty the server, enqueue ``jobs`` blank jobs into a ``shards``-shard queue (over
    ``groups`` groups, 0: none) and take every shard's lease; returns the queue on a
    processing thread's client, and the lease tokens."""
    client.flushall()
    queue_name = f"RedisCost{shards}x{batch}"
    queue = Queue(client, queue_name, shards)
    for start in range(0, jobs, 1000):
        queue.push(
            (str(i), b"", 0.0, 0.0, f"g{i % groups}" if groups else None)
            for i in range(start, start + 1000)
        )
    tokens = {}
    for shard in range(shards):
        lease, _, _ = leases.acquire(queue, shard, "bench", 3600.0)
        assert lease is not None
        tokens[shard] = lease.token
    thread_queue = Queue(ThreadClient(client), queue_name, shards)
    assert thread_queue.pipelines_pops
    return thread_queue, tokens


def drain(queue: Queue, tokens: dict[int, str], batch: int, batches: int = 1) -> int:
    """Pop every shard of ``queue`` until all are empty, each pop taking up to
    ``batches`` batches of ``batch`` jobs and acking its shard's previous one; returns
    how many jobs were popped."""
    client: Any = queue.client
    # Each shard's batch waiting for its ack (its number), acked by the shard's next pop.
    pending: dict[int, int] = {}
    active = list(tokens)
    done = 0
    while active:
        commands = [
            queue.pop_command(
                shard,
                tokens[shard],
                batch,
                shard if shard in pending else None,
                tokens[shard],
                None,
                batches,
                None,
                pending.get(shard, 0),
            )  # fmt: skip
            for shard in active
        ]
        still = []
        for shard, reply in zip(active, client.run_keyed(commands), strict=True):
            popped = queue.read_popped(reply)
            assert not popped.fenced and not popped.occupied and not popped.held, popped
            if popped.jobs:
                done += len(popped.jobs)
                pending[shard] = popped.batch
                still.append(shard)
            else:
                pending.pop(shard, None)
        active = still
    return done


def measure(client: redis.Redis, jobs: int, shards: int, batch: int, groups: int = 0) -> Cost:
    """Fill a queue with ``jobs`` jobs (over ``groups`` groups) and drain it at ``batch``
    jobs per pop; returns what the drain cost Redis."""
    queue, tokens = fill(client, jobs, shards, batch, groups)
    client.config_resetstat()
    cpu_before = redis_cpu(client)
    done = drain(queue, tokens, batch)
    cpu_used = redis_cpu(client) - cpu_before
    stats: dict[str, Any] = client.info("commandstats")
    queue.client.close()
    assert done == jobs, (done, jobs)
    commands: dict[str, float] = {}
    scripts = script_us = command_us = 0.0
    for key, stat in stats.items():
        name = key.removeprefix("cmdstat_")
        if name in OWN_COMMANDS:
            continue
        if name in ("evalsha", "eval", "fcall"):
            scripts += stat["calls"]
            script_us += stat["usec"]
            continue
        commands[name] = stat["calls"] / jobs
        command_us += stat["usec"]
    return Cost(
        jobs, scripts / jobs, commands, script_us / jobs, command_us / jobs, cpu_used / jobs * 1e6
    )


def main() -> None:
    """Print one block per batch size."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--shards", type=int, default=5)
    parser.add_argument("--batch", type=int, nargs="*", default=[1, 10])
    parser.add_argument("--groups", type=int, default=0, help="groups the jobs are in (0: none)")
    parser.add_argument("--binary", help="the redis-server to run (default: lowkiq's)")
    args = parser.parse_args()
    server = start_server(tempfile.mkdtemp(prefix="lowkiq-bench-"), binary=args.binary)
    client = redis.Redis.from_url(server.url)
    try:
        print(machine(), "| Redis", client.info("server")["redis_version"])
        print("script text sent, bytes:", {n: len(source(n)) for n in ("pop", "ack")})
        for batch in args.batch:
            cost = measure(client, args.jobs, args.shards, batch, args.groups)
            names = sorted(cost.commands.items(), key=lambda item: (-item[1], item[0]))
            print(
                f"batch {batch}: {cost.jobs} jobs, {args.shards} shards, {args.groups} groups | "
                f"scripts/job "
                f"{cost.scripts:.2f} | commands/job {sum(cost.commands.values()):.2f} | "
                f"script µs/job {cost.script_us:.2f} (commands {cost.command_us:.2f}) | "
                f"Redis CPU µs/job {cost.cpu_us:.2f}"
            )
            print("  " + ", ".join(f"{name} {per_job:.2f}" for name, per_job in names))
    finally:
        client.close()
        server.stop()


if __name__ == "__main__":
    main()
