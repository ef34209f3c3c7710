"""The runtime under Redis faults: for scripted scenarios (acks riding on pops, several
batches a pop, failures, partial failures, yields, burials, cancels, group claims, a
hand-over), every call of the dispatcher is failed in turn, in every way of
:mod:`tests.runtime.faults`, and after each run:

* every enqueued payload was performed at least once, or is dead (nothing was acked
  unperformed, nothing lost); a cancelled one was never performed, nor is it dead;
* a shard never ran two batches at once;
* the dispatcher never raised anything but a Redis error (the process would live on).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis

import lowkiq
from lowkiq.clients.connection import Client
from lowkiq.ownership import leases
from lowkiq.ownership.events import Grant, Revoke
from lowkiq.runtime.dispatcher import Dispatcher
from lowkiq.runtime.lifecycle import State
from lowkiq.runtime.shard_handler import ShardHandler
from lowkiq.storage.metrics import queue_metrics
from lowkiq.storage.queue import Queue
from tests.both_redis import server_or_cluster_client  # noqa: F401  (redis_client)
from tests.runtime.faults import KINDS, Fault, Performs, Scripted, ScriptedCapped, faulty
from tests.runtime.serving import dispatcher_of, ids_by_shard

#: A scenario's perform does with a job what the first letter of its payload says
#: (:class:`tests.runtime.faults.Scripted`).
UNDECODABLE = b"\xff{not json"
#: A time long past: jobs enqueued at it are due at once, in the order of their times.
PAST = 1_000_000_000.0


class Faulted(Scripted):
    """The scenarios' worker, on a queue of its own."""


class Capped(ScriptedCapped):
    """The scenarios' worker with group claims, on a queue of its own."""


@dataclass
class Scenario:
    """A worker, its jobs (``(id, payloads)`` by shard), and what else a run does."""

    name: str
    worker: type[Scripted]
    payloads: Callable[[int], list[str]]
    batch_size: int = 1
    per_shard: int = 3
    threads: int = 2
    groups: bool = False
    undecodable: bool = False
    #: After this many turns, shard 0 is handed over: given up and taken again.
    hand_over_at: int | None = None
    jobs: dict[str, list[str]] = field(default_factory=dict)


SCENARIOS = [
    Scenario("acks riding on pops", Faulted, lambda n: [f"a{n}"]),
    Scenario("merged payloads, several batches a pop", Faulted, lambda n: [f"a{n}", f"b{n}"], 2),
    Scenario("failures", Faulted, lambda n: [f"f{n}"] if n % 2 else [f"a{n}"]),
    Scenario("snoozes", Faulted, lambda n: [f"s{n}"] if n % 2 else [f"a{n}"]),
    Scenario("partial failures", Faulted, lambda n: [f"p{n}"] if n % 2 else [f"a{n}"], 3),
    Scenario("yields", Faulted, lambda n: [f"y{n}", f"z{n}", f"w{n}"]),
    Scenario("burials", Faulted, lambda n: [f"a{n}"], 2, undecodable=True),
    Scenario("cancels", Faulted, lambda n: [f"c{n}"] if n % 2 else [f"a{n}"]),
    Scenario("group claims", Capped, lambda n: [f"a{n}"], groups=True),
    Scenario("hand-over", Faulted, lambda n: [f"a{n}"], per_shard=4, hand_over_at=3),
]


#: How an enqueued payload must end: performed, dead, or cancelled (never performed).
RUN, DEAD, CANCELLED = "run", "dead", "cancelled"


