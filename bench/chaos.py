"""Chaos: worker processes and Redis disrupted at random while updates keep coming.

K `lowkiq worker` processes share the shards automatically (no --nodes).  A
feeder enqueues versioned updates of a few hundred ids; meanwhile, every 1-3 s,
one of:

* SIGKILL a worker (and start a new one), or SIGTERM it (and start a new one);
* SIGSTOP a worker past its lease, then SIGCONT it;
* kill -9 Redis (append-only file, appendfsync always) and restart it;
* a hand-over (a worker joins, or one of K + 1 leaves on TERM) with Redis's client
  connections dropped (``CLIENT KILL TYPE normal`` from a connection of its own)
  several times while the shards move;
* a hand-over with Redis killed (kill -9) and restarted 0.4-1 s later while the
  shards move.

With ``--groups N`` every id is in one of N groups (a tenant each): the shards take
their due jobs in turn across groups, and the same checks hold; with ``--group-cap C``
also at most C batches of a group run at once (``Worker.group_concurrency``).

A quarter into the run, one job (id ``poison``) whose ``perform`` ends its process
(``os._exit``) is enqueued; the bench starts a new worker for each process it ends.
With ``Worker.max_restores`` the job lands in the morgue and the other ids of its
shard go on.

Every perform writes to a fenced store (a compare-and-set on the fence in a Redis
of its own; see bench/chaos_app.py).  Then a clean drain, and a check of every
recorded perform: payload versions lost, versions out of score order within a call,
overlapping performs of one id, stale writes the fenced store accepted (must be 0)
and fenced writes it refused, worker processes that crashed (exited by themselves,
not killed by the bench nor the poison job, or logged a fatal error), the poison
job's fate and the morgue.

Performs by a process that was SIGSTOPped while they ran are counted apart:
such a perform goes on after its lease passed to another process (whose run of
the same batch may overlap it); its acks are refused by Redis and its writes by
the fenced store when they come after the new owner's.
Each process runs ``--threads`` threads (default 2), so a thread serves several of the
8 shards and sends their pops together (one write per round).
With ``--children N`` every worker is a supervisor of N children (``--processes N``):
the bench SIGKILLs and SIGSTOPs children, the supervisors restart them and free a dead
child's leases at once.
With ``--rate R`` the worker has a rate limit of R jobs per second: its pops take
several batches at once (as many as the reserved tokens pay for), so a crash finds
several batches of a shard in processing.

With ``--cluster`` the queue's Redis is a 3-master Redis Cluster (no replicas, a
``cluster-node-timeout`` longer than the run, so no master is failed over): instead of
Redis killed and restarted, a master hangs (SIGSTOP for 1-4 s, longer than a lease,
then SIGCONT), alone or during a hand-over; connections are dropped on every master.

With ``--cancels`` the feeder also cancels an id now and then
(``Worker.actions().cancel``, about :data:`CANCEL_EVERY` seconds apart, while the
disruptions go on): the versions of that id fed before the cancel began may end
unperformed (their queued jobs are deleted, a running batch settles them as
cancelled), and none may start a perform more than :data:`CANCEL_HEARD` seconds after
the cancel returned (a batch popped before it and not yet begun is not performed once
the process heard it; a batch put back is settled as cancelled, never run again),
performs of a process paused by SIGSTOP aside; versions fed after it must run.

With ``--iterating`` the worker is a ``lowkiq.IterableWorker`` (``ChaosSteps`` in
bench/chaos_app.py): ``perform_one`` takes 5-20 ms per payload and writes that version to
the fenced store, ``max_perform_seconds`` is 0.2 s, and the feeder sends each round a
burst of 1 to ``--burst`` versions of one id (besides one version of 5 others), so an
id's merged burst is a long perform, done over several performs, the rest given back
each time (``current_batch().yield_rest``); one round in 50 makes the burst's last
payload slow (5 s).  The disruptions also include deploys: a replacement starts, the
old process (one whose slow payload has more than the grace to run, when there is
one) gets TERM, and KILL if it is still alive after a 2 s grace.  Every payload
performed is recorded (a step, pushed by the script that writes the store, so the
record's order is the order of the writes), and a perform of an id is the steps of one
``perform`` call for that id.  The checks are then:

* lost: a version fed that no step performed and that is not in the morgue;
* out of order in a perform: a step whose version is not above the previous step's
  of the same perform and id;
* out of order across performs: a version performed for the first time below a
  version of that id performed before (new work never goes back);
* going back: a perform whose first version was performed before is allowed only as
  a re-run of an unacked batch, starting at the first version of the id's previous
  perform (its process died or froze before the ack, or an ack's outcome was unknown
  and the batch was restored under the same lease: at least once), or as the rest
  given back, above the previous perform's last version; any other is counted;
* late steps: a step under a lower fence than one that already performed the id (a
  process that ran on past its lease) is left out of the order checks and counted,
  apart for a process frozen by SIGSTOP;
* overlapping performs of one id: from a perform's first step to its last;
* stale writes accepted by the fenced store (replayed in the record's order): a
  version below the stored one accepted outside a re-run (a re-run rewrites the
  versions of its batch under a newer fence, or under the same lease after an
  unknown ack: those are counted apart);
* crashed processes, the poison job and the morgue as above; plus the performs that
  gave payloads back (after ``max_perform_seconds`` or earlier, when asked to stop),
  the deploys and how long their processes took to exit after TERM.

With ``--workflows`` the feeder opens workflows (``lowkiq.Workflow``, ``--workflow-count``
over the run, one about every ``seconds / count``) of ``--members`` members each: ordinary
updates of the plain worker, on a few ids each so that several members of a workflow
merge on one id (and now and then one payload given twice in a call: one member), in
calls of 10, besides a round of 10 plain updates per workflow; ``--producers N``
threads open them (each with ids of its own, so that an id's versions are enqueued in
their order).  Each workflow's
``on_complete`` is ``ChaosCallback`` (bench/chaos_app.py), which records each perform.
A call refused while Redis is away is sent again (the same payloads: it merges into
what a lost reply stored); a workflow whose open is refused is left (it must never
complete: it is never closed); a close refused is tried again.  The drain also waits
for every closed workflow to be complete and its callback performed.  Checks:

* on_complete: every closed workflow's callback performed exactly once (missing, more
  than once: a second perform with no disruption from :data:`RECOVERY` seconds before the
  first one's start to 1 s past its lease is a duplicate, with one a re-run of a batch
  not acked; each printed, with the processes and whether under the same lease), and
  none for a workflow never closed;
* premature: a callback whose perform started before the end of a perform of one of
  its workflow's members (performs of a process frozen by SIGSTOP, and of payloads sent
  again after a refused call, counted apart);
* members lost: a member (an id's version) neither performed nor in the morgue;
* the status the callback got: total = the members given, every member ended, dead =
  those in the morgue;
* the poison job is a member of a workflow of its own (with 9 updates of ids no
  producer uses): its callback comes after the poison's last death, with dead 1 and not
  succeeded;
* and the plain checks (lost versions, order, overlaps, fenced store) over every update.

Usage: python bench/chaos.py [--seconds 180] [--processes 3] [--ids 200] [--threads 2]
       [--children N] [--rate R] [--iterating [--burst 40]] [--cancels]
       [--workflows [--workflow-count 2000] [--members 50]]
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import redis
from _machine import machine

from lowkiq.clients.connection import pipelined
from lowkiq.clients.embedded import EmbeddedServer, start_server
from lowkiq.clients.embedded_cluster import EmbeddedCluster, start_cluster

ROOT = Path(__file__).resolve().parents[1]
#: The queue's URL scheme with --cluster (lowkiq's, as bench/chaos_app.py reads it).
CLUSTER_SCHEME = "redis+cluster://"
LEASE_TTL = 2.0
#: Seconds the final drain may take before the run reports what is left.
DRAIN_LIMIT = 300.0
#: Seconds a deploy waits after TERM before it sends KILL.
DEPLOY_GRACE = 2.0
#: With --iterating: the chance that a round's burst ends with a slow payload, and the
#: seconds that payload takes (more than :data:`DEPLOY_GRACE`).
SLOW_CHANCE = 1 / 50
SLOW_SECONDS = 5.0
#: With --cancels: about how many seconds apart the feeder cancels an id, and how long
#: after the cancel returned no perform may start with a version it cancelled (a process
#: hears a cancel on the nudge, within milliseconds; a bound with room for a loaded host).
CANCEL_EVERY = 0.5
CANCEL_HEARD = 1.0
#: With --workflows: members of a workflow enqueued per call, ids a workflow's members
#: are spread over (so that several merge on one id), the chance that a call gives one of
#: its payloads twice (one member), and how long a call refused is tried again.
MEMBERS_PER_CALL = 10
IDS_PER_WORKFLOW = 20
TWICE_CHANCE = 0.25
RETRY_FOR = 30.0
#: Seconds a disruption's aftermath may last (a Redis reloading its append-only file,
#: leases taken again): a callback performed again after its first perform began this
#: long after a disruption counts as a re-run, not a duplicate.
RECOVERY = 10.0


@dataclass
class Opened:
    """A workflow of the feeder (--workflows): its members (id, version), how many
    distinct ones, whether it was closed, and the members sent again after a refused
    call (a lost reply may have stored them already)."""

    id: str
    members: set[tuple[str, int]] = field(default_factory=set)
    closed: bool = False
    sent_again: set[tuple[str, int]] = field(default_factory=set)


@dataclass
class Cancel:
    """One cancel of the feeder: the id, when the call began and returned, the versions
    fed before it began, and how many jobs it found queued or running."""

    id: str
    began: float
    returned: float
    versions: set[int]
    found: int


class Worker:
    """One `lowkiq worker` process of the run (with ``children``, a supervisor of that
    many: ``--processes N``), its output in a log file."""

    def __init__(self, env: dict[str, str], logs: Path, number: int, children: int) -> None:
        self.number = number
        self.log = logs / f"worker-{number}.log"
        self.supervised = children > 1
        #: Set before the bench itself signals the process to end.
        self.ended_by_bench = False
        command = [sys.executable, "-m", "lowkiq", "worker", "-r", "chaos_app"]
        with self.log.open("w") as out:
            self.process = subprocess.Popen(
                command + (["--processes", str(children)] if self.supervised else []),
                env=env, cwd=ROOT / "bench", stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip

    @property
    def pid(self) -> int:
        """The process id."""
        return self.process.pid

    def children(self) -> list[int]:
        """The supervisor's children (none while it restarts them, nor without one)."""
        if not self.supervised:
            return []
        try:
            return [
                int(pid)
                for pid in Path(f"/proc/{self.pid}/task/{self.pid}/children").read_text().split()
            ]
        except OSError:
            return []

    def child(self) -> int | None:
        """A process that runs the jobs: one of the supervisor's children (``None`` while
        it restarts them), else the process itself."""
        if not self.supervised:
            return self.pid
        children = self.children()
        return random.choice(children) if children else None

    def kill(self) -> None:
        """SIGKILL the process, and first its children under a supervisor."""
        for pid in self.children():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.process.kill()


