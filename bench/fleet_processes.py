"""A fleet of real worker processes, idle: what it costs, and what a leave, a join and a
kill move.

P `lowkiq worker` processes (default 40, 1 thread each, default lease TTL and
heartbeat) serve the blank app's Q queues of S shards (default 2 × 200) on a
private Redis, with nothing to do.  Once all have joined and every shard is
leased by its assigned owner, it prints:

- steady state over a window: the CPU of each worker process (% of a core, from
  /proc/<pid>/stat) and of Redis (``INFO cpu``), and the Redis commands that
  cost the most (``INFO commandstats``);
- one process stopped with TERM, one process joining, one process killed with
  SIGKILL (not restarted): the shards whose lease changed owner, and the time
  until every shard is leased again by its assigned owner (the ``owners`` hash
  of the published assignment and every lease key, polled every few ms).

The machine's load average is printed too: on a shared host the CPU figures
include time the processes waited for a core.
Usage: python bench/fleet_processes.py [--processes 40] [--queues 2] [--shards 200] [--window 20]
                                      [--log-dir DIR]  (each worker's INFO logs in DIR/worker-N.log)
"""

from __future__ import annotations

import argparse
import itertools
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import redis
from _blank import blank_env, start_blank_worker
from _machine import machine, redis_cpu

from lowkiq.clients.embedded import start_server
from lowkiq.ownership.assignment import ShardKey
from lowkiq.storage.keys import OwnershipKeys, QueueKeys

#: Seconds between two looks at the fleet while something changes.
POLL = 0.005


@dataclass(frozen=True)
class State:
    """The fleet as Redis shows it at one moment."""

    #: The owner (process id) of each shard's lease; ``None``: not leased.
    leased: dict[ShardKey, str | None]
    #: The owner of each shard in the published assignment (the owners hash).
    assigned: dict[ShardKey, str]
    #: The live processes (the membership's sorted set).
    members: frozenset[str]

    def settled(self, shards: int) -> bool:
        """Every shard assigned to a live process, and leased by that process."""
        return (
            len(self.assigned) == shards
            and set(self.assigned.values()) <= self.members
            and all(self.leased.get(key) == owner for key, owner in self.assigned.items())
        )

    def serves(self, process_id: str) -> bool:
        """Whether ``process_id`` is assigned or leases any shard."""
        return process_id in self.assigned.values() or process_id in self.leased.values()


class Fleet:
    """Reads the fleet's state from Redis, in one round trip."""

    def __init__(self, client: redis.Redis, queues: Sequence[str], shards: int) -> None:
        self.client = client
        self.shards = [(queue, shard) for queue in queues for shard in range(shards)]
        self.lease_keys = [QueueKeys(queue).lease(shard) for queue, shard in self.shards]
        self.keys = OwnershipKeys()

    def read(self) -> State:
        """The leases, the published owners and the members now."""
        pipe = self.client.pipeline(transaction=False)
        for key in self.lease_keys:
            pipe.get(key)
        pipe.hgetall(self.keys.owners_hash)
        pipe.zrange(self.keys.processes_zset, 0, -1)
        *tokens, owners, members = pipe.execute()
        leased = {
            shard: token.decode().split(" ", 1)[1] if token else None
            for shard, token in zip(self.shards, tokens, strict=True)
        }
        assigned: dict[ShardKey, str] = {}
        for name, owner in owners.items():
            queue, shard = name.decode().rsplit(":", 1)
            assigned[(queue, int(shard))] = owner.decode()
        return State(leased, assigned, frozenset(member.decode() for member in members))

    def wait(
        self, done: Callable[[State], bool], timeout: float, timeline: Timeline | None = None
    ) -> tuple[float, State]:
        """Poll until ``done(state)``; returns the monotonic time it was, and the state
        (each state seen is shown to ``timeline``)."""
        deadline = time.monotonic() + timeout
        while True:
            state = self.read()
            now = time.monotonic()
            if timeline is not None:
                timeline.see(state, now)
            if done(state):
                return now, state
            if now > deadline:
                raise SystemExit(f"timed out after {timeout:g} s")
            time.sleep(POLL)


