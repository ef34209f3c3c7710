"""What workflows cost: Redis instructions per job, and the time to enqueue members.

1. Redis instructions per job (valgrind callgrind, as bench/redis_instructions.py counts
   them: a private Redis at ``hz 1``, counts zeroed before a phase and dumped after, the
   same figure on every run).  A worker at its defaults (5 shards, ``batch_size`` 1)
   gets ``--workflows`` x ``--members`` jobs, enqueued with ``perform_async`` in
   calls of ``--members`` jobs:

   * ``plain``: no workflow;
   * ``workflows``: each call inside its own ``with lowkiq.Workflow(...)`` (an
     ``on_complete`` worker given, so that every workflow's callback is enqueued), so
     every job is a member.

   The drain is a processing thread's, run in this process so that it is the same on
   every run: each round one write of every shard's pop (up to the runtime's
   ``MAX_BATCHES`` batches of one job, acking the shard's previous batch, which says
   when it held members), then, as the process's relay thread does, the outboxes of the
   shards whose acks carried members relayed together (each workflow told once, the
   complete ones' callbacks enqueued).  The callbacks are not performed (they are jobs
   of their own).
   Printed: instructions per job of the enqueue, of the drain, both, and the workflows
   scenario over the plain one (target: at most +25 %); the Redis commands per job of
   the drain (``INFO commandstats``: script calls, and the commands they ran).  With
   ``--split``, a second drain of the workflows scenario counts its pops and acks alone
   (the members noted in the outboxes), then every outbox relayed at once.

   ``--baseline DIR``: the plain scenario also runs on the lowkiq tree in ``DIR`` (e.g.
   ``git archive`` of the commit before workflows), in a process of its own with
   ``DIR`` first on its path, and the plain figures are compared (target: the drain
   within 1 %).

2. Wall time to enqueue ``--enqueue-jobs`` jobs (10,000) in calls of ``--call`` (1,000)
   into a private Redis (not under callgrind): inside one ``with lowkiq.Workflow``
   (its open, the calls, its close: the members registered), against the same jobs
   without; the median of ``--rounds`` rounds, the two alternating.  Target: at most 2x.

Needs ``valgrind`` and ``callgrind_control`` on PATH (apt-get install valgrind).
Usage: python bench/workflows_cost.py [--workflows 100] [--members 30] [--rounds 5]
       [--enqueue-jobs 10000] [--call 1000] [--baseline DIR] [--skip-instructions]
       [--skip-timing] [--split] [--redis-server PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import redis
from _machine import machine
from redis_instructions import CountedRedis

import lowkiq
from lowkiq.clients.embedded import start_server
from lowkiq.clients.thread import ThreadClient
from lowkiq.ownership import leases
from lowkiq.runtime.shard_handler import MAX_BATCHES
from lowkiq.storage.queue import Queue

#: Commands of the bench itself, not of the drain.
OWN_COMMANDS = {"info", "config", "client", "hello", "ping", "script", "flushall"}
#: The instruction counts' targets: the plain drain against the baseline tree's, and a
#: job in a workflow against a job in none.
BASELINE_TOLERANCE = 0.01
WORKFLOW_TARGET = 0.25
#: The enqueue time's target: members in one workflow against plain jobs.
ENQUEUE_TARGET = 2.0


class Counted(lowkiq.Worker):
    """The counted worker, at the defaults (5 shards, batch_size 1)."""

    @classmethod
    def perform(cls, payloads_by_id: dict[str, list[Any]]) -> None:
        """Never run here: the bench drains through the storage layer."""


class Completed(lowkiq.Worker):
    """Every workflow's ``on_complete`` (its jobs are counted enqueued, not performed)."""

    @classmethod
    def perform(cls, payloads_by_id: dict[str, list[Any]]) -> None:
        """Never run here."""


#: Whether the jobs are blank (``--blank``), else each has a small payload.
BLANK = False


def job(job_id: str) -> dict[str, Any]:
    """A job of the bench: ``{"id"}`` (``--blank``), or with a small payload ``{"n": id}``."""
    return {"id": job_id} if BLANK else {"id": job_id, "payload": {"n": job_id}}