def prepare(client: Client, scenario: Scenario) -> dict[tuple[str, str], str]:
    """Empty Redis, enqueue the scenario's jobs; returns each (id, payload) enqueued ->
    how it must end (RUN, DEAD or CANCELLED)."""
    if isinstance(client, redis.RedisCluster):
        client.flushall(target_nodes=redis.RedisCluster.PRIMARIES)
    else:
        client.flushall()
    worker = scenario.worker
    worker.batch_size = scenario.batch_size
    worker.performs = Performs()
    worker.once = set()
    lowkiq.settings.workers = [worker]
    expected: dict[tuple[str, str], str] = {}
    jobs = []
    queue = worker.queue()
    for shard, ids in ids_by_shard(queue, scenario.per_shard).items():
        for n, job_id in enumerate(ids):
            for score, payload in enumerate(scenario.payloads(n + 10 * shard)):
                job: dict[str, Any] = {"id": job_id, "payload": payload, "score": score}
                if scenario.groups:
                    job["group"] = f"g{n % 2}"
                jobs.append(job)
                expected[(job_id, payload)] = CANCELLED if payload[0] == "c" else RUN
    worker.perform_async(jobs)
    if scenario.undecodable:
        for shard in queue.shards:
            bad = f"bad{shard}"
            while queue.shard_of(bad) != shard:
                bad += "x"
            queue.push([(bad, UNDECODABLE, 0.0, PAST, None)])
            expected[(bad, "")] = DEAD
    return expected


def drained(dispatcher: Dispatcher, queue: Queue) -> bool:
    """Nothing in flight, queued, or in a processing area."""
    if dispatcher.in_flight or any(h.unacked for h in dispatcher.handlers):
        return False
    metrics = queue_metrics(queue)
    return metrics["length"] == 0 and metrics["busy"] == 0


def serve_until_drained(client: Client, worker: type[Scripted], threads: int, fault: Fault) -> None:
    """Serve ``worker``'s queue through a client failing as ``fault`` says, a turn at a
    time (a turn's Redis error is the process's, survived), until it is drained."""
    own = faulty(client, fault)
    with dispatcher_of(client, worker, threads, own=own, poll_interval=0.02) as (dispatcher, _):
        for _ in range(200):
            with contextlib.suppress(redis.RedisError):
                dispatcher.turn()
            if drained(dispatcher, worker.queue()):
                break


def hand_over(dispatcher: Dispatcher, queue: Queue, worker: type[Scripted]) -> None:
    """Shard 0 is asked back (its lease released once its batch is settled), then a
    new lease on it is served by a new handler."""
    dispatcher.tell(Revoke((queue.name, 0)))
    for _ in range(200):
        try:
            dispatcher.turn()
        except redis.RedisError:
            continue
        if all(h.shard != 0 for h in dispatcher.handlers) and (queue.name, 0) not in (
            dispatcher.leaving
        ):
            break
    lease, _, _ = leases.acquire(worker.queue(), 0, "again", 3600)
    if lease is None:  # its release failed: the old lease lapses (at once, here)
        worker.queue().client.delete(queue.keys.lease(0))
        lease, _, _ = leases.acquire(worker.queue(), 0, "again", 3600)
    assert lease is not None
    dispatcher.tell(Grant(ShardHandler(worker, 0, queue, lease.token)))


def run(client: Client, scenario: Scenario, fault: Fault) -> list[str]:
    """One run of ``scenario`` with ``fault``; returns the invariants it broke."""
    expected = prepare(client, scenario)
    worker = scenario.worker
    broken: list[str] = []
    own = faulty(client, fault)
    with dispatcher_of(client, worker, scenario.threads, own=own, poll_interval=0.02) as (
        dispatcher,
        queue,
    ):
        fault.armed = True
        turns = 0
        while True:
            if turns >= 400:
                broken.append(f"not drained after {turns} turns")
                break
            if turns == scenario.hand_over_at:
                hand_over(dispatcher, queue, worker)
            turns += 1
            try:
                dispatcher.turn()
            except redis.RedisError:
                pass
            except Exception as exc:  # noqa: BLE001 - the process would die of it
                broken.append(f"the dispatcher raised {exc!r}")
                break
            try:
                if drained(dispatcher, worker.queue()):
                    break
            except redis.RedisError:
                continue
        if not all(thread.is_alive() for thread in dispatcher.executor.threads):
            broken.append("an executor thread died")
    performs = worker.performs
    if performs.overlaps:
        broken.append(f"two batches at once on shards {sorted(set(performs.overlaps))}")
    dead = {job["id"] for job in worker.queries().morgue_range_by_id("-", "+")}
    for (job_id, payload), end in expected.items():
        ran = performs.payloads.get((job_id, payload))
        if end == RUN and not ran and job_id not in dead:
            broken.append(f"{job_id}:{payload} never performed, and not dead")
        if end == DEAD and job_id not in dead:
            broken.append(f"{job_id} (undecodable) not dead")
        if end == CANCELLED and (ran or job_id in dead):
            broken.append(f"{job_id}:{payload} cancelled, yet {'dead' if not ran else 'performed'}")
    return broken