class Run:
    """The processes, the feeder and the record of what happened."""

    def __init__(self, args: argparse.Namespace, directory: Path) -> None:
        self.args = args
        self.directory = directory
        self.queue_dir = directory / "queue"
        self.cluster: EmbeddedCluster | None = None
        if args.cluster:
            self.cluster = start_cluster(self.queue_dir, masters=3, node_timeout_ms=3_600_000)
            self.queue_url = self.cluster.url.replace("redis://", CLUSTER_SCHEME)
        else:
            self.queue = self.start_queue_redis()
            self.queue_url = self.queue.url
        self.records = start_server(directory / "records")
        self.env = {
            **os.environ,
            "REDIS_URL": self.queue_url,
            "RECORD_URL": self.records.url,
            "CHAOS_LEASE_TTL": str(LEASE_TTL),
            "CHAOS_RATE": str(args.rate or 0),
            "CHAOS_GROUP_CAP": str(args.group_cap or 0),
            "CHAOS_ITERATING": "1" if args.iterating else "0",
            "CHAOS_WORKFLOWS": "1" if args.workflows else "0",
            "LOWKIQ_THREADS_PER_NODE": str(args.threads),
            "PYTHONPATH": str(ROOT),
        }
        os.environ.update(
            REDIS_URL=self.queue_url,
            RECORD_URL=self.records.url,
            CHAOS_ITERATING=self.env["CHAOS_ITERATING"],
            CHAOS_WORKFLOWS=self.env["CHAOS_WORKFLOWS"],
        )
        sys.path.insert(0, str(ROOT / "bench"))
        import chaos_app

        self.app = chaos_app
        self.worker_class = chaos_app.WORKER
        self.started = 0
        self.lock = threading.Lock()
        self.workers: list[Worker] = []
        self.fed: dict[str, set[int]] = defaultdict(set)
        self.versions: dict[str, int] = defaultdict(int)
        self.pauses: list[tuple[int, float, float]] = []
        self.events: dict[str, int] = defaultdict(int)
        #: Workers that exited by themselves: (number, exit code).
        self.crashed: list[tuple[int, int]] = []
        #: The most jobs the watcher saw in one shard's processing area at once.
        self.most_in_processing = 0
        self.poison_exits = 0
        #: Supervised children the bench killed.
        self.killed_children: set[int] = set()
        #: When a disruption hit a hand-over (connections dropped, Redis killed).
        self.hand_over_hits: list[float] = []
        #: Seconds each deployed process took to exit after TERM (not those killed).
        self.term_exits: list[float] = []
        self.feeding = True
        self.watching = True
        #: The feeder's cancels (--cancels), in order.
        self.cancels: list[Cancel] = []
        self._next_cancel = time.monotonic() + CANCEL_EVERY
        #: With --workflows: the workflows opened, and when each disruption ran.
        self.opened: list[Opened] = []
        #: With --workflows: the workflow the poison job is a member of.
        self.poison_workflow: str | None = None
        self.disruptions: list[tuple[float, float]] = []

    def start_queue_redis(self) -> EmbeddedServer:
        return start_server(self.queue_dir, persistent=True, config=["--appendfsync", "always"])

    def start_worker(self) -> None:
        with self.lock:
            self.workers.append(Worker(self.env, self.directory, self.started, self.args.children))
            self.started += 1

    def new_job(self, job_id: str) -> dict[str, Any]:
        """The next update of ``job_id`` (its version the score)."""
        self.versions[job_id] += 1
        version = self.versions[job_id]
        job = {"id": job_id, "payload": {"v": version, "t": time.time()}, "score": version}
        if self.args.groups:  # an id's group never changes
            job["group"] = f"g{int(job_id[2:]) % self.args.groups}"
        return job

    def feed_workflows(self) -> None:
        """Open ``--workflow-count`` workflows over the run from ``--producers`` threads
        (each with ids of its own, so that an id's versions are enqueued in order)."""
        producers = [
            threading.Thread(target=self.produce_workflows, args=(k,), daemon=True)
            for k in range(1, self.args.producers)
        ]
        for producer in producers:
            producer.start()
        self.produce_workflows(0)
        for producer in producers:
            producer.join()

    def produce_workflows(self, k: int) -> None:
        """Producer ``k``'s workflows (one every ``seconds x producers / count``, or as
        fast as they go), each followed by a round of 10 plain updates of its ids."""
        count = self.args.producers
        ids = [f"id{n}" for n in range(self.args.ids) if n % count == k]
        every = self.args.seconds * count / self.args.workflow_count
        due = time.monotonic()
        for n in range(k, self.args.workflow_count, count):
            if not self.feeding:
                return
            self.open_workflow(f"wf{n}", ids)
            jobs = [self.new_job(job_id) for job_id in random.sample(ids, 10)]
            if self.send(jobs, None):
                for job in jobs:
                    self.fed[job["id"]].add(job["payload"]["v"])
            due += every
            time.sleep(max(0.0, due - time.monotonic()))

    def send(self, jobs: list[dict[str, Any]], opened: Opened | None) -> bool:
        """Enqueue ``jobs``, again while Redis refuses (for :data:`RETRY_FOR` seconds):
        the same payloads, which merge into what a lost reply stored."""
        given_up = time.monotonic() + RETRY_FOR
        tries = 0
        while True:
            try:
                self.worker_class.perform_async(jobs)
                break
            except Exception:  # noqa: BLE001 - Redis is down or a connection dropped
                self.events["enqueue refused (Redis down or connection dropped), sent again"] += 1
                tries += 1
                if time.monotonic() > given_up:
                    return False
                time.sleep(0.1)
        if tries and opened is not None:
            opened.sent_again.update((job["id"], job["payload"]["v"]) for job in jobs)
        return True

    def open_workflow(self, workflow_id: str, ids: list[str]) -> None:
        """One workflow of ``--members`` members on :data:`IDS_PER_WORKFLOW` ids."""
        own = random.sample(ids, IDS_PER_WORKFLOW)
        chosen = [random.choice(own) for _ in range(self.args.members)]
        calls = []
        for start in range(0, len(chosen), MEMBERS_PER_CALL):
            jobs = [self.new_job(job_id) for job_id in chosen[start : start + MEMBERS_PER_CALL]]
            if random.random() < TWICE_CHANCE:
                jobs.append(dict(random.choice(jobs)))  # the same payload: one member
                self.events["workflow calls giving a payload twice"] += 1
            calls.append(jobs)
        self.run_workflow(workflow_id, calls)

    def run_workflow(self, workflow_id: str, calls: list[list[dict[str, Any]]]) -> bool:
        """A ``with lowkiq.Workflow`` block enqueueing ``calls``, each sent again while
        Redis refuses, then closed; ``False`` when it was left open."""
        import lowkiq

        opened = Opened(workflow_id)
        self.opened.append(opened)
        flow = lowkiq.Workflow(
            workflow_id, on_complete=self.app.ChaosCallback, payload={"opened": time.time()}
        )
        try:
            flow.__enter__()
        except Exception:  # noqa: BLE001 - Redis away: left open (a lost reply) or unborn
            self.events["workflow open refused (left, never closed)"] += 1
            return False
        try:
            for jobs in calls:
                if not self.send(jobs, opened):
                    self.events["workflow members refused for 30 s (workflow left open)"] += 1
                    return False
                for job in jobs:
                    opened.members.add((job["id"], job["payload"]["v"]))
                    if job["id"] != self.app.POISON:  # its fate is checked apart
                        self.fed[job["id"]].add(job["payload"]["v"])
        finally:
            flow._leave()  # noqa: SLF001 - the context var reset; the close follows
        self.close_workflow(flow, opened)
        return opened.closed

    def close_workflow(self, flow: Any, opened: Opened) -> None:
        """The block's end (members registered, closed), again while Redis refuses.  A
        close whose reply was lost answers ``CLOSED`` when tried again."""
        import redis as redis_errors

        given_up = time.monotonic() + RETRY_FOR
        while True:
            try:
                flow._close()  # noqa: SLF001 - what __exit__ runs; tried again here
                opened.closed = True
                return
            except redis_errors.ResponseError as exc:
                if str(exc).startswith("CLOSED"):
                    self.events["workflow close whose reply was lost (closed)"] += 1
                    opened.closed = True
                    return
                raise
            except Exception:  # noqa: BLE001 - Redis is down or a connection dropped
                self.events["workflow close refused, tried again"] += 1
                if time.monotonic() > given_up:
                    self.events["workflow close refused for 30 s (left open)"] += 1
                    return
                time.sleep(0.1)

    def feed(self) -> None:
        """Enqueue versioned updates of random ids until told to stop."""
        if self.args.workflows:
            self.feed_workflows()
            return
        ids = [f"id{n}" for n in range(self.args.ids)]
        while self.feeding:
            burst = 0
            if self.args.iterating:
                burst = random.randint(1, self.args.burst)
                chosen = [random.choice(ids)] * burst + random.sample(ids, 5)
            else:
                chosen = random.sample(ids, 10)
            jobs = []
            for job_id in chosen:
                self.versions[job_id] += 1
                version = self.versions[job_id]
                payload: dict[str, Any] = {"v": version, "t": time.time()}
                job = {"id": job_id, "payload": payload, "score": version}
                if self.args.groups:  # an id's group never changes
                    job["group"] = f"g{int(job_id[2:]) % self.args.groups}"
                jobs.append(job)
            if burst and random.random() < SLOW_CHANCE:
                jobs[burst - 1]["payload"]["slow"] = SLOW_SECONDS
            try:
                self.worker_class.perform_async(jobs)
            except Exception:  # noqa: BLE001 - Redis is down: these versions may be lost
                self.events["enqueue refused (Redis down or connection dropped)"] += 1
                time.sleep(0.05)
                continue
            for job in jobs:
                self.fed[job["id"]].add(job["payload"]["v"])
            if self.args.cancels and time.monotonic() >= self._next_cancel:
                self.cancel(random.choice(ids))
            time.sleep(0.15 if self.args.iterating else 0.01)

    def cancel(self, job_id: str) -> None:
        """Cancel ``job_id`` (--cancels), noting what it may take away."""
        self._next_cancel = time.monotonic() + random.uniform(0.5, 1.5) * CANCEL_EVERY
        versions, began = set(self.fed[job_id]), time.time()
        try:
            found = self.worker_class.actions().cancel([job_id])
        except Exception:  # noqa: BLE001 - Redis is down: cancelled, or not; left out
            self.events["cancel refused (Redis down or connection dropped)"] += 1
            versions |= set(range(1, self.versions[job_id] + 1))
            self.cancels.append(Cancel(job_id, began, float("inf"), versions, 0))
            return
        self.cancels.append(Cancel(job_id, began, time.time(), versions, found))

    def feed_poison(self) -> None:
        """Enqueue the job whose perform ends its process (retried while Redis is down);
        with --workflows, as a member of a workflow of its own with 9 updates of ids no
        producer uses (``px0``...): it must complete with one member dead, not succeed."""
        if self.args.workflows:
            for attempt in range(10):
                poison = {"id": self.app.POISON, "payload": {"v": 1, "t": time.time()}, "score": 1}
                jobs = [poison, *(self.new_job(f"px{n}") for n in range(9))]
                if self.run_workflow(f"wf-poison-{attempt}", [jobs]):
                    self.poison_workflow = f"wf-poison-{attempt}"
                    return
            return
        while True:
            try:
                self.worker_class.perform_async([{"id": self.app.POISON, "payload": {}}])
                return
            except Exception:  # noqa: BLE001 - Redis is down: try again
                time.sleep(0.2)

    def watch(self) -> None:
        """Replace every worker that exits by itself; note why it did; keep the most jobs
        seen in one shard's processing area."""
        keys = self.worker_class.queue().keys
        areas = [keys.processing_hash(shard) for shard in range(self.worker_class.shards_count)]
        clients = [redis.Redis.from_url(url, socket_timeout=1) for url in self.server_urls()]
        while self.watching:
            for client in clients:
                try:
                    replies = pipelined(client, [("HLEN", key) for key in areas], False)
                    # A cluster's master answers MOVED for the areas of the others.
                    sizes = [size for size in replies if isinstance(size, int)]
                    self.most_in_processing = max(self.most_in_processing, 0, *sizes)
                except redis.RedisError:
                    pass  # down, hung or its connections dropped: look again next time
            with self.lock:
                ended = [
                    w for w in self.workers if not w.ended_by_bench and w.process.poll() is not None
                ]
                for worker in ended:
                    self.workers.remove(worker)
            for worker in ended:
                code = worker.process.returncode
                if code == self.app.POISON_EXIT:
                    self.poison_exits += 1
                else:
                    self.crashed.append((worker.number, code))
                self.start_worker()
            time.sleep(0.2)

    def end(self, worker: Worker, how: signal.Signals) -> None:
        """Send ``how`` to ``worker``, which the bench then no longer replaces by itself."""
        with self.lock:
            worker.ended_by_bench = True
            if worker in self.workers:
                self.workers.remove(worker)
        worker.process.send_signal(how)

    def finish(self, worker: Worker) -> None:
        """Wait for a worker sent TERM; a non-zero exit is a crash on stopping."""
        try:
            code = worker.process.wait(30)
        except subprocess.TimeoutExpired:
            self.events["worker ignoring TERM for 30 s (killed)"] += 1
            worker.kill()
            worker.process.wait()
            return
        self.exited(worker, code)

    def exited(self, worker: Worker, code: int) -> None:
        """Note how a worker sent TERM ended: a non-zero exit is a crash on stopping."""
        if code == -signal.SIGTERM:
            # TERM came while it was starting, before it installed its handlers.
            self.events["worker ended by TERM while starting"] += 1
        elif code == self.app.POISON_EXIT:
            self.poison_exits += 1  # the poison job ended it while it was stopping
        elif code != 0:
            self.crashed.append((worker.number, code))

    def victim(self) -> Worker:
        with self.lock:
            return random.choice(self.workers)

    def server_urls(self) -> list[str]:
        """The queue's Redis servers: the one, or every master of the cluster."""
        if self.cluster is not None:
            return [master.url for master in self.cluster.masters]
        return [self.queue.url]

    def kill_redis(self, down: float) -> str:
        """kill -9 the queue's Redis, and restart it after ``down`` seconds; on a cluster,
        hang a master (SIGSTOP) for 1-4 s instead.  Returns what it did."""
        if self.cluster is not None:
            master = random.choice(self.cluster.masters)
            assert master.process is not None
            master.process.send_signal(signal.SIGSTOP)
            time.sleep(random.uniform(1.0, 4.0))
            master.process.send_signal(signal.SIGCONT)
            return "a master hung (SIGSTOP 1-4 s)"
        self.queue.process.kill()
        self.queue.process.wait()
        time.sleep(down)
        self.queue = self.start_queue_redis()
        return "redis kill -9"

    def drop_connections(self) -> None:
        """CLIENT KILL TYPE normal from a connection of its own (spared by SKIPME), on
        every server."""
        self.hand_over_hits.append(time.time())
        for url in self.server_urls():
            client = redis.Redis.from_url(url, socket_timeout=5)
            try:
                killed = client.execute_command("CLIENT", "KILL", "TYPE", "normal")
                self.events["connections dropped by CLIENT KILL"] += int(killed)
            except redis.RedisError:
                self.events["CLIENT KILL refused (Redis down)"] += 1
            finally:
                client.close()

    def hand_over(self) -> tuple[str, Worker | None]:
        """A worker joins (K processes running) or one leaves on TERM (K + 1): shards move.
        Returns what happened and the leaving worker, for :meth:`finish`."""
        with self.lock:
            count = len(self.workers)
        if count > self.args.processes:
            leaving = self.victim()
            self.end(leaving, signal.SIGTERM)
            return "leave", leaving
        self.start_worker()
        return "join", None

    def slow_victim(self) -> Worker:
        """A worker whose slow payload outlasts :data:`DEPLOY_GRACE` (its deploy ends in
        KILL), or else any."""
        client = redis.Redis.from_url(self.records.url)
        try:
            keys = client.keys("chaos:slow:*")
            commands = [("PTTL", key) for key in keys]
            left = pipelined(client, commands, transaction=False) if keys else []
        finally:
            client.close()
        busy = {
            int(key.rsplit(b":", 1)[1])
            for key, ms in zip(keys, left, strict=True)
            if ms > (DEPLOY_GRACE + 0.3) * 1000
        }
        with self.lock:
            running = [w for w in self.workers if {w.pid, *w.children()} & busy]
        return random.choice(running) if running else self.victim()

    def deploy(self) -> None:
        """A deploy: a replacement starts, the old worker gets TERM, and KILL when it is
        still alive after :data:`DEPLOY_GRACE` seconds."""
        old = self.slow_victim()
        self.start_worker()
        self.end(old, signal.SIGTERM)
        asked = time.monotonic()
        try:
            code = old.process.wait(DEPLOY_GRACE)
        except subprocess.TimeoutExpired:
            old.kill()
            old.process.wait()
            self.events[f"deploy: KILL after {DEPLOY_GRACE:g} s of grace"] += 1
            return
        self.term_exits.append(time.monotonic() - asked)
        self.exited(old, code)

    def chaos(self) -> None:
        """One random disruption."""
        actions = ["sigkill", "sigterm", "sigstop", "redis", "handover-drops", "handover-restart"]
        weights = [3, 2, 2, 1, 3, 2]
        if self.args.iterating:
            actions, weights = [*actions, "deploy"], [3, 1, 2, 1, 3, 2, 3]
        action = random.choices(actions, weights=weights)[0]
        if action == "deploy":
            self.deploy()
            self.events["deploy (replacement started, TERM, KILL after the grace)"] += 1
        elif action == "redis":
            self.events[self.kill_redis(random.uniform(0.4, 1.0))] += 1
        elif action == "handover-drops":
            how, leaving = self.hand_over()
            # A joining process registers a second or two after it starts; a leaving one
            # hands its shards over at once: drop the connections across that window.
            window = 3.0 if how == "join" else 1.0
            moments = sorted(random.uniform(0.0, window) for _ in range(4))
            previous = 0.0
            for moment in moments:
                time.sleep(moment - previous)
                previous = moment
                self.drop_connections()
            self.events[f"hand-over ({how}) with connections dropped"] += 1
            if leaving is not None:
                self.finish(leaving)
        elif action == "handover-restart":
            how, leaving = self.hand_over()
            time.sleep(random.uniform(0.5, 2.5) if how == "join" else random.uniform(0.0, 0.5))
            self.hand_over_hits.append(time.time())
            what = self.kill_redis(random.uniform(0.4, 1.0))
            self.events[f"hand-over ({how}) with {what}"] += 1
            if leaving is not None:
                self.finish(leaving)
        elif action == "sigkill" and self.args.children > 1:
            # The supervisor sees its child die, frees its leases and starts another.
            child = self.victim().child()
            if child is not None:
                os.kill(child, signal.SIGKILL)
                self.killed_children.add(child)
                self.events["worker child SIGKILL (its supervisor restarts it)"] += 1
        elif action == "sigkill":
            victim = self.victim()
            self.end(victim, signal.SIGKILL)
            victim.process.wait()
            self.events["worker SIGKILL"] += 1
            self.start_worker()
        elif action == "sigterm":
            victim = self.victim()
            self.end(victim, signal.SIGTERM)
            self.finish(victim)
            self.events["worker SIGTERM"] += 1
            self.start_worker()
        else:
            pid = self.victim().child()
            if pid is None:
                return
            paused_at = time.time()
            os.kill(pid, signal.SIGSTOP)
            time.sleep(LEASE_TTL + random.uniform(0.5, 1.5))
            os.kill(pid, signal.SIGCONT)
            self.pauses.append((pid, paused_at, time.time()))
            self.events["worker SIGSTOP past its lease"] += 1

    def drain(self) -> float | None:
        """Wait until every queued job is performed; returns the seconds it took, or
        ``None`` after :data:`DRAIN_LIMIT`."""
        started = time.monotonic()
        while time.monotonic() - started < DRAIN_LIMIT:
            with contextlib.suppress(Exception):  # a master still hung a moment ago
                if self.unfinished_workflows() == 0 and all(
                    metrics["length"] == 0 and metrics["busy"] == 0
                    for metrics in (worker.metrics() for worker in self.drained_workers())
                ):
                    return time.monotonic() - started
            time.sleep(0.2)
        return None

    def drained_workers(self) -> list[Any]:
        """The workers the drain waits for: the run's, and the callbacks' (--workflows)."""
        if self.args.workflows:
            return [self.worker_class, self.app.ChaosCallback]
        return [self.worker_class]

    def unfinished_workflows(self) -> int:
        """Closed workflows (--workflows) not yet complete with their callbacks enqueued
        (lowkiq's index of those not finished)."""
        if not self.args.workflows:
            return 0
        from lowkiq.workflows import store

        closed = {opened.id for opened in self.opened if opened.closed}
        client = self.app.lowkiq.settings.client()
        return len(closed.intersection(i.decode() for i in client.zrange(store.UNFINISHED, 0, -1)))

    def stop(self) -> None:
        """TERM every worker; a non-zero exit is a crash on stopping."""
        with self.lock:
            workers = list(self.workers)
        for worker in workers:
            self.end(worker, signal.SIGTERM)
        for worker in workers:
            self.finish(worker)

    def paused(self, pid: int, start: float, end: float) -> bool:
        return any(p == pid and a < end and start < b for p, a, b in self.pauses)

    def overlaps(self, rows: list[dict[str, Any]]) -> tuple[int, int]:
        """Overlapping performs of one id (``rows``: id, start, end, pid of each): (neither
        paused, one of them paused)."""
        by_id: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for row in rows:
            by_id[row["id"]].append(row)
        overlaps = paused_overlaps = 0
        for performs in by_id.values():
            performs.sort(key=lambda row: row["start"])
            for n, first in enumerate(performs):
                for second in performs[n + 1 :]:
                    if second["start"] >= first["end"]:
                        break
                    if self.paused(first["pid"], first["start"], first["end"]) or self.paused(
                        second["pid"], second["start"], second["end"]
                    ):
                        paused_overlaps += 1
                    else:
                        overlaps += 1
        return overlaps, paused_overlaps

    def child_exits(self) -> None:
        """Under supervisors: count the children the poison job ended, and those that
        exited by themselves (the supervisors log every exit and restart)."""
        pattern = re.compile(r"worker process \d+ \(pid (\d+)\) exited with (-?\d+) after")
        for path in sorted(self.directory.glob("worker-*.log")):
            for pid, code in pattern.findall(path.read_text(errors="replace")):
                if int(code) == self.app.POISON_EXIT:
                    self.poison_exits += 1
                elif int(pid) not in self.killed_children:
                    self.crashed.append((int(path.stem.split("-")[1]), int(code)))

    def log_lines(self, text: str) -> int:
        return sum(
            path.read_text(errors="replace").count(text)
            for path in self.directory.glob("worker-*.log")
        )

    def shard_moves(self) -> list[float]:
        """When a worker logged releasing or acquiring a shard."""
        moments = []
        released = f" released {self.worker_class.queue_name}:"
        for path in self.directory.glob("worker-*.log"):
            for line in path.read_text(errors="replace").splitlines():
                if released in line or "acquired (epoch" in line:
                    stamp = datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")
                    moments.append(stamp.timestamp())
        return moments

    def hits(self) -> str:
        """How many hand-over disruptions came within 1 s of a shard moving."""
        moves = self.shard_moves()
        near = sum(any(abs(hit - move) <= 1.0 for move in moves) for hit in self.hand_over_hits)
        return f"{near} of {len(self.hand_over_hits)}"

    def poison_fate(self, records: redis.Redis) -> str:
        poison = self.app.POISON
        deaths = records.llen("chaos:poison")
        exhausted = [i.decode() for i in records.lrange("chaos:exhausted", 0, -1)]
        (dead,) = self.worker_class.queries().morgue_fetch([poison]) or [None]
        queued = self.worker_class.queries().fetch([poison])
        if dead is not None:
            where = f"in the morgue ({dead['error']!r})"
        elif queued:
            where = f"still queued (retry_count {queued[0]['retry_count']})"
        else:
            where = "neither queued nor in the morgue"
        called = "called" if poison in exhausted else "NOT called"
        return (
            f"{where}; performed {deaths} time(s), {self.poison_exits} process(es) ended by it; "
            f"retries_exhausted {called}"
        )

    def findings(self, records: redis.Redis) -> Findings:
        """Read the records of the run (saved to performs.jsonl or steps.jsonl) and check
        them."""
        if self.args.iterating:
            steps = [json.loads(row) for row in records.lrange("chaos:steps", 0, -1)]
            self.save("steps.jsonl", steps)
            return step_findings(steps, self.paused)
        rows = [json.loads(row) for row in records.lrange("chaos:records", 0, -1)]
        self.save("performs.jsonl", rows)
        found = Findings(spans=rows)
        for row in rows:
            found.performed[row["id"]].update(row["vs"])
            found.out_of_order += row["vs"] != sorted(row["vs"])
        found.stale = [json.loads(row) for row in records.lrange("chaos:stale", 0, -1)]
        return found

    def save(self, name: str, rows: list[dict[str, Any]]) -> None:
        with (self.directory / name).open("w") as out:
            out.writelines(json.dumps(row) + "\n" for row in rows)

    def report(self, drain_seconds: float | None) -> None:
        records = redis.Redis.from_url(self.records.url)
        found = self.findings(records)
        rows, seen = found.spans, found.performed
        waits = sorted(row["wait"] for row in rows)
        morgue = self.worker_class.queries().morgue_range_by_id("-", "+", limit=1000)
        others_dead = [job for job in morgue if job["id"] != self.app.POISON]
        buried: dict[str, set[int]] = defaultdict(set)
        for job in others_dead:
            buried[job["id"]].update(payload["v"] for payload, _ in job["payloads"])
        cancelled: dict[str, set[int]] = defaultdict(set)
        for cancel in self.cancels:
            cancelled[cancel.id] |= cancel.versions
        lost = sum(len(self.fed[i] - seen[i] - buried[i] - cancelled[i]) for i in self.fed)
        overlaps, paused_overlaps = self.overlaps(rows)
        stale = found.stale
        refused = int(records.get("chaos:refused") or 0)
        behind = sum(
            int(records.hget(f"chaos:store:{i}", "version") or -1) < max(seen[i] or {-1})
            for i in self.fed
        )
        fatal = self.log_lines("fatal error")
        if self.args.children > 1:
            self.child_exits()
        print(machine())
        children = self.args.children
        print(
            f"{self.args.seconds:.0f} s, {self.args.processes} processes"
            f"{f' (supervisors of {children} children each)' if children > 1 else ''} "
            "without --nodes, "
            f"{self.args.threads} threads each, {self.args.ids} ids, lease TTL {LEASE_TTL:.0f} s"
            + (f", rate limit {self.args.rate:g}/s" if self.args.rate else "")
            + (
                f", iterating (max_perform_seconds {self.worker_class.max_perform_seconds:g} s, "
                f"bursts of up to {self.args.burst})"
                if self.args.iterating
                else ""
            )
        )
        for event, count in sorted(self.events.items()):
            print(f"  {event}: {count}")
        print(f"  payload versions fed: {sum(len(v) for v in self.fed.values())}")
        drained = "did not drain" if drain_seconds is None else f"took {drain_seconds:.1f} s"
        print(f"  performs{' of an id' if self.args.iterating else ''} recorded: {len(rows)}; "
              f"final drain {drained}")  # fmt: skip
        if drain_seconds is None:
            metrics = self.worker_class.metrics()
            print(f"  left after {DRAIN_LIMIT:.0f} s: {metrics['length']} queued, "
                  f"{metrics['busy']} busy")  # fmt: skip
        print(f"  acks refused by Redis's fencing (logged): {self.log_lines('no longer held')}")
        print(f"  most jobs seen in one shard's processing area: {self.most_in_processing} "
              f"(batch size {self.worker_class.batch_size})")  # fmt: skip
        print(f"  hand-over disruptions within 1 s of a shard released or acquired: {self.hits()}")
        if waits:
            print(f"  queue wait (oldest payload of a perform): p50 {quantile(waits, 0.5):.2f} s, "
                  f"p99 {quantile(waits, 0.99):.2f} s, max {waits[-1]:.2f} s")  # fmt: skip
            longest = max(rows, key=lambda row: row["wait"])
            shard = self.worker_class.queue().shard_of(longest["id"])
            print(f"    longest: {longest['id']} (shard {shard}), started "
                  f"{datetime.fromtimestamp(longest['start']):%H:%M:%S.%f} in pid "
                  f"{longest['pid']}")  # fmt: skip
        if self.args.iterating:
            self.report_iterating(records, found)
        print(f"lost payload versions:                 {lost}")
        print(f"versions out of score order in a call: {found.out_of_order}")
        if self.args.iterating:
            print(f"  across performs: performed first below a newer version "
                  f"{found.first_after_newer}; going back other than a re-run "
                  f"{found.gone_back}")  # fmt: skip
        if self.args.cancels:
            self.report_cancels(rows)
        if self.args.workflows:
            self.report_workflows(records, rows, buried)
        print(f"overlapping performs of one id:        {overlaps}")
        print(f"  (more with a perform paused past its lease: {paused_overlaps})")
        print(f"stale writes accepted by the fenced store: {len(stale)}")
        for write in stale[:5]:
            print(f"  {write}")
        if self.args.iterating:
            print(f"  (versions rewritten lower by re-runs: {found.rewound})")
        print(f"fenced writes refused:                 {refused}")
        print(f"ids whose stored version is not their newest performed: {behind}")
        print(f"crashed processes:                     {len(self.crashed)} exited by themselves"
              f"{''.join(f' (worker-{n}: {c})' for n, c in self.crashed)}, "
              f"{fatal} 'fatal error' log lines")  # fmt: skip
        print(f"poison id:                             {self.poison_fate(records)}")
        print(
            f"other ids in the morgue:               {len(others_dead)} "
            f"{[job['id'] for job in others_dead[:5]]} "
            f"({sum(len(v) for v in buried.values())} of their versions in the morgue)"
        )
        for job in others_dead[:3]:
            print(f"  {job['id']}: {job['error']}")
        saved = "step (steps.jsonl)" if self.args.iterating else "perform (performs.jsonl)"
        print(f"logs and every {saved}: {self.directory}")

    def report_cancels(self, rows: list[dict[str, Any]]) -> None:
        """The cancels (--cancels): how many, what they found, and the performs that
        began with a cancelled version after the cancel was heard (must be none)."""
        done = [cancel for cancel in self.cancels if cancel.returned != float("inf")]
        late = 0
        for cancel in done:
            heard = cancel.returned + CANCEL_HEARD
            late += sum(
                row["id"] == cancel.id
                and row["start"] > heard
                and bool(cancel.versions.intersection(row["vs"]))
                and not self.paused(row["pid"], row["start"], row["end"])
                for row in rows
            )
        counted = self.worker_class.metrics().get("cancelled", 0)
        print(f"cancels: {len(done)} returned ({sum(c.found for c in done)} jobs found queued "
              f"or running; {counted} settled as cancelled while running), "
              f"{len(self.cancels) - len(done)} refused")  # fmt: skip
        print(f"cancelled versions performed after the cancel was heard: {late}")

    def report_workflows(
        self, records: redis.Redis, rows: list[dict[str, Any]], buried: dict[str, set[int]]
    ) -> None:
        """The checks of --workflows (see the module's docstring)."""
        callbacks: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for row in records.lrange("chaos:callbacks", 0, -1):
            callback = json.loads(row)
            callbacks[callback["workflow"]].append(callback)
        self.save("callbacks.jsonl", [c for cs in callbacks.values() for c in cs])
        # Each member's performs: (start, end, pid).
        performs: dict[tuple[str, int], list[tuple[float, float, int]]] = defaultdict(list)
        for row in rows:
            for version in row["vs"]:
                performs[(row["id"], version)].append((row["start"], row["end"], row["pid"]))
        buried = defaultdict(set, {i: set(versions) for i, versions in buried.items()})
        (poison,) = self.worker_class.queries().morgue_fetch([self.app.POISON]) or [None]
        if poison is not None:  # in the morgue: its versions are dead members
            buried[self.app.POISON].update(p.get("v") for p, _ in poison["payloads"])
        closed = [opened for opened in self.opened if opened.closed]
        never_closed = [opened for opened in self.opened if not opened.closed]
        once = missing = reruns = duplicates = merged_twice = 0
        again: list[str] = []
        premature = premature_paused = premature_sent_again = 0
        members_lost = members_dead = status_wrong = 0
        wrong_examples: list[str] = []
        for opened in closed:
            calls = sorted(callbacks.get(opened.id, []), key=lambda c: c["start"])
            lost = [m for m in opened.members if not performs[m] and m[1] not in buried[m[0]]]
            members_lost += len(lost)
            dead = sum(m[1] in buried[m[0]] for m in opened.members)
            members_dead += dead
            if not calls:
                missing += 1
                continue
            once += len(calls) == 1
            merged_twice += any(c["payloads"] > 1 for c in calls)
            for before, after in itertools.pairwise(calls):
                lease = "same" if after["fence"] == before["fence"] else "newer"
                again.append(f"{opened.id} {before['pid']}->{after['pid']} {lease} lease "
                             f"+{after['start'] - before['start']:.2f} s")  # fmt: skip
                window = (before["start"] - RECOVERY, before["end"] + LEASE_TTL + 1.0)
                if self.disrupted(*window):
                    reruns += 1
                else:
                    duplicates += 1
            first = calls[0]["start"]
            late = [
                (m, perform)
                for m in opened.members
                for perform in performs[m]
                if perform[1] > first
            ]
            if late:
                if all(self.paused(pid, start, end) for _, (start, end, pid) in late):
                    premature_paused += 1
                elif all(m in opened.sent_again for m, _ in late):
                    premature_sent_again += 1
                else:
                    premature += 1
            status = calls[0]["status"]
            counts = ("pending", "done", "failed", "dead", "discarded")
            total = sum(status[name] for name in counts)
            if (
                total != len(opened.members)
                or status["pending"] + status["failed"] > 0
                or not status["complete"]
                or status["dead"] != dead
                or status["succeeded"] != (dead == 0)
            ):
                status_wrong += 1
                if len(wrong_examples) < 3:
                    wrong_examples.append(
                        f"{opened.id}: {len(opened.members)} members ({dead} dead), status {status}"
                    )
        fired_unclosed = sum(bool(callbacks.get(opened.id)) for opened in never_closed)
        members = sum(len(opened.members) for opened in self.opened)
        per_workflow = members / max(1, len(self.opened))
        merged_ids = sum(
            len(opened.members) - len({job_id for job_id, _ in opened.members})
            for opened in self.opened
        )
        print(f"workflows: {len(self.opened)} opened, {len(closed)} closed, "
              f"{len(never_closed)} left open (open or members refused for long); "
              f"{members} members ({merged_ids} on an id with another member of their "
              f"workflow), {per_workflow:.1f} a workflow")  # fmt: skip
        print(f"on_complete performed exactly once:    {once} of {len(closed)} closed workflows")
        print(f"  missing: {missing}; more than once: {duplicates} with no disruption near "
              f"(duplicates), {reruns} after one (re-runs of a batch not acked); "
              f"callbacks given two payloads: {merged_twice}")  # fmt: skip
        for line in again[:20]:
            print(f"    performed again: {line}")
        print(f"  callbacks of workflows never closed: {fired_unclosed}")
        print(f"premature callbacks:                   {premature}")
        print(f"  (a member's perform ending after it, by a process frozen by SIGSTOP: "
              f"{premature_paused}; of a payload sent again after a refused call: "
              f"{premature_sent_again})")  # fmt: skip
        print(f"members lost:                          {members_lost} "
              f"({members_dead} members dead, in the morgue)")  # fmt: skip
        print(f"callbacks whose status disagrees with the members: {status_wrong}")
        for example in wrong_examples:
            print(f"  {example}")
        if self.poison_workflow is not None:
            self.report_poison_workflow(records, callbacks.get(self.poison_workflow, []))

    def report_poison_workflow(self, records: redis.Redis, calls: list[dict[str, Any]]) -> None:
        """The workflow of the poison job: its callback, once its member is buried."""
        deaths = [json.loads(row)["at"] for row in records.lrange("chaos:poison", 0, -1)]
        if not calls:
            print(f"the poison's workflow {self.poison_workflow}: no callback")
            return
        first = min(call["start"] for call in calls)
        status = calls[0]["status"]
        after = "after" if deaths and first > max(deaths) else "NOT after"
        print(f"the poison's workflow {self.poison_workflow}: callback performed "
              f"{len(calls)} time(s), {after} the poison's last death; status dead "
              f"{status['dead']}, done {status['done']}, "
              f"succeeded {status['succeeded']}")  # fmt: skip

    def disrupted(self, start: float, end: float) -> bool:
        """Whether a disruption of the bench ran between ``start`` and ``end``."""
        return any(a <= end and start <= b for a, b in self.disruptions)

    def report_iterating(self, records: redis.Redis, found: Findings) -> None:
        """The figures of an ``--iterating`` run besides the checks: yields, re-runs, late
        steps, deploys."""
        yields = [json.loads(row) for row in records.lrange("chaos:yields", 0, -1)]
        limit = self.worker_class.max_perform_seconds or 0.0
        timed = sum(entry["after"] >= limit for entry in yields)
        print(f"  steps (payloads performed): {found.steps}, {found.slow} of them slow "
              f"({SLOW_SECONDS:g} s); performed again: {found.repeated}")  # fmt: skip
        print(f"  performs that gave the rest back: {len(yields)} "
              f"({sum(entry['payloads'] for entry in yields)} payloads), {timed} after "
              f"max_perform_seconds, {len(yields) - timed} earlier (asked to stop)")  # fmt: skip
        print(f"  re-runs of a batch not acked: {found.reruns['newer']} under a newer lease, "
              f"{found.reruns['same']} under the same lease")  # fmt: skip
        print(f"  late steps of a process past its lease: {found.late} "
              f"({found.late_paused} by a process frozen by SIGSTOP)")  # fmt: skip
        exits = sorted(self.term_exits)
        if exits:
            print(f"  deployed processes' exit after TERM: p50 {quantile(exits, 0.5):.2f} s, "
                  f"max {exits[-1]:.2f} s ({len(exits)} exited within the grace)")  # fmt: skip

    def close(self) -> None:
        if self.cluster is not None:
            for master in self.cluster.masters:  # a stopped node would not end on SIGTERM
                if master.process is not None and master.process.poll() is None:
                    master.process.send_signal(signal.SIGCONT)
            self.cluster.stop()
        else:
            self.queue.stop()
        self.records.stop()


