"""Noisy neighbours: does one busy producer hold up the jobs of the others?

``hot-id``: one producer sends ``--rate`` payloads a second (default 1,000) to one id
for ``--seconds`` (default 15), each payload costing ``--payload-ms`` of ``perform``
(default 1.5 ms: a batch of that id, 250 payloads, runs for 375 ms, so the id's
backlog grows).  Every 200 ms a job of another id of the same shard is enqueued;
printed: how long those jobs wait from ``perform_async`` to their ``perform``
(p50/p99/max; target: at most 0.5 s), and whether the hot id's payloads ran in
score order.

``tenants``: account A enqueues ``--jobs`` jobs of distinct ids (default 20,000,
1,000 a call), each costing ``--payload-ms`` of ``perform``; 50 ms after its last call
account B enqueues 20.  With ``--groups`` A's jobs carry ``"group": "A"`` and B's
``"group": "B"``; without, no group.  Each round (``--runs``, default 1) runs A alone,
then A + B, each on an emptied Redis with a fresh worker process, until every job is
performed.  Printed, a row per run: A's drain (its first ``perform_async`` to the end of
its last ``perform``; target with B: within +5 % of A alone), B's wait from
``perform_async`` to ``perform`` (p50/p99/max; target: p99 at most 0.1 s), and Redis
CPU µs per job performed (``INFO cpu`` around the run, enqueues included; target: with
``--groups`` within +10 % of an invocation without); under each run, the commands that
took most of Redis's time, µs per job (``INFO commandstats``: a script's time includes
the commands it ran, which are also listed on their own).

The worker runs in a process of its own (the default worker: 5 shards, 5 threads,
batch size 1); its ``perform`` notes when it starts (the host's monotonic clock,
shared by both processes) in Redis (``tenants``: one push every 20 ms, not one a job,
which would weigh on the Redis CPU per job).  Runs against a private Redis
(lowkiq.clients.embedded.start_server), never REDIS_URL.
Usage: python bench/noisy_neighbour.py [hot-id] [--seconds 15] [--rate 1000]
       python bench/noisy_neighbour.py tenants [--groups] [--runs 1] [--jobs 20000]
"""

from __future__ import annotations

import argparse
import collections
import tempfile
import threading
import time
from dataclasses import dataclass

import redis
from _machine import flush, machine, processed, redis_cpu
from latency import WorkerProcess, configure, percentiles

import lowkiq
from lowkiq.clients.embedded import start_server

#: Where ``perform`` notes ``"<id> <monotonic>"`` of the jobs other than the hot id.
STARTS = "bench:starts"
#: Where ``perform`` notes ``"<first score> <last score> <in order: 1|0>"`` of each batch
#: of the hot id.
HOT_BATCHES = "bench:hot"
#: The hot id.
HOT = "account-a"
#: What one payload of the hot id costs ``perform``, seconds (set by the producer in the
#: payload, so the worker process needs no configuration).
SECONDS_PER_PAYLOAD = "s"


class Neighbours(lowkiq.Worker):
    """Notes when perform starts; the hot id's payloads ``{"n": score, "s": seconds}``
    sleep their cost and have their order checked."""

    @classmethod
    def perform(cls, payloads_by_id: dict) -> None:
        monotonic = time.perf_counter()
        client = lowkiq.settings.client()
        for job_id, payloads in payloads_by_id.items():
            if job_id != HOT:
                client.rpush(STARTS, f"{job_id} {monotonic}")
                continue
            scores = [payload["n"] for payload in payloads]
            in_order = int(scores == sorted(scores))
            time.sleep(sum(payload[SECONDS_PER_PAYLOAD] for payload in payloads))
            client.rpush(HOT_BATCHES, f"{scores[0]} {scores[-1]} {in_order}")


def neighbour_ids(count: int, shards: int) -> list[str]:
    """``count`` ids in the hot id's shard."""
    queue = Neighbours.queue()
    shard = queue.shard_of(HOT)
    found: list[str] = []
    number = 0
    while len(found) < count:
        if queue.shard_of(f"b-{number}") == shard:
            found.append(f"b-{number}")
        number += 1
    return found


