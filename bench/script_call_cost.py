"""Redis instructions per script call, by ``EVALSHA`` against ``FCALL`` (lowkiq's
Functions library, Redis 7 and later), counted by callgrind on one Redis server.

Per mode, on a flushed server: a pop on an empty shard (its lease held: the fixed part
of every call), a pop then an ack of one job (batch 1, from a queue of ``--jobs``
jobs), an enqueue of one job, each ``--calls`` times; and 20 enqueues of one job onto a
shard of 60 enqueued so, which no process waits on (its wake-up pending); after a
warm-up (the script or library loaded outside the window), printed per call.  The modes
run on the same server and the same tree: only how the calls reach Redis differs.

Needs ``valgrind`` on PATH and a Redis 7 ``redis-server`` (``--redis-server``, default
Debian's ``/usr/bin/redis-server``).
Usage: python bench/script_call_cost.py [--calls 40] [--jobs 2000] [--redis-server PATH]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import redis
from _machine import machine
from redis_instructions import CountedRedis

from lowkiq.clients.thread import ThreadClient
from lowkiq.ownership import leases
from lowkiq.storage import scripts
from lowkiq.storage.queue import Queue

#: Jobs of the shard the last case pushes onto, and its pushes counted.
PILED, PILED_PUSHES = 60, 20

#: Each mode: whether scripts run as functions.
MODES = {"EVALSHA": False, "FCALL": True}


def measure(server: CountedRedis, mode: str, calls: int, jobs: int) -> dict[str, float]:
    """Instructions per call of each case in one of :data:`MODES`."""
    scripts.FUNCTIONS = MODES[mode]
    server.client.flushall()
    server.client.function_flush()
    server.client.script_flush()
    # A new client per mode: its scripts are made for it (with a library or without).
    pool = server.client.connection_pool
    client = redis.Redis(
        connection_pool=redis.ConnectionPool(
            connection_class=pool.connection_class, **pool.connection_kwargs
        )
    )
    queue = Queue(client, "Cost", 2)
    full, empty = 0, 1
    ids = [str(i) for i in range(jobs * 4) if queue.shard_of(str(i)) == full][:jobs]
    queue.push([(job_id, b"", 0.0, 0.0, None) for job_id in ids])
    tokens = {}
    for shard in (0, 1):
        lease, _, _ = leases.acquire(queue, shard, "bench", 3600.0)
        assert lease is not None
        tokens[shard] = lease.token
    thread = Queue(ThreadClient(client), "Cost", 2)

    def empty_pops() -> None:
        for _ in range(calls):
            assert not thread.pop(empty, tokens[empty], 1).jobs

    def pop_acks() -> None:
        for _ in range(calls):
            popped = thread.pop(full, tokens[full], 1)
            assert popped.jobs
            thread.ack(full, tokens[full], popped.batch)

    # New ids, all of the full shard (the empty one stays empty).
    fresh = iter(i for i in (f"new{n}" for n in range(10**9)) if queue.shard_of(i) == full)

    def pushes() -> None:
        for _ in range(calls):
            queue.push([(next(fresh), b"", 0.0, 0.0, None)])

    # A shard of PILED jobs enqueued one a call, which no process waits on (its wake-up
    # pending): the pushes onto it (below 128 jobs a sorted set may stay packed).
    piled = Queue(client, "Piled", 1)
    for n in range(PILED):
        piled.push([(f"old{n}", b"", None, None, None)])
    onto_piled = iter(f"new{n}" for n in range(10**9))

    def piled_pushes() -> None:
        for _ in range(PILED_PUSHES):
            piled.push([(next(onto_piled), b"", None, None, None)])

    empty_pops()  # warm-up: every script (the library) loaded
    pop_acks()
    pushes()
    return {
        "pop, empty shard": server.count(empty_pops) / calls,
        "pop + ack, batch 1": server.count(pop_acks) / calls,
        "enqueue of 1 job": server.count(pushes) / calls,
        f"enqueue onto {PILED} piled": server.count(piled_pushes) / PILED_PUSHES,
    }


def main() -> None:
    """Count both modes and print them side by side."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=40)
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--redis-server", default="/usr/bin/redis-server")
    options = parser.parse_args()
    print(machine())
    with tempfile.TemporaryDirectory(prefix="lowkiq-bench-") as directory:
        server = CountedRedis(Path(directory), options.redis_server)
        try:
            version = server.client.info("server")["redis_version"]
            by_mode = {mode: measure(server, mode, options.calls, options.jobs) for mode in MODES}
        finally:
            server.stop()
    print(f"Redis {version} under callgrind; instructions per call, {options.calls} calls each")
    print(f"{'case':<22}" + "".join(f"{mode:>16}" for mode in MODES))
    for case in by_mode["EVALSHA"]:
        print(f"{case:<22}" + "".join(f"{by_mode[mode][case]:>16,.0f}" for mode in MODES))


if __name__ == "__main__":
    main()