@dataclass
class Findings:
    """What the records of a run show (see the module's docstring for each check)."""

    #: Each id's versions performed.
    performed: dict[str, set[int]] = field(default_factory=lambda: defaultdict(set))
    #: Each perform of an id: id, start, end, pid, fence, wait (of its oldest payload).
    spans: list[dict[str, Any]] = field(default_factory=list)
    #: Versions out of order within one perform (a plain run: performs out of order).
    out_of_order: int = 0
    #: Versions performed for the first time below a version of the id performed before.
    first_after_newer: int = 0
    #: Performs starting at a version performed before, other than a re-run.
    gone_back: int = 0
    #: Re-runs of an unacked batch, under a ``newer`` or the ``same`` lease.
    reruns: dict[str, int] = field(default_factory=lambda: {"newer": 0, "same": 0})
    #: Steps performed: all, repeats of a version performed before, slow ones.
    steps: int = 0
    repeated: int = 0
    slow: int = 0
    #: Steps under a lower fence than one that performed the id before; of those, by a
    #: process frozen while it ran them.
    late: int = 0
    late_paused: int = 0
    #: Writes the fenced store accepted although a newer version was stored (not by a
    #: re-run), and lower versions a re-run wrote.
    stale: list[dict[str, Any]] = field(default_factory=list)
    rewound: int = 0


