"""Property: whatever the workflows, merges, outcomes, restores and lost relays, every
workflow's callbacks fire exactly once, never before its last member ended, with the
counts of what happened to its members, and jobs held ``after=`` workflows run once when
all of them succeeded (else stay held); on one server and on the 3-master cluster.

Hypothesis draws workflows (members over a few ids of two queues, merging with each
other and with payloads of no workflow), a program of steps (drain a queue, crash a
process holding a batch, run the callbacks, cancel a workflow), the outcome of every
batch (success; raise for a retry, the oldest payload to the morgue on a second failure
in a row; ``Kill``; ``Discard``; ``Snooze``; ``BatchFailed`` naming some ids with their
own fates; ``yield_rest``) and what each relay does (relays; is lost before it starts; or
tells the workflows and is lost before it fires callbacks or deletes its records).  A model of the
stored payloads follows each batch: it says what ``perform`` must get, and each member's
fate.  At the end everything drains, the sweep runs, and each workflow must have had one
``on_complete`` (and one ``on_success`` when none of its members died and it was not
cancelled) with its counts.
"""

from __future__ import annotations

import itertools
import random
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lowkiq
from lowkiq.clients.connection import Client
from lowkiq.ownership import leases
from lowkiq.testing import drain
from lowkiq.workflows import relay, relayer
from tests.both_redis import server_or_cluster_client
from tests.workflows.workflow_support import Done, Success, status_dict

__all__ = ["server_or_cluster_client"]  # the redis_client fixture: a server, then a cluster

IDS = ("i0", "i1", "i2")
MAX_RETRY_COUNT = 1
MAX_RESTORES = 2
VALUES = (0, 1, 2, 3)


class Items(lowkiq.Worker):
    """Members in three shards; an id failing a second time in a row sends its oldest
    payload to the morgue."""

    shards_count = 3
    batch_size = 2
    max_retry_count = MAX_RETRY_COUNT
    max_restores = MAX_RESTORES

    @classmethod
    def retry_in(cls, retry_count: int) -> float:
        return 3600.0

    @classmethod
    def perform(cls, payloads_by_id: dict[str, list[Any]]) -> None:
        RUN.perform(cls, payloads_by_id)


class Parts(Items):
    """Members of a second queue, in two shards."""

    shards_count = 2
    batch_size = 3


WORKERS: dict[str, type[Items]] = {"Items": Items, "Parts": Parts}


class Later(Done):
    """Jobs held ``after=`` workflows: records each perform."""

    shards_count = 2
    calls: ClassVar[list[tuple[str, list[Any]]]] = []