@dataclass
class Timeline:
    """When a change showed in Redis, from ``started``: the new assignment, and each
    shard's lease leaving its owner of ``before``."""

    before: State
    started: float
    published: float | None = None
    released: dict[ShardKey, float] = field(default_factory=dict)

    def see(self, state: State, now: float) -> None:
        """Note what changed in ``state``, seen at ``now``."""
        if self.published is None and state.assigned != self.before.assigned:
            self.published = now - self.started
        for key, owner in self.before.leased.items():
            if key not in self.released and state.leased.get(key) != owner:
                self.released[key] = now - self.started

    def describe(self, owners: set[str]) -> str:
        """The publication and the releases of the shards ``owners`` held before."""
        times = sorted(
            at for key, at in self.released.items() if self.before.leased.get(key) in owners
        )
        published = "never" if self.published is None else f"{self.published:.3f} s"
        if not times:
            return f"assignment published {published}; none released"
        return (
            f"assignment published {published}; {len(times)} shards left their owner: "
            f"first {times[0]:.3f} s, median {times[len(times) // 2]:.3f} s, "
            f"last {times[-1]:.3f} s"
        )


def cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system) process ``pid`` has used so far."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def process_id_of(state: State, pid: int) -> str | None:
    """The membership id of the process with ``pid`` (``host:pid:random``), if live."""
    for member in state.members:
        if member.split(":")[-2] == str(pid):
            return member
    return None


def moved(before: State, after: State) -> tuple[int, int]:
    """Shards whose lease owner changed, and whose assigned owner changed."""
    leases = sum(1 for key, owner in before.leased.items() if after.leased.get(key) != owner)
    assigned = sum(1 for key, owner in before.assigned.items() if after.assigned.get(key) != owner)
    return leases, assigned


def load() -> str:
    """The load averages over 1, 5 and 15 minutes."""
    return "load average {:.2f} {:.2f} {:.2f}".format(*os.getloadavg())


def command_costs(info: dict[str, dict[str, float]]) -> dict[str, tuple[int, int]]:
    """``command -> (calls, usec)`` from ``INFO commandstats``."""
    return {
        name.removeprefix("cmdstat_"): (int(stats["calls"]), int(stats["usec"]))
        for name, stats in info.items()
    }


def steady_state(
    client: redis.Redis, workers: Sequence[subprocess.Popen[bytes]], window: float
) -> None:
    """Print the CPU of every worker process and of Redis over ``window`` seconds."""
    print(f"steady state over {window:g} s ({load()} before)")
    cpu_before = {worker.pid: cpu_seconds(worker.pid) for worker in workers}
    redis_before, stats_before = redis_cpu(client), command_costs(client.info("commandstats"))
    started = time.monotonic()
    time.sleep(window)
    elapsed = time.monotonic() - started
    shares = sorted(
        (cpu_seconds(worker.pid) - cpu_before[worker.pid]) / elapsed * 100 for worker in workers
    )
    redis_share = (redis_cpu(client) - redis_before) / elapsed * 100
    stats_after = command_costs(client.info("commandstats"))
    print(
        f"  worker process CPU (% of a core): mean {sum(shares) / len(shares):.2f}, "
        f"median {shares[len(shares) // 2]:.2f}, max {shares[-1]:.2f}; "
        f"fleet {sum(shares):.1f}"
    )
    print(f"  Redis CPU: {redis_share:.2f} % of a core ({load()} after)")
    costs = []
    for name, (calls, usec) in stats_after.items():
        calls_before, usec_before = stats_before.get(name, (0, 0))
        if calls > calls_before:
            costs.append((usec - usec_before, calls - calls_before, name))
    total = sum(usec for usec, _, _ in costs) or 1
    print("  Redis commands by time inside Redis (calls/s, µs/s, share):")
    for usec, calls, name in sorted(costs, reverse=True)[:8]:
        print(
            f"    {name:<14} {calls / elapsed:>8.1f} {usec / elapsed:>9.1f} "
            f"{usec / total * 100:>5.1f} %"
        )


def report_change(
    label: str, before: State, after: State, started: float, done: float, ideal: float
) -> None:
    """Print one change's moves and time."""
    lease_moves, assigned_moves = moved(before, after)
    print(
        f"  {label}: {lease_moves} shards changed lease owner, {assigned_moves} changed "
        f"assigned owner (ideal {ideal:g}); every shard leased by its assigned owner "
        f"{done - started:.3f} s after it"
    )


@dataclass
class Run:
    """One run's fleet: its Redis view, its processes and how to start one more."""

    fleet: Fleet
    total: int
    workers: list[subprocess.Popen[bytes]]
    start: Callable[[], subprocess.Popen[bytes]]