def step_findings(
    steps: list[dict[str, Any]], paused: Callable[[int, float, float], bool]
) -> Findings:
    """Check the steps of an ``--iterating`` run, in the order they were written
    (``paused(pid, start, end)``: whether the bench froze ``pid`` meanwhile)."""
    found = Findings(steps=len(steps), slow=sum(step["slow"] for step in steps))
    spans: dict[tuple[str, str], dict[str, Any]] = {}
    #: Per id: the highest version and fence performed, the previous perform that was
    #: not late, and the fenced store's (fence, version).
    high: dict[str, int] = {}
    top_fence: dict[str, int] = {}
    previous: dict[str, dict[str, Any]] = {}
    store: dict[str, tuple[int, int]] = {}
    for step in steps:
        job_id, version, fence = step["id"], step["v"], step["fence"]
        late = fence < top_fence.get(job_id, -1)
        top_fence[job_id] = max(fence, top_fence.get(job_id, -1))
        again = version in found.performed[job_id]
        found.repeated += again
        span = spans.get((step["perform"], job_id))
        if late:
            found.late += 1
            found.late_paused += paused(step["pid"], step["start"], step["end"])
        if span is None:
            span = {key: step[key] for key in ("id", "start", "end", "pid", "fence", "wait")}
            span.update(first=version, last=version, rerun=False)
            spans[(step["perform"], job_id)] = span
            found.spans.append(span)
            if not late:
                before = previous.get(job_id)
                if again and before is not None and version == before["first"]:
                    span["rerun"] = True
                    found.reruns["newer" if fence > before["fence"] else "same"] += 1
                elif again and (before is None or version <= before["last"]):
                    found.gone_back += 1
                elif not again and version < high.get(job_id, -1):
                    found.first_after_newer += 1
                previous[job_id] = span
        else:
            if version <= span["last"]:
                found.out_of_order += 1
            elif not late and not again and version < high.get(job_id, -1):
                found.first_after_newer += 1
            span["end"], span["last"] = step["end"], version
        found.performed[job_id].add(version)
        if not late:
            high[job_id] = max(version, high.get(job_id, -1))
        stored_fence, stored_version = store.get(job_id, (-1, -1))
        if fence >= stored_fence:
            if version < stored_version and span["rerun"]:
                found.rewound += 1
            elif version < stored_version:
                found.stale.append(step)
            store[job_id] = (fence, version)
    return found