def use(client_factory: Any) -> None:
    """Point lowkiq's settings at a server (the shared client is made again)."""
    lowkiq.settings.redis = client_factory


def enqueue(scenario: str, workflows: int, members: int, tag: str = "") -> None:
    """Enqueue ``workflows`` x ``members`` jobs in calls of ``members`` jobs, each
    call inside a workflow of its own (``scenario`` ``workflows``) or not (``plain``)."""
    for n in range(workflows):
        jobs = [job(f"{tag}{n * members + i}") for i in range(members)]
        if scenario == "workflows":
            with lowkiq.Workflow(f"{tag}wf{n}", on_complete=Completed):
                Counted.perform_async(jobs)
        else:
            Counted.perform_async(jobs)


def drain(client: redis.Redis, relaying: bool = True) -> int:
    """Pop every shard of :class:`Counted` until all are empty, as a processing thread
    does (every shard's pop in one write, each taking up to ``MAX_BATCHES`` batches of
    one job and acking the shard's previous batch), relaying the outbox of each shard
    whose ack carried members (not when ``relaying`` is false: the outboxes fill);
    returns the jobs popped."""
    relay_many = None
    if hasattr(lowkiq, "Workflow") and relaying:
        from lowkiq.workflows.relay import relay_many
    shards = Counted.shards_count
    queue = Queue(client, Counted.queue_name, shards)
    tokens = {}
    for shard in range(shards):
        lease, _, _ = leases.acquire(queue, shard, "bench", 3600.0)
        assert lease is not None
        tokens[shard] = lease.token
    popper = Queue(ThreadClient(client), Counted.queue_name, shards)
    # Each shard's batch waiting for its ack, and whether it holds members.
    pending: dict[int, int] = {}
    members: dict[int, bool] = {}
    active = list(range(shards))
    done = 0
    while active:
        commands = []
        for shard in active:
            batch: int | str = pending.get(shard, 0)
            if members.get(shard):
                batch = f"{batch}w"
            acking = shard in pending
            commands.append(
                popper.pop_command(
                    shard,
                    tokens[shard],
                    Counted.batch_size,
                    shard if acking else None,
                    tokens[shard],
                    None,
                    MAX_BATCHES,
                    None,
                    batch,
                )  # fmt: skip
            )
        still = []
        told = []
        for shard, reply in zip(active, popper.client.run_keyed(commands), strict=True):
            popped = popper.read_popped(reply)
            assert not popped.fenced and not popped.occupied and not popped.held, popped
            if members.get(shard) and popped.acked >= 0:
                told.append((Counted.queue_name, shard))
            if popped.jobs:
                done += len(popped.jobs)
                pending[shard] = popped.batch
                members[shard] = any(getattr(job, "workflows", None) for job in popped.jobs)
                still.append(shard)
            else:
                pending.pop(shard, None)
                members[shard] = False
        active = still
        if told and relay_many is not None:
            relay_many(client, told)
    popper.client.close()
    return done


def count_scenario(
    server: CountedRedis, scenario: str, workflows: int, members: int, split: bool = False
) -> dict[str, Any]:
    """Instructions per job of one scenario's enqueue and drain."""
    client = server.client
    # A warm-up of the whole path (scripts loaded, clients made), then a clean server.
    enqueue(scenario, 2, members, tag="warm-")
    drain(client)
    client.flushall()
    jobs = workflows * members
    pushed = server.count(lambda: enqueue(scenario, workflows, members))
    done = 0

    def pop_all() -> None:
        nonlocal done
        done = drain(client)

    client.config_resetstat()
    popped = server.count(pop_all)
    assert done == jobs, (done, jobs)
    stats: dict[str, Any] = client.info("commandstats")
    calls = {
        key.removeprefix("cmdstat_"): stat["calls"] / jobs
        for key, stat in stats.items()
        if key.removeprefix("cmdstat_") not in OWN_COMMANDS
    }
    result = {"enqueue": pushed / jobs, "drain": popped / jobs,
              "total": (pushed + popped) / jobs, "drain_calls": calls}  # fmt: skip
    if scenario == "workflows":
        left = lowkiq.workflow(f"wf{workflows - 1}").status()
        assert left.complete and left.done == members, left
        assert Completed.metrics()["length"] == workflows, Completed.metrics()
        if split:
            result.update(split_drain(server, workflows, members))
    return result


