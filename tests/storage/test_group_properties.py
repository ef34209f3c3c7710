"""Groups under random work (SPEC §3, §4 and §11 "Groups"): random mixes of groups,
ids, merges, retries and crashes, on one server and on the 3-master cluster, checked
against a plain model of the queue.

Every id's payloads are performed (acked) once each, in score order; a shard never
has two batches in flight; an id keeps its group while queued (another group is
refused and writes nothing); and, when every pop takes one job, the pops take due
jobs in turn across groups: while group ``b`` is due and waits, another group ``a``
is taken at most ``1 + weight(a) / weight(b)`` times.

That bound follows from the start-time fair queue of ``lowkiq/storage/lua/_common.lua``:
the group served has the smallest turn, a group joins at the smallest turn and a served
group's turn moves on by ``1 / weight``, so every due group's turn is at most
``1 / its weight`` above the smallest.  A group that runs out of due jobs and comes back
is given no turn it has not had: it keeps its turn until the turn comes round, and a
queued id a retry or restore merges into keeps its group in the turns.  A queue that
lets it start again just after the smallest turn, ahead of a group that waited, breaks
the bound.  It
is checked for pops of one job only: a pop of several reads as many groups of the
turns as it may take jobs, and one of those whose next job is not due takes up a
place without giving a job, so the pop may pass over a group whose turn it was.
"""

from __future__ import annotations

import math
import sys
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from storage_support import NOW, retry_in, run_machine

import lowkiq
from lowkiq.errors import InvalidJob
from lowkiq.storage.enqueueing import shard_of
from lowkiq.storage.queue import PoppedJob, Queue
from tests.leasing import ack, fail, pop, restore

SHARDS = 2
#: Each id's usual group (``None``: the default group, ``""`` in the model); a, b, c,
#: h and i are in shard 1, d, e, f, g and l in shard 0.
HOME = {
    "a": "A", "b": "A", "c": "B", "h": "C", "i": None,
    "d": "A", "e": "B", "f": "B", "g": "C", "l": None,
}  # fmt: skip
IDS = tuple(HOME)
GROUPS = (None, "A", "B", "C")
#: Seconds from the machine's clock to a job's perform_in.
DELAYS = (-30, -1, 0, 0, 5, 40)
#: High enough that no job dies: a failed batch is always retried.
MAX_RETRY_COUNT = 1000
#: The machine's clock starts before or after Redis's, which the push reads: every
#: job is then due (past) or not due (future) when it is pushed, and the pops, fails
#: and restores, which are given the machine's clock, sort it out.
PAST, FUTURE = 1_700_000_000, 4_000_000_000


class FairWorker(lowkiq.Worker):
    shards_count = SHARDS


class WeightedWorker(lowkiq.Worker):
    shards_count = SHARDS
    group_weights = {"A": 2, "B": 0.5}


@st.composite
def new_job(draw: st.DrawFn) -> tuple[str, str | None, int]:
    """An id, its group (mostly its usual one: others are refused while it is queued)
    and a delay."""
    job_id = draw(st.sampled_from(IDS))
    group = HOME[job_id] if draw(st.integers(0, 3)) else draw(st.sampled_from(GROUPS))
    return job_id, group, draw(st.sampled_from(DELAYS))


def snapshot(client: redis.Redis) -> dict[bytes, bytes | None]:
    return {key: client.dump(key) for key in client.scan_iter(count=1000)}


@dataclass
class Job:
    """A queued (or popped) job of the model; each payload is its own score."""

    scores: set[int]
    perform_in: int
    retry_count: int
    group: str  # "": the default group


