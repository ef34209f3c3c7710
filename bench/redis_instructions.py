"""Redis instructions per job of enqueues and pops, counted by valgrind (callgrind): the
same figure on every run, where the host's CPU time per job moves by ±10 % from one
invocation to the next, so a change of a few percent shows.

A private Redis (lowkiq's binary) runs under ``valgrind --tool=callgrind``; each scenario
enqueues ``--jobs`` blank jobs into a ``--shards``-shard queue (1,000 a call, as
``bench/noisy_neighbour.py tenants`` does), then drains them as a processing thread does
(every shard popped in one write, each pop taking up to ``--batches`` batches of one job
and acking the shard's previous one).  ``callgrind_control`` zeroes the counts before
each phase and dumps them after; the server runs at ``hz 1``, so its timer's work
(slowed fifty-fold under callgrind) adds little to a phase's count.  Printed per
scenario: instructions per job of the enqueues, of the pops, and both, against the
scenario without groups.

Scenarios: ``none`` (no group); ``one`` (every job in group A); ``one+20`` (every job in
A, then 20 jobs of group B); ``two`` (job i in group ``g{i % 2}``: every shard holds two
groups throughout).

Needs ``valgrind`` on PATH; runs for about a minute per 20,000 jobs and scenario.
Usage: python bench/redis_instructions.py [--jobs 20000] [--shards 5] [--batches 32]
       [--scenarios none one one+20 two] [--redis-server PATH]
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import redis
from _machine import machine
from redis_cost import drain

from lowkiq.clients.embedded import redis_server_binary
from lowkiq.clients.thread import ThreadClient
from lowkiq.ownership import leases
from lowkiq.storage.queue import Queue

#: Each scenario's group of job ``i`` (``None``: none), and the jobs of group B after.
SCENARIOS: dict[str, tuple[Callable[[int], str | None], int]] = {
    "none": (lambda i: None, 0),
    "one": (lambda i: "A", 0),
    "one+20": (lambda i: "A", 20),
    "two": (lambda i: f"g{i % 2}", 0),
}


class CountedRedis:
    """A Redis server under callgrind, whose instructions are counted phase by phase."""

    def __init__(self, directory: Path, binary: str | None = None, port: int = 0) -> None:
        """Start it in ``directory``: on a unix socket there, or, with ``port``, on that
        TCP port of 127.0.0.1 (for worker processes to reach)."""
        self.directory = directory
        socket = directory / "redis.sock"
        listen = ["--port", str(port), "--bind", "127.0.0.1"] if port else [
            "--port", "0", "--unixsocket", str(socket)]  # fmt: skip
        self.process = subprocess.Popen(
            [
                "valgrind", "--tool=callgrind", f"--callgrind-out-file={directory}/cg.%p",
                binary or redis_server_binary(), *listen,
                "--save", "", "--appendonly", "no", "--hz", "1",
            ],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=directory,
        )  # fmt: skip
        self.client = (
            redis.Redis(host="127.0.0.1", port=port)
            if port
            else redis.Redis(unix_socket_path=str(socket))
        )
        deadline = time.monotonic() + 60
        while True:
            try:
                self.client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline or self.process.poll() is not None:
                    raise
                time.sleep(0.1)

    def count(self, phase: Callable[[], object]) -> int:
        """Instructions Redis ran during ``phase()``."""
        self._control("-z")
        phase()
        self._control("-d")
        time.sleep(0.3)
        [dump] = glob.glob(f"{self.directory}/cg.*.*")
        with open(dump) as lines:
            totals = [int(line.split()[1]) for line in lines if line.startswith("summary:")]
        os.remove(dump)
        return totals[-1]

    def _control(self, flag: str) -> None:
        subprocess.run(["callgrind_control", flag, str(self.process.pid)], check=True,
                       capture_output=True)  # fmt: skip

    def stop(self) -> None:
        """Stop the server."""
        self.client.close()
        self.process.terminate()
        self.process.wait()


def scenario(
    server: CountedRedis, name: str, jobs: int, shards: int, batches: int
) -> tuple[int, int]:
    """Instructions of the enqueues and of the pops of one scenario."""
    group_of, late = SCENARIOS[name]
    client = server.client
    queue = Queue(client, "Counted", shards)
    queue.push([("warm-up", b"", 0.0, 0.0, None)])  # the scripts loaded
    client.flushall()
    queue = Queue(client, "Counted", shards)

    def enqueue() -> None:
        for start in range(0, jobs, 1000):
            ids = range(start, min(jobs, start + 1000))
            queue.push((str(i), b"", 0.0, 0.0, group_of(i)) for i in ids)
        if late:
            queue.push((f"b{i}", b"", 0.0, 0.0, "B") for i in range(late))

    pushed = server.count(enqueue)
    tokens = {}
    for shard in range(shards):
        lease, _, _ = leases.acquire(queue, shard, "bench", 3600.0)
        assert lease is not None
        tokens[shard] = lease.token
    thread_queue = Queue(ThreadClient(client), "Counted", shards)
    done = 0

    def pop_all() -> None:
        nonlocal done
        done = drain(thread_queue, tokens, 1, batches)

    popped = server.count(pop_all)
    thread_queue.client.close()
    assert done == jobs + late, (done, jobs + late)
    return pushed, popped


def main() -> None:
    """Print a row per scenario."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--shards", type=int, default=5)
    parser.add_argument("--batches", type=int, default=32, help="batches of one job a pop")
    parser.add_argument("--scenarios", nargs="*", default=list(SCENARIOS), choices=SCENARIOS)
    parser.add_argument(
        "--redis-server", help="the redis-server binary (default: the embedded one)"
    )
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not on PATH")
    print(machine(), f"| {args.jobs} jobs, {args.shards} shards, pops of {args.batches} batches")
    print("scenario   enqueue/job    pop/job  total/job  against none")
    directory = Path(tempfile.mkdtemp(prefix="lowkiq-bench-"))
    server = CountedRedis(directory, args.redis_server)
    try:
        base = None
        for name in args.scenarios:
            pushed, popped = scenario(server, name, args.jobs, args.shards, args.batches)
            total = (pushed + popped) / args.jobs
            base = total if name == "none" else base
            against = f"{total / base - 1:+.1%}" if base and name != "none" else "-"
            print(
                f"{name:<8} {pushed / args.jobs:>11,.0f} {popped / args.jobs:>10,.0f} "
                f"{total:>10,.0f}  {against}"
            )
    finally:
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