@pytest.fixture
def redis_direct(redis_client: Client) -> Iterator[Client]:
    yield redis_client
    lowkiq.settings.workers = []


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_every_failed_call_of_a_scenario_keeps_the_invariants(
    redis_direct: Client, scenario: Scenario
) -> None:
    calls = Fault()
    assert run(redis_direct, scenario, calls) == []
    points = 0
    violations: list[str] = []
    for kind in KINDS:
        for at in range(1, calls.calls + 1):
            fault = Fault(at, kind)
            broken = run(redis_direct, scenario, fault)
            points += fault.fired
            violations += [f"{kind} at call {at}: {what}" for what in broken]
            if broken:
                violations.append(f"the call failed:\n{fault.where}")
    print(f"{scenario.name}: {points} failure points, {len(violations)} violations")
    assert violations == [], "\n".join(violations)
    assert points >= len(KINDS) * calls.calls // 2


def test_a_redis_error_in_one_reply_of_a_round_strands_no_other_shard(
    redis_direct: Client,
) -> None:
    """The first burial of a round fails (the connection drops); the pop of the other
    shard in that round carried its ack and took a new batch: that batch still runs."""

    class Burying(Faulted):
        pass

    lowkiq.settings.workers = [Burying]
    queue = Burying.queue()
    ids = ids_by_shard(queue, 3)
    first, second = ids[0], ids[1]
    # Shard 0 is due first, and its second job cannot be decoded: its pop in the second
    # round (which acks the first) buries it; shard 1's pop in that round acks its
    # first batch and takes its second.
    Burying.perform_async([{"id": first[0], "payload": "a", "perform_in": PAST + 1}])
    queue.push([(first[1], UNDECODABLE, 0.0, PAST + 2, None)])
    Burying.perform_async(
        [
            {"id": job_id, "payload": "a", "perform_in": PAST + 10 + n}
            for n, job_id in enumerate(second)
        ]
    )
    # The first burial's connection drops before it is sent.
    fault = Fault(1, "refused", armed=True, sha=queue.scripts.bury.sha)
    serve_until_drained(redis_direct, Burying, 2, fault)
    assert fault.fired
    performed = {job_id for job_id, _ in Burying.performs.payloads}
    assert set(second) <= performed, f"never performed: {set(second) - performed}"
    assert {job["id"] for job in Burying.queries().morgue_range_by_id("-", "+")} == {first[1]}


def test_an_ack_naming_a_batch_no_longer_in_processing_changes_nothing(
    redis_direct: Client,
) -> None:
    """A shard's handler that believes an old batch waits for its ack, while Redis holds
    a newer batch in the area: its ack (riding on its pop, or alone) acks nothing, and
    the newer batch runs."""
    lowkiq.settings.workers = [Faulted]
    Faulted.performs = Performs()
    queue = Faulted.queue()
    [old, new] = ids_by_shard(queue, 2)[0]
    Faulted.perform_async([{"id": old, "payload": "a", "perform_in": PAST + 1}])
    Faulted.perform_async([{"id": new, "payload": "a", "perform_in": PAST + 2}])
    with dispatcher_of(redis_direct, Faulted, 1, poll_interval=0.02) as (dispatcher, _):
        handler = next(h for h in dispatcher.handlers if h.shard == 0)
        stale = handler.batch
        token = handler.token
        popped = queue.pop(0, token, 1)  # another pop the handler never heard of
        assert [job.id for job in popped.jobs] == [old]
        queue.ack(0, token, popped.batch)
        popped = queue.pop(0, token, 1)
        assert [job.id for job in popped.jobs] == [new] and popped.batch != stale
        handler.life.state = State.FINISHED  # it believes its (old) batch waits for its ack
        for _ in range(100):
            dispatcher.turn()
            if (new, "a") in Faulted.performs.payloads and drained(dispatcher, queue):
                break
    assert Faulted.performs.payloads[(new, "a")] == 1
    assert queue_metrics(queue)["stale_calls"] == 1
    assert queue_metrics(queue)["processed"] == 2