@dataclass
class Run:
    """One example: the model of the stored payloads, what the members became, what the
    callbacks got, and the outcomes drawn for its batches and relays."""

    #: The outcomes of the batches, in turn (drawn up front: what ran depends on timing).
    outcomes: Iterator[str] = field(default_factory=lambda: itertools.cycle(["done"]))
    #: What the relays do, in turn.
    relays: Iterator[str] = field(default_factory=lambda: itertools.cycle(["relay"]))
    #: The other choices (ids a BatchFailed names, their fates, the id that yields).
    rng: random.Random = field(default_factory=random.Random)
    #: (queue, id) -> the stored payloads queued or running: (value, workflow or None).
    live: dict[tuple[str, str], set[tuple[int, str | None]]] = field(default_factory=dict)
    #: (workflow, queue, id, value) -> p, f, d, x or c.
    members: dict[tuple[str, str, str, int], str] = field(default_factory=dict)
    #: (queue, id) -> how many times a crashed batch holding it was restored since it
    #: last ran to an end (a yield is no end).
    restores: dict[tuple[str, str], int] = field(default_factory=dict)
    #: (queue, id) -> its retry_count (-1: never failed since it last ended).
    retry_counts: dict[tuple[str, str], int] = field(default_factory=dict)
    #: A source's rank: an equal payload of a smaller rank has the smaller score (the
    #: oldest), so the one a death at max_retry_count takes is known.
    rank: dict[str | None, int] = field(default_factory=lambda: {None: 0})
    #: When set, every batch succeeds and every relay goes through.
    finishing: bool = False
    #: Workflows whose state said complete when fire() was called.
    fired: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    workflows: list[str] = field(default_factory=list)
    cancelled: set[str] = field(default_factory=set)
    #: (queue, shard) -> the ids a crashed process left in its processing area.
    crashed: dict[tuple[str, int], set[str]] = field(default_factory=dict)

    ended: ClassVar[frozenset[str]] = frozenset("dxc")

    def perform(self, worker: type[Items], payloads_by_id: dict[str, list[Any]]) -> None:
        queue = worker.queue_name
        for job_id, payloads in payloads_by_id.items():
            expected = sorted({value for value, _ in self.live.get((queue, job_id), set())})
            if payloads != expected:
                self.problems.append(f"{queue}:{job_id} performed {payloads}, stored {expected}")
        outcome = "done" if self.finishing else next(self.outcomes)
        fates = {job_id: "d" for job_id in payloads_by_id}
        raised: BaseException | None = None
        yielded: tuple[str, list[Any]] | None = None
        if outcome == "retry":
            fates = dict.fromkeys(payloads_by_id, "f")
            raised = RuntimeError("retry")
        elif outcome == "kill":
            fates = dict.fromkeys(payloads_by_id, "x")
            raised = lowkiq.Kill("dead")
        elif outcome == "discard":
            fates = dict.fromkeys(payloads_by_id, "c")
            raised = lowkiq.Discard("dropped")
        elif outcome == "snooze":
            fates = dict.fromkeys(payloads_by_id, "s")
            raised = lowkiq.Snooze(3600)
        elif outcome == "batch_failed":
            ids = sorted(payloads_by_id)
            chosen = self.rng.sample(ids, self.rng.randint(1, len(ids)))
            named = {job_id: self.rng.choice("fxcs") for job_id in chosen}
            if named:
                exceptions = {
                    "f": RuntimeError("retry"),
                    "x": lowkiq.Kill(),
                    "c": lowkiq.Discard(),
                    "s": lowkiq.Snooze(3600),
                }
                fates.update(named)
                raised = lowkiq.BatchFailed({i: exceptions[f] for i, f in named.items()})
        elif outcome == "yield":
            candidates = [
                job_id for job_id, payloads in payloads_by_id.items() if len(payloads) > 1
            ]
            if candidates:
                job_id = self.rng.choice(sorted(candidates))
                yielded = (job_id, payloads_by_id[job_id][1:])
        for job_id, fate in fates.items():
            keep = set(yielded[1]) if yielded and yielded[0] == job_id else set()
            self.settle(queue, job_id, fate, keep)
        if yielded is not None:
            lowkiq.current_batch().yield_rest(*yielded)
        if raised is not None:
            raise raised

    def settle(self, queue: str, job_id: str, fate: str, keep: set[int]) -> None:
        """The stored payloads of an id end as ``fate`` (but those of ``keep``, given
        back): the model's members too."""
        entries = self.live.get((queue, job_id), set())
        if not keep:
            self.restores.pop((queue, job_id), None)
        if fate == "s":  # due again later, as it was: no retry counted, no member ends
            return
        if fate == "f":
            retry_count = self.retry_counts.get((queue, job_id), -1) + 1
            self.retry_counts[(queue, job_id)] = retry_count
            if retry_count >= MAX_RETRY_COUNT:  # the oldest payload dies, the rest go on
                oldest = min(entries, key=lambda entry: (entry[0], self.rank[entry[1]]))
                self.end(queue, job_id, oldest, "x")
                self.retry_counts[(queue, job_id)] = -1
        for value, workflow_id in sorted(entries, key=str):
            if value in keep:
                continue
            if workflow_id is not None:
                key = (workflow_id, queue, job_id, value)
                if self.members[key] not in self.ended:
                    self.members[key] = fate
            if fate in self.ended:
                entries.discard((value, workflow_id))
        if not entries:
            self.retry_counts.pop((queue, job_id), None)

    def restored(self, queue: str, shard: int) -> None:
        """The next owner of ``shard`` restores the batch a crash left there: an id
        restored :data:`MAX_RESTORES` times goes to the morgue, whole."""
        for job_id in sorted(self.crashed.pop((queue, shard), set())):
            count = self.restores.get((queue, job_id), 0) + 1
            self.restores[(queue, job_id)] = count
            if count >= MAX_RESTORES:
                for entry in sorted(self.live.get((queue, job_id), set()), key=str):
                    self.end(queue, job_id, entry, "x")
                self.restores.pop((queue, job_id))
                self.retry_counts.pop((queue, job_id), None)

    def drain(self, worker: type[Items], future: bool) -> None:
        """``drain(worker)``: its shards taken (their crashed batches restored first)."""
        for queue, shard in sorted(self.crashed):
            if queue == worker.queue_name:
                self.restored(queue, shard)
        drain(worker, future=future)

    def end(self, queue: str, job_id: str, entry: tuple[int, str | None], fate: str) -> None:
        """One stored payload ends as ``fate``."""
        self.live[(queue, job_id)].discard(entry)
        value, workflow_id = entry
        if (
            workflow_id is not None
            and self.members[(workflow_id, queue, job_id, value)] not in "dxc"
        ):
            self.members[(workflow_id, queue, job_id, value)] = fate

    def cancel(self, workflow_id: str) -> int:
        """The workflow's queued payloads are deleted (those of a crashed batch are not
        queued): how many.  It completes now: every member not ended is discarded (one
        running still runs, but is not waited for)."""
        running = {(q, i) for (q, _), ids in self.crashed.items() for i in ids}
        dropped = 0
        for (queue, job_id), entries in self.live.items():
            if (queue, job_id) in running:
                continue
            for value, source in sorted(entries, key=str):
                if source == workflow_id:
                    entries.discard((value, source))
                    self.members[(source, queue, job_id, value)] = "c"
                    dropped += 1
        for key, state in self.members.items():
            if key[0] == workflow_id and state not in self.ended:
                self.members[key] = "c"
        self.cancelled.add(workflow_id)
        return dropped

    def counts(self, workflow_id: str) -> dict[str, int]:
        states = [s for (w, *_), s in self.members.items() if w == workflow_id]
        return {
            "done": states.count("d"),
            "failed": states.count("f"),
            "dead": states.count("x"),
            "discarded": states.count("c"),
            "pending": states.count("p"),
        }