def leave(run: Run, before: State) -> State:
    """Stop one process with TERM; print what moved and when."""
    leaving = run.workers.pop(0)
    leaving_id = str(process_id_of(before, leaving.pid))
    started = time.monotonic()
    leaving.send_signal(signal.SIGTERM)
    timeline = Timeline(before, started)
    done, after = run.fleet.wait(
        lambda state: state.settled(run.total) and not state.serves(leaving_id), 60, timeline
    )
    leaving.wait(60)
    exited = time.monotonic()
    ideal = run.total / len(before.members)  # the shards the leaving process had
    report_change("one process leaves on TERM", before, after, started, done, ideal)
    print(f"    (it exited {exited - started:.3f} s after the TERM)")
    print(f"    its own shards: {timeline.describe({leaving_id})}")
    others = set(before.members) - {leaving_id}
    print(f"    the other processes' shards: {timeline.describe(others)}")
    return after


def join(run: Run, before: State) -> State:
    """Start one more process; print what moved and when."""
    started = time.monotonic()
    joining = run.start()
    run.workers.append(joining)
    joined, _ = run.fleet.wait(lambda state: process_id_of(state, joining.pid) is not None, 60)
    joining_id = str(process_id_of(run.fleet.read(), joining.pid))
    timeline = Timeline(before, joined)
    done, after = run.fleet.wait(
        lambda state: state.settled(run.total) and joining_id in state.assigned.values(),
        60,
        timeline,
    )
    ideal = run.total / len(after.members)  # the shards the new process gets
    report_change("one process joins", before, after, joined, done, ideal)
    print(f"    (its first beat came {joined - started:.3f} s after it was started)")
    print(f"    the other processes' shards: {timeline.describe(set(before.members))}")
    return after


def kill(run: Run, before: State) -> State:
    """Kill one process with SIGKILL (nobody restarts it); print what moved and when."""
    killed = run.workers.pop(0)
    killed_id = str(process_id_of(before, killed.pid))
    started = time.monotonic()
    killed.kill()
    killed.wait(60)
    timeline = Timeline(before, started)
    done, after = run.fleet.wait(
        lambda state: state.settled(run.total) and not state.serves(killed_id), 120, timeline
    )
    ideal = run.total / len(before.members)
    report_change("one process killed (SIGKILL)", before, after, started, done, ideal)
    print(f"    its own shards: {timeline.describe({killed_id})}")
    return after


def main() -> None:
    """Start the fleet, print its steady state, then a leave, a join and a kill."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--processes", type=int, default=40)
    parser.add_argument("--queues", type=int, default=2)
    parser.add_argument("--shards", type=int, default=200, help="shards per queue")
    parser.add_argument("--window", type=float, default=20.0, help="steady-state seconds")
    parser.add_argument("--settle", type=float, default=5.0, help="seconds before the window")
    parser.add_argument(
        "--log-dir", type=Path, help="write each worker's INFO logs to DIR/worker-N.log"
    )
    args = parser.parse_args()
    total = args.queues * args.shards
    server = start_server(tempfile.mkdtemp(prefix="lowkiq-bench-"))
    workers: list[subprocess.Popen[bytes]] = []
    try:
        client = redis.Redis.from_url(server.url)
        env = blank_env(server.url, args.shards, BENCH_QUEUES=str(args.queues))
        queues = ["Blank", *(f"Blank{number}" for number in range(2, args.queues + 1))]
        fleet = Fleet(client, queues, args.shards)
        print(machine())
        print(
            f"{args.processes} worker processes, 1 thread each, {args.queues} queues × "
            f"{args.shards} shards, idle, default lease TTL and heartbeat; {load()}"
        )
        redis_before = redis_cpu(client)
        time.sleep(2)
        idle = (redis_cpu(client) - redis_before) / 2 * 100
        print(f"Redis with no worker: {idle:.2f} % of a core")
        numbers = itertools.count()

        def start() -> subprocess.Popen[bytes]:
            log = None if args.log_dir is None else args.log_dir / f"worker-{next(numbers)}.log"
            return start_blank_worker(env, "--threads", "1", log=log)

        if args.log_dir is not None:
            args.log_dir.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        workers += [start() for _ in range(args.processes)]
        done, _ = fleet.wait(
            lambda state: len(state.members) == args.processes and state.settled(total), 300
        )
        print(f"all joined and every shard leased: {done - started:.1f} s after the start")
        time.sleep(args.settle)
        steady_state(client, workers, args.window)

        print(f"changes ({load()})")
        run = Run(fleet, total, workers, start)
        kill(run, join(run, leave(run, fleet.read())))
    finally:
        for worker in workers:
            worker.send_signal(signal.SIGTERM)
        for worker in workers:
            try:
                worker.wait(60)
            except subprocess.TimeoutExpired:
                worker.kill()
        server.stop()


if __name__ == "__main__":
    main()