def split_drain(server: CountedRedis, workflows: int, members: int) -> dict[str, float]:
    """The workflows scenario's drain in two parts (``--split``): the pops and acks
    alone (each member noted in its shard's outbox), then every outbox relayed at once
    (fewer calls than a relay after each round: a lower bound of that part)."""
    from lowkiq.workflows.relay import relay_many

    client = server.client
    client.flushall()
    enqueue("workflows", workflows, members)
    jobs = workflows * members
    pops = server.count(lambda: drain(client, relaying=False))

    shards = [(Counted.queue_name, shard) for shard in range(Counted.shards_count)]
    relays = server.count(lambda: relay_many(client, shards))
    left = lowkiq.workflow(f"wf{workflows - 1}").status()
    assert left.complete and left.done == members, left
    return {"pops": pops / jobs, "relays": relays / jobs}


def count(
    scenarios: list[str],
    workflows: int,
    members: int,
    split: bool = False,
    binary: str | None = None,
) -> dict[str, dict[str, Any]]:
    """Each scenario's instructions per job, on one server under callgrind (``binary``:
    the redis-server, by default the embedded one)."""
    directory = Path(tempfile.mkdtemp(prefix="lowkiq-bench-"))
    server = CountedRedis(directory, binary)
    try:
        socket = str(directory / "redis.sock")
        use(lambda: redis.Redis(unix_socket_path=socket))
        return {name: count_scenario(server, name, workflows, members, split) for name in scenarios}
    finally:
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)


def baseline(tree: Path, workflows: int, members: int, binary: str | None) -> dict[str, Any]:
    """The plain scenario's figures on the lowkiq tree in ``tree`` (a process of its own)."""
    bench = Path(__file__).resolve().parent
    env = {**os.environ, "PYTHONPATH": f"{tree}{os.pathsep}{bench}"}
    command = [sys.executable, str(Path(__file__).resolve()), "--json", "--skip-timing",
               "--workflows", str(workflows), "--members", str(members),
               *(["--blank"] if BLANK else []),
               *(["--redis-server", binary] if binary else [])]  # fmt: skip
    out = subprocess.run(command, env=env, check=True, capture_output=True, text=True).stdout
    result = json.loads(out.splitlines()[-1])
    if not result["lowkiq"].startswith(str(tree)):
        raise SystemExit(f"the baseline ran {result['lowkiq']}, not the tree in {tree}")
    return result["counts"]["plain"]


def enqueue_calls(jobs: int, call: int) -> None:
    """``jobs`` jobs in calls of ``call``."""
    for start in range(0, jobs, call):
        Counted.perform_async([job(str(i)) for i in range(start, min(jobs, start + call))])


def enqueue_times(jobs: int, call: int, rounds: int) -> tuple[list[float], list[float]]:
    """Seconds to enqueue ``jobs`` jobs in calls of ``call``, without and inside one
    workflow, ``rounds`` times each (alternating), on a private Redis."""
    directory = Path(tempfile.mkdtemp(prefix="lowkiq-bench-"))
    server = start_server(directory)
    use(lambda: redis.Redis.from_url(server.url))
    client = lowkiq.settings.client()
    plain: list[float] = []
    members: list[float] = []
    try:
        for n in range(rounds + 1):  # the first round warms up, not counted
            for inside in (False, True) if n % 2 else (True, False):
                client.flushall()
                started = time.perf_counter()
                if inside:
                    with lowkiq.Workflow(f"big{n}", on_complete=Completed):
                        enqueue_calls(jobs, call)
                else:
                    enqueue_calls(jobs, call)
                seconds = time.perf_counter() - started
                assert Counted.metrics()["length"] == jobs
                if n:
                    (members if inside else plain).append(seconds)
    finally:
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)
    return plain, members