def quantile(ordered: list[float], q: float) -> float:
    """The ``q`` quantile of sorted values."""
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    """Run the chaos, drain, check, print."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=180.0)
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--ids", type=int, default=200)
    parser.add_argument(
        "--threads", type=int, default=2, help="per process: several shards each, popped together"
    )
    parser.add_argument(
        "--children",
        type=int,
        default=0,
        help="2 or more: each worker process is a supervisor of that many children "
        "(--processes N); children killed by the bench or by the poison job are restarted "
        "by their supervisor, which frees their leases at once",
    )
    parser.add_argument(
        "--rate", type=float, default=None, help="the worker's rate limit, jobs per second"
    )
    parser.add_argument(
        "--iterating",
        action="store_true",
        help="an IterableWorker of 5-20 ms per payload and max_perform_seconds 0.2, fed in "
        "bursts; deploys among the disruptions",
    )
    parser.add_argument(
        "--burst", type=int, default=40, help="with --iterating: the most versions of one burst"
    )
    parser.add_argument(
        "--groups", type=int, default=0, help="the ids' groups (id n in group n %% N; 0: none)"
    )
    parser.add_argument(
        "--group-cap", type=int, default=0, help="with --groups: Worker.group_concurrency"
    )
    parser.add_argument(
        "--cancels",
        action="store_true",
        help="the feeder also cancels an id about every 0.5 s (Worker.actions().cancel)",
    )
    parser.add_argument(
        "--workflows",
        action="store_true",
        help="the feeder opens workflows of plain updates, each with an on_complete that "
        "records its performs; checks exactly once, none premature, no member lost",
    )
    parser.add_argument(
        "--workflow-count", type=int, default=2000, help="with --workflows: over the run"
    )
    parser.add_argument(
        "--members", type=int, default=50, help="with --workflows: members of a workflow"
    )
    parser.add_argument(
        "--producers", type=int, default=1, help="with --workflows: threads opening them"
    )
    parser.add_argument(
        "--cluster",
        action="store_true",
        help="a 3-master Redis Cluster: masters hang (SIGSTOP 1-4 s) instead of Redis kills",
    )
    args = parser.parse_args()
    if args.workflows and (args.iterating or args.cancels):
        parser.error("--workflows checks the plain worker's performs, without cancels")
    if args.cancels and args.iterating:
        parser.error("--cancels checks the performs of the plain worker: not with --iterating")
    run = Run(args, Path(tempfile.mkdtemp(prefix="lowkiq-chaos-")))
    try:
        for _ in range(args.processes):
            run.start_worker()
        feeder = threading.Thread(target=run.feed, daemon=True)
        watcher = threading.Thread(target=run.watch, daemon=True)
        feeder.start()
        watcher.start()
        started = time.monotonic()
        deadline = started + args.seconds
        poisoned = False
        while time.monotonic() < deadline:
            time.sleep(random.uniform(1.0, 3.0))
            if not poisoned and time.monotonic() > started + args.seconds / 4:
                run.feed_poison()
                poisoned = True
            began = time.time()
            run.chaos()
            run.disruptions.append((began, time.time()))
        run.feeding = False
        feeder.join()
        drain_seconds = run.drain()
        run.watching = False
        watcher.join()
        run.stop()
        run.report(drain_seconds)
    finally:
        with run.lock:
            workers = list(run.workers)
        for worker in workers:
            if worker.process.poll() is None:
                worker.process.kill()
        run.close()


if __name__ == "__main__":
    main()