def hot_id(url: str, seconds: float, rate: int, payload_ms: float) -> None:
    """Run the hot-id experiment and print its figures."""
    shards, threads = 5, 5
    configure(url, threads, Neighbours, shards)
    client = redis.Redis.from_url(url)
    ids = neighbour_ids(int(seconds / 0.2) + 1, shards)
    worker = WorkerProcess(url, threads, Neighbours, shards)
    sent: dict[str, float] = {}
    stop = threading.Event()
    cost = payload_ms / 1000

    def produce() -> None:
        """``rate`` payloads a second onto the hot id, in a call every 10 ms."""
        per_call = max(1, rate // 100)
        n = 0
        start = time.monotonic()
        while not stop.is_set():
            jobs = [
                {"id": HOT, "payload": {"n": n + k, SECONDS_PER_PAYLOAD: cost}, "score": n + k}
                for k in range(per_call)
            ]
            Neighbours.perform_async(jobs)
            n += per_call
            pause = start + n / rate - time.monotonic()
            if pause > 0:
                time.sleep(pause)

    try:
        Neighbours.perform_async([{"id": "warm-up"}])
        client.blpop([STARTS], timeout=30)
        producer = threading.Thread(target=produce)
        producer.start()
        time.sleep(1.0)  # the hot id has a backlog
        end = time.monotonic() + seconds - 1.0
        for job_id in ids:
            if time.monotonic() >= end:
                break
            sent[job_id] = time.perf_counter()
            Neighbours.perform_async([{"id": job_id}])
            time.sleep(0.2)
        stop.set()
        producer.join()
        started: dict[str, float] = {}
        deadline = time.monotonic() + 600
        while len(started) < len(sent) and time.monotonic() < deadline:
            for line in client.lpop(STARTS, 1000) or []:
                job_id, monotonic = line.decode().split()
                started[job_id] = float(monotonic)
            time.sleep(0.1)
    finally:
        worker.stop(120)
    waits = [started[job_id] - at for job_id, at in sent.items() if job_id in started]
    batches = [line.decode().split() for line in client.lrange(HOT_BATCHES, 0, -1)]
    pairs = zip(batches, batches[1:], strict=False)
    in_order = all(b[2] == "1" for b in batches) and all(
        float(later[0]) > float(earlier[1]) for earlier, later in pairs
    )
    p50, p99, worst = percentiles(waits)
    print(
        f"hot id: {rate} payloads/s for {seconds:g} s ({payload_ms:g} ms each); "
        f"{len(waits)}/{len(sent)} jobs of other ids in its shard, enqueue -> perform: "
        f"p50 {p50:.3f} s, p99 {p99:.3f} s, max {worst:.3f} s (target: <= 0.5 s); "
        f"the hot id's {len(batches)} batches in score order: {in_order}"
    )


#: Where the tenants' ``perform`` notes ``"<id> <start> <end>"`` (monotonic clock).
TENANT_NOTES = "bench:tenants"
#: Account B's jobs.
B_JOBS = 20
#: How long after account A's last ``perform_async`` account B enqueues, seconds.
B_AFTER = 0.05
#: Jobs per ``perform_async`` call of the tenants' producer.
CHUNK = 1000
#: How often the worker process pushes its notes to Redis, seconds.
NOTES_EVERY = 0.02
#: Commands shown under each tenants run (those that took most of Redis's time).
COMMANDS_SHOWN = 10
#: Targets: B's p99 wait, seconds; A's drain with B over A's alone.
B_P99_TARGET = 0.1
DRAIN_TARGET = 1.05


class BufferedNotes:
    """Notes kept in the worker process and pushed to Redis every ``NOTES_EVERY`` by a
    thread of its own: a push per job would add to the Redis CPU per job measured."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.lines: collections.deque[str] = collections.deque()
        self.lock = threading.Lock()
        self.pusher: threading.Thread | None = None

    def add(self, line: str) -> None:
        """Keep ``line``; the first call starts the pushing thread."""
        self.lines.append(line)
        if self.pusher is None:
            with self.lock:
                if self.pusher is None:
                    self.pusher = threading.Thread(target=self.push_forever, daemon=True)
                    self.pusher.start()

    def push_forever(self) -> None:
        """Push the lines kept so far, every ``NOTES_EVERY``."""
        client = lowkiq.settings.client()
        while True:
            time.sleep(NOTES_EVERY)
            lines = [self.lines.popleft() for _ in range(len(self.lines))]
            if lines:
                client.rpush(self.key, *lines)


tenant_notes = BufferedNotes(TENANT_NOTES)


class Tenants(lowkiq.Worker):
    """Sleeps its payloads' cost ``{"s": seconds}``, noting when it started and ended."""

    @classmethod
    def perform(cls, payloads_by_id: dict) -> None:
        start = time.perf_counter()
        time.sleep(sum(p[SECONDS_PER_PAYLOAD] for ps in payloads_by_id.values() for p in ps))
        end = time.perf_counter()
        for job_id in payloads_by_id:
            tenant_notes.add(f"{job_id} {start} {end}")


@dataclass
class TenantsRun:
    """The figures of one run of the tenants experiment."""

    #: Jobs performed.
    jobs: int
    #: Seconds from A's first ``perform_async`` to the end of its last ``perform``.
    drain: float
    #: B's jobs, seconds from ``perform_async`` to ``perform`` starting (none: A alone).
    waits: list[float]
    #: Redis CPU µs per job performed, enqueues included.
    redis_cpu: float
    #: ``INFO commandstats`` µs per job performed, by command (a script's and a
    #: transaction's include the commands they ran, which count on their own too).
    commands: dict[str, float]


def account_jobs(prefix: str, count: int, cost: float, group: str | None) -> list[dict]:
    """``count`` jobs of distinct ids ``<prefix>-<n>``, each costing ``cost`` seconds."""
    jobs: list[dict] = [
        {"id": f"{prefix}-{n}", "payload": {SECONDS_PER_PAYLOAD: cost}} for n in range(count)
    ]
    if group is not None:
        for job in jobs:
            job["group"] = group
    return jobs


def read_notes(
    client: redis.Redis, ids: set[str], timeout: float
) -> dict[str, tuple[float, float]]:
    """The start and end of each of ``ids``' performs, waiting for the worker's notes."""
    noted: dict[str, tuple[float, float]] = {}
    deadline = time.monotonic() + timeout
    while not ids <= noted.keys() and time.monotonic() < deadline:
        for line in client.lpop(TENANT_NOTES, 10_000) or []:
            job_id, start, end = line.decode().split()
            noted[job_id] = (float(start), float(end))
        time.sleep(NOTES_EVERY)
    missing = len(ids - noted.keys())
    if missing:
        raise RuntimeError(f"{missing} job(s) were not performed within {timeout:g} s")
    return noted


def tenants_run(url: str, a_jobs: int, cost: float, groups: bool, with_b: bool) -> TenantsRun:
    """One run on an emptied Redis with a fresh worker process: A's jobs, then B's (if
    ``with_b``) ``B_AFTER`` later; waits until every job is performed."""
    shards, threads = 5, 5
    client = redis.Redis.from_url(url)
    flush(client)
    queue = Tenants.queue()
    # one id of each shard
    warm_ids = list({queue.shard_of(f"warm-{n}"): f"warm-{n}" for n in range(100)}.values())
    a = account_jobs("a", a_jobs, cost, "A" if groups else None)
    b = account_jobs("b", B_JOBS if with_b else 0, cost, "B" if groups else None)
    worker = WorkerProcess(url, threads, Tenants, shards)
    try:
        Tenants.perform_async(
            [{"id": job_id, "payload": {SECONDS_PER_PAYLOAD: 0}} for job_id in warm_ids]
        )
        read_notes(client, set(warm_ids), 60)  # every shard is served
        cpu = redis_cpu(client)
        client.config_resetstat()
        started = time.perf_counter()
        for first in range(0, len(a), CHUNK):
            Tenants.perform_async(a[first : first + CHUNK])
        sent = 0.0
        if b:
            time.sleep(B_AFTER)
            sent = time.perf_counter()
            Tenants.perform_async(b)
        base, total = len(warm_ids), len(a) + len(b)
        deadline = time.monotonic() + 600
        while processed(client, Tenants.queue_name, shards) < base + total:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{total} jobs were not performed within 600 s")
            time.sleep(NOTES_EVERY)
        cpu = redis_cpu(client) - cpu
        stats = client.info("commandstats")
        noted = read_notes(client, {job["id"] for job in a + b}, 60)
    finally:
        worker.stop(120)
    return TenantsRun(
        jobs=total,
        drain=max(noted[job["id"]][1] for job in a) - started,
        waits=[noted[job["id"]][0] - sent for job in b],
        redis_cpu=cpu / total * 1e6,
        commands={name[len("cmdstat_") :]: row["usec"] / total for name, row in stats.items()},
    )


def commands_line(run: TenantsRun) -> str:
    """The commands that took most of Redis's time, µs per job."""
    busiest = sorted(run.commands.items(), key=lambda item: -item[1])[:COMMANDS_SHOWN]
    return "    commandstats µs/job: " + ", ".join(f"{name} {us:.2f}" for name, us in busiest)


def tenants(url: str, a_jobs: int, payload_ms: float, groups: bool, runs: int) -> None:
    """Run the tenants experiment ``runs`` times (A alone, then A + B) and print a table."""
    configure(url, 5, Tenants, 5)
    print(
        f"tenants: A enqueues {a_jobs:,} jobs ({CHUNK:,} a call), B {B_JOBS} jobs "
        f"{B_AFTER * 1000:.0f} ms later, {payload_ms:g} ms of perform each; "
        f"groups: {'on' if groups else 'off'}"
    )
    print(
        f"{'run':<4}{'case':<9}{'jobs':>7}  {'A drain':>8}  {'vs alone':>8}  "
        f"{'B wait p50 / p99 / max':>26}  {'Redis CPU/job':>13}"
    )
    for number in range(1, runs + 1):
        alone = tenants_run(url, a_jobs, payload_ms / 1000, groups, with_b=False)
        print(
            f"{number:<4}{'A alone':<9}{alone.jobs:>7,}  {alone.drain:>6.2f} s  {'-':>8}  "
            f"{'-':>26}  {alone.redis_cpu:>10.1f} µs"
        )
        print(commands_line(alone))
        mixed = tenants_run(url, a_jobs, payload_ms / 1000, groups, with_b=True)
        p50, p99, worst = percentiles(mixed.waits)
        slower = mixed.drain / alone.drain
        print(
            f"{number:<4}{'A + B':<9}{mixed.jobs:>7,}  {mixed.drain:>6.2f} s  "
            f"{(slower - 1) * 100:>+6.1f} %  "
            f"{f'{p50:.3f} / {p99:.3f} / {worst:.3f} s':>26}  {mixed.redis_cpu:>10.1f} µs  "
            f"B p99 {'ok' if p99 <= B_P99_TARGET else 'over'}, "
            f"drain {'ok' if slower <= DRAIN_TARGET else 'over'}"
        )
        print(commands_line(mixed))
    print(
        f"targets: B p99 <= {B_P99_TARGET:g} s; A drain with B within "
        f"+{(DRAIN_TARGET - 1) * 100:.0f} % of A alone; Redis CPU/job with --groups within "
        f"+10 % of a run without (compare two invocations)"
    )


def main() -> None:
    """Run the chosen experiment on a private Redis and print its figures."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("experiment", nargs="?", default="hot-id", choices=["hot-id", "tenants"])
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--rate", type=int, default=1000)
    parser.add_argument("--payload-ms", type=float, default=1.5)
    parser.add_argument("--jobs", type=int, default=20_000, help="tenants: account A's jobs")
    parser.add_argument("--groups", action="store_true", help='tenants: jobs carry "group"')
    parser.add_argument("--runs", type=int, default=1, help="tenants: rounds of both runs")
    args = parser.parse_args()
    server = start_server(tempfile.mkdtemp(prefix="lowkiq-bench-"))
    try:
        print(machine())
        if args.experiment == "hot-id":
            hot_id(server.url, args.seconds, args.rate, args.payload_ms)
        else:
            tenants(server.url, args.jobs, args.payload_ms, args.groups, args.runs)
    finally:
        server.stop()


if __name__ == "__main__":
    main()