RUN = Run()

OUTCOMES = st.sampled_from(
    ["done", "done", "retry", "kill", "discard", "snooze", "batch_failed", "yield"]
)

ENQUEUE = st.tuples(st.sampled_from(sorted(WORKERS)), st.sampled_from(IDS), st.sampled_from(VALUES))
#: Per workflow, its enqueues (worker, id, value); then the enqueues of no workflow.
WORKFLOWS = st.lists(st.lists(ENQUEUE, min_size=0, max_size=6), min_size=1, max_size=3)
OUTSIDE = st.lists(ENQUEUE, max_size=3)
STEP = st.one_of(
    st.tuples(st.just("drain"), st.sampled_from(sorted(WORKERS)), st.booleans()),
    st.tuples(st.just("crash"), st.sampled_from(sorted(WORKERS)), st.integers(0, 2)),
    st.tuples(st.just("callbacks"), st.just(""), st.just(0)),
    st.tuples(st.just("cancel"), st.just(""), st.integers(0, 2)),
)
RELAYS = st.sampled_from(["relay", "relay", "lost", "settled, then lost"])


def relay_drawing(client: Client, shards: list[tuple[str, int]]) -> int:
    """The relayer's relay, or a crash of it (drawn)."""
    choice = "relay" if RUN.finishing else next(RUN.relays)
    if choice == "relay":
        return relay.relay_many(client, shards)
    if choice == "settled, then lost":  # told the workflows, crashed before fire and HDEL
        for queue_name, shard in shards:
            box = relay.read_outbox(client, queue_name, shard)
            for (workflow_id, instance), records in box.records.items():
                relay.store.settle(client, workflow_id, records, instance)
    return 0