@dataclass
class Shard:
    queued: dict[str, Job] = field(default_factory=dict)
    #: The batch in flight, or ``None``.
    batch: list[tuple[str, Job]] | None = None
    #: Each group due since it was last taken (or became due): how many times each
    #: other group was taken since.
    waiting: dict[str, Counter[str]] = field(default_factory=dict)
    #: What happened to the shard's batches, for a failure's message.
    log: list[str] = field(default_factory=list)

    def due(self, now: int) -> dict[str, list[tuple[int, str]]]:
        """The due jobs by group: (perform_in, id)."""
        due: dict[str, list[tuple[int, str]]] = {}
        for job_id, job in self.queued.items():
            if job.perform_in <= now:
                due.setdefault(job.group, []).append((job.perform_in, job_id))
        return due

    def settle_waiting(self, now: int) -> None:
        """A group no longer due stops waiting; a group due starts waiting."""
        due = self.due(now)
        for group in list(self.waiting):
            if group not in due:
                del self.waiting[group]
        for group in due:
            self.waiting.setdefault(group, Counter())


class GroupMachine(RuleBasedStateMachine):
    """perform_async with groups, pop, ack, fail and restore, on Redis and on the model."""

    client: redis.Redis

    def __init__(self) -> None:
        super().__init__()
        self.client.flushall()
        self.shards = [Shard() for _ in range(SHARDS)]
        self.enqueued: dict[str, list[int]] = {}
        self.performed: dict[str, list[int]] = {}
        self.score = 0

    @initialize(
        worker=st.sampled_from([FairWorker, WeightedWorker]),
        clock=st.sampled_from([PAST, FUTURE]),
        batch_size=st.sampled_from([1, 4]),
    )
    def start(self, worker: type[lowkiq.Worker], clock: int, batch_size: int) -> None:
        """``batch_size``: the most jobs a pop takes (the groups' turns are checked
        with 1)."""
        lowkiq.settings.workers = [worker]
        self.worker = worker
        self.queue = worker.queue()
        self.clock = clock
        self.batch_size = batch_size

    def weight(self, group: str) -> float:
        return float(self.worker.group_weights.get(group, 1))

    def shard(self, job_id: str) -> Shard:
        return self.shards[shard_of(job_id, SHARDS)]

    # -- enqueue --------------------------------------------------------------

    @rule(jobs=st.lists(new_job(), min_size=1, max_size=3))
    def enqueue(self, jobs: list[tuple[str, str | None, int]]) -> None:
        call: list[dict[str, Any]] = []
        for job_id, group, delay in jobs:
            self.score += 1
            job = {"id": job_id, "payload": self.score, "score": self.score}
            job["perform_in"] = self.clock + delay
            if group is not None:
                job["group"] = group
            call.append(job)
        if self.refused(call):
            before = snapshot(self.client)
            with pytest.raises(InvalidJob) as raised:
                self.worker.perform_async(call)
            assert raised.value.field == "group"
            assert snapshot(self.client) == before
            return
        self.worker.perform_async(call)
        merged: dict[str, Job] = {}  # the call's jobs of one id merge into one
        for job in call:
            entry = merged.setdefault(job["id"], Job(set(), job["perform_in"], -1, ""))
            entry.scores.add(job["score"])
            entry.group = job.get("group", entry.group)
        for job_id, job in merged.items():
            queued = self.shard(job_id).queued.get(job_id)
            if queued is None:
                self.shard(job_id).queued[job_id] = job
            else:  # SPEC §3 rule 2; the queued group stays
                queued.scores |= job.scores
            self.enqueued.setdefault(job_id, []).extend(job.scores)

    def refused(self, call: list[dict[str, Any]]) -> bool:
        """Whether a job names a group other than an earlier job of the call gave its
        id, or other than its id's queued group."""
        given: dict[str, str] = {}
        for job in call:
            if "group" in job and given.setdefault(job["id"], job["group"]) != job["group"]:
                return True
        for job_id, group in given.items():
            queued = self.shard(job_id).queued.get(job_id)
            if queued is not None and queued.group != group:
                return True
        return False

    # -- pop ------------------------------------------------------------------

    @rule(
        shard=st.integers(0, SHARDS - 1),
        limit=st.integers(1, 4),
        advance=st.sampled_from([0, 0, 1, 10, 60]),
    )
    def pop(self, shard: int, limit: int, advance: int) -> None:
        self.clock += advance
        self.pop_and_check(shard, min(limit, self.batch_size))

    def pop_and_check(self, shard: int, limit: int) -> None:
        model = self.shards[shard]
        popped = pop(self.queue, shard, limit, now=self.clock)
        if model.batch is not None:
            assert popped is None, "a shard with a batch in flight gave another"
            return
        assert popped is not None
        model.settle_waiting(self.clock)
        batch = []
        for job in popped:
            expected = model.queued.get(job.id)
            assert expected is not None, f"{job.id!r} is not queued"
            self.take(model, job.id, expected)
            assert (job.payloads, job.retry_count, job.perform_in) == (
                sorted(expected.scores),
                expected.retry_count,
                expected.perform_in,
            )
            batch.append((job.id, model.queued.pop(job.id)))
        if batch:
            model.log.append(f"@{self.clock} popped {[(i, j.group) for i, j in batch]}")
        if len(popped) < limit:
            assert model.due(self.clock) == {}, "a pop left due jobs behind"
        model.batch = batch or None
        model.settle_waiting(self.clock)

    def take(self, model: Shard, job_id: str, job: Job) -> None:
        """The pop takes ``job``: it must be due, the oldest due of its group, and its
        group's turn."""
        due = model.due(self.clock)
        group = job.group
        assert job.perform_in <= self.clock, f"{job_id!r} is not due"
        assert job.perform_in == min(due[group])[0], f"{job_id!r} is not its group's oldest"
        model.settle_waiting(self.clock)
        if self.batch_size > 1:
            return
        for other, taken in model.waiting.items():
            if other == group:
                continue
            taken[group] += 1
            bound = math.floor(1 + self.weight(group) / self.weight(other))
            assert taken[group] <= bound, (
                f"group {group!r} taken {taken[group]} times while group {other!r} was "
                f"due and waiting (at most {bound}; weights {self.worker.group_weights}); the "
                f"shard's batches so far: {model.log}"
            )
        model.waiting[group] = Counter()

    # -- the batch ends ------------------------------------------------------

    def busy(self) -> list[int]:
        return [shard for shard, model in enumerate(self.shards) if model.batch]

    @precondition(busy)
    @rule(which=st.integers(0, SHARDS - 1), outcome=st.sampled_from(["ack", "fail", "crash"]))
    def finish(self, which: int, outcome: str) -> None:
        """A batch in flight is performed, fails, or its process dies."""
        busy = self.busy()
        shard = busy[which % len(busy)]
        model = self.shards[shard]
        batch = model.batch or []
        if outcome == "ack":
            self.ack_batch(shard)
            return
        if outcome == "fail":
            popped = [PoppedJob(job_id, job.retry_count) for job_id, job in batch]
            dead = fail(
                self.queue, shard, popped, "boom", retry_in, MAX_RETRY_COUNT, now=self.clock
            )
            assert dead == []
            for job_id, job in batch:  # SPEC §4: due later, rule 3 of §3
                retry_count = job.retry_count + 1
                at = self.clock + int(retry_in(retry_count))
                self.merge_back(model, job_id, Job(job.scores, at, retry_count, job.group))
        else:  # the process died: the shard's next owner restores the batch
            assert restore(self.queue, shard, now=self.clock) == len(batch)
            for job_id, job in batch:
                self.merge_back(model, job_id, job)
            # The batch was not performed: those of its groups that left the turns
            # rejoin them just after the smallest (a turn given back), so the groups
            # waiting start counting again.
            model.waiting.clear()
        model.log.append(outcome)
        model.batch = None
        model.settle_waiting(self.clock)

    def merge_back(self, model: Shard, job_id: str, job: Job) -> None:
        """A job of the batch returns onto the queue: rule 3 of §3, the queued group
        staying."""
        queued = model.queued.get(job_id)
        if queued is not None:
            job = Job(queued.scores | job.scores, job.perform_in, job.retry_count, queued.group)
        model.queued[job_id] = job

    def ack_batch(self, shard: int) -> None:
        model = self.shards[shard]
        batch = model.batch or []
        assert ack(self.queue, shard) == len(batch)
        for job_id, job in batch:
            performed = self.performed.setdefault(job_id, [])
            for score in sorted(job.scores):
                assert not performed or performed[-1] < score, (
                    f"{job_id!r}: payload {score} performed after {performed}"
                )
                performed.append(score)
        if batch:
            model.log.append("ack")
        model.batch = None

    # -- checks -----------------------------------------------------------------

    @invariant()
    def storage_equals_the_model(self) -> None:
        if not hasattr(self, "worker"):
            return
        queries = self.worker.queries()
        stored = {job["id"]: job for job in queries.range_by_id("-", "+", limit=100)}
        queued = {job_id: job for model in self.shards for job_id, job in model.queued.items()}
        assert set(stored) == set(queued)
        for job_id, job in queued.items():
            found = stored[job_id]
            assert [payload for payload, _ in found["payloads"]] == sorted(job.scores)
            assert (found["perform_in"], found["retry_count"], found.get("group", "")) == (
                job.perform_in,
                job.retry_count,
                job.group,
            )
        busy = sorted((job["id"], job.get("group", "")) for job in queries.processing_data())
        assert busy == sorted(
            (job_id, job.group) for model in self.shards for job_id, job in model.batch or []
        )

    def teardown(self) -> None:
        """Drain the queue (advancing the clock) and check every payload was performed
        once; not after a step that failed (its error is the one to report)."""
        if sys.exc_info()[0] is not None or not hasattr(self, "worker"):
            return
        for _ in range(500):
            for shard in range(SHARDS):
                self.ack_batch(shard)
                self.pop_and_check(shard, self.batch_size)
            queued = [job for model in self.shards for job in model.queued.values()]
            if not queued and not any(model.batch for model in self.shards):
                break
            if not any(model.due(self.clock) for model in self.shards) and queued:
                self.clock = max(self.clock, min(job.perform_in for job in queued))
        else:
            pytest.fail("the queue did not drain")
        assert self.performed == {job_id: sorted(s) for job_id, s in self.enqueued.items()}