def main() -> None:
    """Count, time, print."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--workflows", type=int, default=100)
    parser.add_argument("--members", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--enqueue-jobs", type=int, default=10_000)
    parser.add_argument("--call", type=int, default=1000)
    parser.add_argument("--baseline", type=Path, help="a lowkiq tree before workflows")
    parser.add_argument("--skip-instructions", action="store_true")
    parser.add_argument("--skip-timing", action="store_true")
    parser.add_argument("--blank", action="store_true", help="jobs without a payload")
    parser.add_argument(
        "--split",
        action="store_true",
        help="also count the workflows drain's pops and its relays apart (a second drain)",
    )
    parser.add_argument("--json", action="store_true", help="(internal) the counts as JSON")
    parser.add_argument(
        "--redis-server", help="the redis-server binary (default: the embedded one)"
    )
    args = parser.parse_args()
    global BLANK  # noqa: PLW0603 - one switch for the whole run
    BLANK = args.blank
    scenarios = ["plain", "workflows"] if hasattr(lowkiq, "Workflow") else ["plain"]
    if args.json:
        counts = count(["plain"], args.workflows, args.members, binary=args.redis_server)
        print(json.dumps({"lowkiq": lowkiq.__file__, "counts": counts}))
        return
    print(machine(), f"| lowkiq from {Path(lowkiq.__file__).parent}")
    if not args.skip_instructions:
        if shutil.which("valgrind") is None:
            raise SystemExit("valgrind is not on PATH")
        jobs = args.workflows * args.members
        print(f"Redis instructions per job: {jobs} jobs ({args.workflows} calls of "
              f"{args.members}), 5 shards, batch_size 1, pops of up to {MAX_BATCHES} "
              "batches")  # fmt: skip
        counts = count(scenarios, args.workflows, args.members, args.split, args.redis_server)
        rows = dict(counts)
        if args.baseline is not None:
            rows = {"plain, baseline": baseline(args.baseline.resolve(), args.workflows,
                                                args.members, args.redis_server),
                    **rows}  # fmt: skip
        print(f"{'scenario':<17} {'enqueue/job':>11} {'drain/job':>10} {'total/job':>10}")
        for name, row in rows.items():
            print(f"{name:<17} {row['enqueue']:>11,.0f} {row['drain']:>10,.0f} "
                  f"{row['total']:>10,.0f}")  # fmt: skip
        print("Redis commands per job in the drain (script calls, and the commands they ran):")
        for name, row in rows.items():
            calls = sorted(row["drain_calls"].items(), key=lambda item: -item[1])
            print(f"  {name}: " + ", ".join(f"{command} {n:.3f}" for command, n in calls))
        flows = rows.get("workflows", {})
        if "pops" in flows:
            plain_drain = rows["plain"]["drain"]
            print(f"workflows drain split: pops and acks {flows['pops']:,.0f} per job "
                  f"({flows['pops'] - plain_drain:+,.0f} against plain), every outbox relayed "
                  f"at once {flows['relays']:,.0f} per job")  # fmt: skip
        if "plain, baseline" in rows:
            base, now = rows["plain, baseline"], rows["plain"]
            for part in ("enqueue", "drain", "total"):
                ratio = now[part] / base[part] - 1
                print(f"plain {part} against the baseline: {ratio:+.2%} "
                      f"(target: within {BASELINE_TOLERANCE:.0%})")  # fmt: skip
        if "workflows" in rows:
            plain, flows = rows["plain"], rows["workflows"]
            for part in ("enqueue", "drain", "total"):
                ratio = flows[part] / plain[part] - 1
                print(
                    f"workflows {part} against plain: {ratio:+.1%}"
                    + (f" (target: at most +{WORKFLOW_TARGET:.0%})" if part == "total" else "")
                )
    if not args.skip_timing and "workflows" in scenarios:
        plain_s, members_s = enqueue_times(args.enqueue_jobs, args.call, args.rounds)
        a, b = statistics.median(plain_s), statistics.median(members_s)
        print(f"enqueue of {args.enqueue_jobs:,} jobs in calls of {args.call:,}, median of "
              f"{args.rounds}: plain {a * 1000:.0f} ms, members of one workflow "
              f"{b * 1000:.0f} ms: {b / a:.2f}x (target: at most {ENQUEUE_TARGET:g}x)")  # fmt: skip
        print(f"  plain rounds (ms): {', '.join(f'{s * 1000:.0f}' for s in plain_s)}; "
              f"workflow rounds: {', '.join(f'{s * 1000:.0f}' for s in members_s)}")  # fmt: skip


if __name__ == "__main__":
    main()