def test_the_harness_counts_calls_and_fails_the_one_named(redis_direct: Client) -> None:
    fault = Fault(2, "lost", armed=True)
    client = faulty(redis_direct, fault)
    assert client.execute_command("PING")
    with pytest.raises(redis.ConnectionError):
        client.execute_command("SET", "k", "v")
    assert redis_direct.get("k") == b"v"  # it ran: only its reply was lost
    assert fault.fired and fault.calls == 2
    refused = faulty(redis_direct, Fault(1, "refused", armed=True))
    with pytest.raises(redis.ConnectionError):
        refused.execute_command("SET", "r", "v")
    assert redis_direct.get("r") is None


@dataclass
class ThenAnother(Fault):
    """A fault, and another counted on its own (``then``): both fail their call."""

    then: Fault = field(default_factory=Fault)

    def strikes(self, shas: Sequence[str | None] = (None,)) -> bool:
        return super().strikes(shas) | self.then.strikes(shas)


def three_jobs_in_one_shard(name: str) -> tuple[type[Faulted], Queue, list[str]]:
    """A faulted worker of its own (named ``name``), the one served, with three jobs
    queued in its shard 0, due in order (one batch each)."""
    worker: type[Faulted] = type(name, (Faulted,), {})
    lowkiq.settings.workers = [worker]
    worker.performs = Performs()
    queue = worker.queue()
    ids = ids_by_shard(queue, 3)[0]
    worker.perform_async(
        [{"id": job_id, "payload": "a", "perform_in": PAST + n} for n, job_id in enumerate(ids)]
    )
    return worker, queue, ids


def assert_each_ran_once(worker: type[Faulted], queue: Queue, ids: list[str]) -> None:
    """Every job of ``ids`` was performed exactly once, and counted processed."""
    assert dict(worker.performs.payloads) == {(job_id, "a"): 1 for job_id in ids}
    assert queue_metrics(queue)["processed"] == len(ids)


@pytest.mark.parametrize("kind", ["refused", "lost"])
def test_a_pop_that_failed_carrying_an_ack_never_runs_the_acked_batch_again(
    redis_direct: Client, kind: str
) -> None:
    """A shard's pop carries the ack of its batch that ran; the call fails (``refused``:
    nothing ran; ``lost``: it ran, its reply is lost).  The handler acks that batch by
    its number before it puts back what the area holds: a batch that ran never runs
    again, one popped and never run does."""

    worker, queue, ids = three_jobs_in_one_shard("Carrying")
    # The second pop: it acks the first batch.
    fault = Fault(2, kind, armed=True, sha=queue.scripts.pop.sha)
    serve_until_drained(redis_direct, worker, 1, fault)
    assert fault.fired
    assert_each_ran_once(worker, queue, ids)


@pytest.mark.parametrize("kind", ["refused", "lost"])
def test_an_ack_by_number_that_fails_too_is_sent_again_and_nothing_runs_twice(
    redis_direct: Client, kind: str
) -> None:
    """The pop carrying an ack fails, then so does the ack sent by the batch's number
    before the restore: it is sent again before the next pop, and the batch that ran
    still never runs again."""

    worker, queue, ids = three_jobs_in_one_shard("Twice")
    then = Fault(1, kind, armed=True, sha=queue.scripts.ack.sha)
    fault = ThenAnother(2, "refused", armed=True, sha=queue.scripts.pop.sha, then=then)
    serve_until_drained(redis_direct, worker, 1, fault)
    assert fault.fired and then.fired
    assert_each_ran_once(worker, queue, ids)