def test_groups_perform_every_payload_once_in_order_and_in_turn(redis_client: redis.Redis) -> None:
    GroupMachine.client = redis_client
    # Not shrunk: an example is some hundred Redis round trips, and shrinking a failure
    # takes minutes (the suite has ten).  A failure's message carries the shard's
    # batches; shrink one by hand with shrink=True.
    run_machine(GroupMachine, max_examples=60, shrink=False)


# -- the smallest cases the machine found -------------------------------------


def test_a_group_given_one_job_at_a_time_does_not_starve_a_groups_backlog(
    worker: type[lowkiq.Worker], queue: Queue
) -> None:
    """Popping one job at a time: group A is due all along, and the default group is
    given a job each time its last one was popped.  A's turn comes within three pops."""
    worker.perform_async([{"id": f"a{n}", "group": "A", "perform_in": NOW} for n in range(4)])
    order = []
    for n in range(6):
        worker.perform_async([{"id": f"x{n}", "perform_in": NOW}])
        [job] = pop(queue, 0, 1, now=NOW)
        order.append(job.id)
        ack(queue, 0)
    assert all(any(i.startswith("a") for i in order[n : n + 3]) for n in range(4)), order


def test_a_failed_job_returns_into_its_queued_ids_group(
    worker: type[lowkiq.Worker], queue: Queue
) -> None:
    """d is queued again, in the default group, while its batch of group A runs; the
    failed job joins the queued one, which keeps its group (as it does when the shard
    holds jobs of other groups)."""
    worker.perform_async([{"id": "d", "group": "A", "perform_in": NOW}])
    batch = pop(queue, 0, 1, now=NOW)
    worker.perform_async([{"id": "d", "perform_in": NOW}])
    fail(queue, 0, batch, "boom", retry_in, worker.max_retry_count, now=NOW)
    [queued] = worker.queries().fetch(["d"])
    assert "group" not in queued, queued