def fire_checked(client: Client, workflow_id: str, completed: bool = False) -> bool:
    """``relay.fire``, first checking that a workflow said complete has no member left."""
    state = relay.store.read_state(client, workflow_id)
    if state is not None and state.get("status") == "complete":
        left = {k: v for k, v in RUN.members.items() if k[0] == workflow_id and v not in "dxc"}
        if left:
            RUN.problems.append(f"{workflow_id} complete with members left: {left}")
    return REAL_FIRE(client, workflow_id, completed)


REAL_FIRE = relay.fire


def crash(worker: type[Items], shard: int) -> None:
    """A process takes ``shard`` (restoring what a crash left there), pops a batch and
    dies (its lease lapses)."""
    queue = worker.queue()
    shard %= worker.shards_count
    lease, _, _ = leases.acquire(queue, shard, f"crashed-{uuid.uuid4().hex[:6]}", 30)
    assert lease is not None
    RUN.restored(worker.queue_name, shard)  # (the acquisition restored what a crash left)
    popped = queue.pop(shard, lease.token, worker.batch_size)
    queue.client.delete(queue.keys.lease(shard))
    RUN.crashed[(worker.queue_name, shard)] = {job.id for job in popped.jobs}


def flush(client: Client) -> None:
    """Empty the Redis (every master of a cluster) for the next example."""
    if isinstance(client, redis.RedisCluster):
        client.flushall(target_nodes=redis.RedisCluster.PRIMARIES)
    else:
        client.flushall()


@pytest.fixture
def patched(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Relays on the test's thread only (drain flushes them), each drawn; fire checked."""
    monkeypatch.setattr(
        relayer.RELAYER,
        "notify",
        lambda queue_name, shard: relayer.RELAYER._dirty.add((queue_name, shard)),
    )
    monkeypatch.setattr(relayer, "relay_many", relay_drawing)
    monkeypatch.setattr(relay, "fire", fire_checked)
    yield


@settings(
    max_examples=40,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    workflows=WORKFLOWS,
    outside=OUTSIDE,
    steps=st.lists(STEP, max_size=8),
    outcomes=st.lists(OUTCOMES, min_size=1, max_size=12),
    relays=st.lists(RELAYS, min_size=1, max_size=6),
    seed=st.integers(0, 2**32),
    afters=st.lists(st.lists(st.integers(0, 2), min_size=1, max_size=3), max_size=2),
)
def test_callbacks_fire_once_after_the_last_member_with_its_counts(
    redis_client: Client,
    patched: None,
    workflows: list[list[tuple[str, str, int]]],
    outside: list[tuple[str, str, int]],
    steps: list[tuple[str, str, int]],
    outcomes: list[str],
    relays: list[str],
    seed: int,
    afters: list[list[int]],
) -> None:
    global RUN
    flush(redis_client)
    relayer.RELAYER._dirty.clear()
    Done.calls, Success.calls, Later.calls = [], [], []
    RUN = Run(itertools.cycle(outcomes), itertools.cycle(relays), random.Random(seed))
    run = RUN
    prefix = uuid.uuid4().hex[:6]

    def enqueue(source: str | None, worker: str, job_id: str, value: int) -> None:
        score = value + run.rank[source] / 1000
        WORKERS[worker].perform_async([{"id": job_id, "payload": value, "score": score}])
        run.live.setdefault((worker, job_id), set()).add((value, source))
        if source is not None:
            run.members.setdefault((source, worker, job_id, value), "p")

    for worker, job_id, value in outside[: len(outside) // 2]:
        enqueue(None, worker, job_id, value)
    for number, enqueues in enumerate(workflows):
        workflow_id = f"{prefix}-w{number}"
        run.workflows.append(workflow_id)
        run.rank[workflow_id] = number + 1
        with lowkiq.Workflow(workflow_id, on_complete=Done, on_success=Success, payload=number):
            for worker, job_id, value in enqueues:
                enqueue(workflow_id, worker, job_id, value)
    for worker, job_id, value in outside[len(outside) // 2 :]:
        enqueue(None, worker, job_id, value)
    # Calls held after=: each runs once when all its workflows succeeded, else stays held.
    held_after = [
        list(dict.fromkeys(run.workflows[n % len(run.workflows)] for n in after))
        for after in afters
    ]
    for number, after in enumerate(held_after):
        Later.perform_async([{"id": f"h{number}", "payload": number}], after=after)

    for kind, worker, number in steps:
        if kind == "drain":
            run.drain(WORKERS[worker], future=bool(number))
        elif kind == "cancel":
            workflow_id = run.workflows[number % len(run.workflows)]
            # (A complete workflow stays as it was, succeeded or not; one whose last
            # members ended but were not told yet is cancelled.)
            ref = lowkiq.workflow(workflow_id)
            before = ref.status()
            if not before.complete:
                expected = run.cancel(workflow_id)
                assert ref.cancel() == expected
            else:
                assert ref.cancel() == 0
                assert ref.status() == before
        elif kind == "crash":
            crash(WORKERS[worker], number)
        else:
            drain(Done)
            drain(Success)
            drain(Later)
        assert run.problems == []

    run.finishing = True
    for _ in range(3):  # a batch restored by a drain of another queue's: every queue again
        for worker_class in WORKERS.values():
            run.drain(worker_class, future=True)
    redis_client.delete(relay.SWEEP_LOCK)
    relay.sweep(redis_client, time.time() + 3600)  # what the lost relays left
    for _ in range(2):
        drain(Done)
        drain(Success)
        drain(Later)
        redis_client.delete(relay.SWEEP_LOCK)
        relay.sweep(redis_client, time.time() + 3600)  # nothing more fires
    assert run.problems == []

    assert all(not entries for entries in run.live.values())
    done_calls = sorted(Done.calls)
    success_calls = sorted(Success.calls)
    expected_done: list[tuple[str, list[Any]]] = []
    expected_success: list[tuple[str, list[Any]]] = []
    for number, workflow_id in enumerate(run.workflows):
        counts = run.counts(workflow_id)
        assert counts["pending"] == counts["failed"] == 0
        body = {
            "workflow": workflow_id,
            "payload": number,
            "status": status_dict(
                done=counts["done"], dead=counts["dead"], discarded=counts["discarded"]
            ),
        }
        expected_done.append((workflow_id, [body]))
        succeeded = counts["dead"] == 0 and workflow_id not in run.cancelled
        body["status"]["succeeded"] = succeeded
        if succeeded:
            expected_success.append((workflow_id, [body]))
        assert lowkiq.workflow(workflow_id).status() == lowkiq.WorkflowStatus(
            done=counts["done"],
            dead=counts["dead"],
            discarded=counts["discarded"],
            complete=True,
            succeeded=succeeded,
        )
    assert done_calls == sorted(expected_done)
    assert success_calls == sorted(expected_success)
    succeeded_ids = {workflow_id for workflow_id, _ in expected_success}
    expected_later = []
    for number, after in enumerate(held_after):
        waiting = [workflow_id for workflow_id in after if workflow_id not in succeeded_ids]
        if not waiting:
            expected_later.append((f"h{number}", [number]))
        else:  # held in the first of its workflows that did not succeed
            held = lowkiq.workflow(waiting[0]).held()
            assert [call.jobs[0][0] for call in held].count(f"h{number}") == 1
    assert sorted(Later.calls) == expected_later
