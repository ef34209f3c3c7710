"""The dispatcher: the pops of a round go out in one write, any thread performs any
shard's batch, a shard never has two batches in flight, and every hand-over, lease loss
and Redis error leaves each shard served or given up; on one server and on a cluster."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
import redis

import lowkiq
from lowkiq.clients.connection import Client
from lowkiq.limits.group_caps import GroupCaps
from lowkiq.ownership import leases
from lowkiq.ownership.events import Grant, Lost, Revoke
from lowkiq.ownership.membership import Membership
from lowkiq.runtime.lifecycle import State
from lowkiq.runtime.shard_handler import ShardHandler
from lowkiq.storage.group_claims import GroupClaims, claimant
from lowkiq.storage.keys import OwnershipKeys
from tests.both_redis import server_or_cluster_client  # noqa: F401  (redis_client)
from tests.leasing import pop
from tests.runtime.serving import (
    ReleasesInto,
    collect_until,
    dispatcher_of,
    handler_of,
    ids_by_shard,
    turn_for,
    turn_until,
)

NOW = 1_000_000_000.0


class Rounds(lowkiq.Worker):
    shards_count = 4
    #: (shard, job id, thread name, start, end) of every performed job, in order of end.
    performed: list[tuple[int, str, str, float, float]] = []
    #: Job ids whose perform waits for their event.
    gates: dict[str, threading.Event] = {}
    #: Job ids now in perform.
    running: set[str] = set()
    overlaps: list[str] = []

    @classmethod
    def perform(cls, payloads_by_id: dict[str, list[Any]]) -> None:
        for job_id in payloads_by_id:
            if job_id in cls.running:
                cls.overlaps.append(job_id)
            cls.running.add(job_id)
            start = time.monotonic()
            gate = cls.gates.get(job_id)
            if gate is not None:
                assert gate.wait(20)
            cls.running.discard(job_id)
            shard = cls.queue().shard_of(job_id)
            name = threading.current_thread().name
            cls.performed.append((shard, job_id, name, start, time.monotonic()))


@pytest.fixture(autouse=True)
def rounds_worker(redis_client: Client) -> Iterator[None]:
    lowkiq.settings.workers = [Rounds]
    Rounds.performed, Rounds.gates, Rounds.running, Rounds.overlaps = [], {}, set(), []
    yield
    for gate in Rounds.gates.values():
        gate.set()


def enqueue(queue: Any, per_shard: int) -> dict[int, list[str]]:
    ids = ids_by_shard(queue, per_shard)
    Rounds.perform_async(
        [
            {"id": job_id, "perform_in": NOW + rank}
            for shard_ids in ids.values()
            for rank, job_id in enumerate(shard_ids)
        ]
    )
    return ids


def in_processing(client: Client, queue: Any) -> int:
    return sum(client.hlen(queue.keys.processing_hash(s)) for s in queue.shards)


def performed_ids() -> list[str]:
    return [job_id for _, job_id, *_ in Rounds.performed]


def test_a_round_pops_every_due_shard_in_one_write_and_acks_ride_on_the_next(
    redis_client: Client,
) -> None:
    with dispatcher_of(redis_client, Rounds, threads=2) as (dispatcher, queue):
        ids = enqueue(queue, 3)
        writes: list[int] = []
        run_keyed = dispatcher.client.run_keyed  # type: ignore[attr-defined]

        def counted(commands: Any) -> Any:
            writes.append(len(commands))
            return run_keyed(commands)

        dispatcher.client.run_keyed = counted  # type: ignore[attr-defined]
        dispatcher.turn()
        # Four due shards, room for four batches (two threads): one write reads their
        # heads, one pops them all.
        assert writes == [4, 4]
        turn_until(dispatcher, lambda: len(Rounds.performed) == 12)
        turn_until(dispatcher, lambda: in_processing(redis_client, queue) == 0)
        assert Rounds.metrics()["processed"] == 12
        for shard, shard_ids in ids.items():
            assert [i for s, i, *_ in Rounds.performed if s == shard] == shard_ids


def test_a_long_perform_holds_only_its_own_shard(redis_client: Client) -> None:
    with dispatcher_of(redis_client, Rounds, threads=2) as (dispatcher, queue):
        ids = enqueue(queue, 5)
        Rounds.gates[ids[0][0]] = long = threading.Event()
        others = [job_id for shard in (1, 2, 3) for job_id in ids[shard]]
        started = time.monotonic()
        turn_until(dispatcher, lambda: set(others) <= set(performed_ids()))
        assert time.monotonic() - started < 5  # not behind the long perform
        assert ids[0][0] in Rounds.running  # still in perform
        assert not any(i in performed_ids() for i in ids[0])
        long.set()
        turn_until(dispatcher, lambda: set(ids[0]) <= set(performed_ids()))
        assert [i for s, i, *_ in Rounds.performed if s == 0] == ids[0]


def test_a_shard_taken_over_drops_out_and_the_others_run(redis_client: Client) -> None:
    with dispatcher_of(redis_client, Rounds) as (dispatcher, queue):
        ids = enqueue(queue, 1)
        redis_client.delete(queue.keys.lease(2))  # its lease lapsed; another process took it
        other, _, _ = leases.acquire(Rounds.queue(redis_client), 2, "another process", 60.0)
        assert other is not None
        lost: list[Any] = []
        handler_of(dispatcher, 2).on_lost = lost.append
        turn_until(dispatcher, lambda: len(Rounds.performed) == 3)
        assert sorted(performed_ids()) == sorted(ids[s][0] for s in (0, 1, 3))
        assert [h.shard for h in lost] == [2]
        assert redis_client.zcard(queue.keys.perform_in_zset(2)) == 1  # left to its new owner


def test_an_ack_refused_for_one_shard_does_not_cost_the_others_theirs(
    redis_client: Client,
) -> None:
    with dispatcher_of(redis_client, Rounds) as (dispatcher, queue):
        ids = enqueue(queue, 1)
        dispatcher.turn()  # pops the four shards
        collect_until(dispatcher, lambda: all(h.unacked for h in dispatcher.handlers))
        assert {h.life.state for h in dispatcher.handlers} == {State.FINISHED}
        # Shard 1's lease lapses and another process takes it (restoring its batch, for
        # it to run again) before the acks go out.
        redis_client.delete(queue.keys.lease(1))
        lease, restored, _ = leases.acquire(Rounds.queue(redis_client), 1, "another", 60.0)
        assert lease is not None and restored == 1
        dispatcher.turn()
        assert handler_of(dispatcher, 1).lost
        assert Rounds.metrics()["processed"] == 3  # every other shard's batch acked
        assert [h.life.state for h in dispatcher.handlers] == [
            State.IDLE,
            State.LOST,
            State.IDLE,
            State.IDLE,
        ]
        turn_for(dispatcher, 0.5)
        assert in_processing(redis_client, queue) == 0
        assert redis_client.zcard(queue.keys.perform_in_zset(1)) == 1  # for its new owner
        # Nothing performed twice: the acks of the others were not dropped.
        assert sorted(performed_ids()) == sorted(i[0] for i in ids.values())


def test_a_hand_over_waits_for_the_running_batch_then_acks_and_releases(
    redis_client: Client,
) -> None:
    with dispatcher_of(redis_client, Rounds) as (dispatcher, queue):
        ids = enqueue(queue, 2)
        Rounds.gates[ids[0][0]] = gate = threading.Event()
        released: list[Any] = []
        dispatcher.reports = ReleasesInto(released)
        turn_until(dispatcher, lambda: ids[0][0] in Rounds.running)
        leaving = handler_of(dispatcher, 0)
        assert leaving.life.state is State.RUNNING
        dispatcher.tell(Revoke(("Rounds", 0)))
        dispatcher.turn()
        assert leaving.life.state is State.LEAVING
        # Asked back mid-batch: the lease is kept until the batch ends.
        assert released == [] and redis_client.exists(queue.keys.lease(0))
        assert [h.shard for h in dispatcher.handlers] == [1, 2, 3]
        gate.set()
        turn_until(dispatcher, lambda: bool(released))
        assert [h.shard for h in released] == [0]
        assert not redis_client.exists(queue.keys.lease(0))
        assert redis_client.hlen(queue.keys.processing_hash(0)) == 0  # acked before release
        assert performed_ids().count(ids[0][0]) == 1 and ids[0][1] not in performed_ids()
        assert redis_client.zcard(queue.keys.perform_in_zset(0)) == 1  # left to the next owner


def test_a_hand_over_completes_when_redis_drops_the_connection_while_acking(
    redis_client: Client,
) -> None:
    with dispatcher_of(redis_client, Rounds) as (dispatcher, queue):
        enqueue(queue, 1)
        dispatcher.turn()  # pops the four shards
        collect_until(dispatcher, lambda: handler_of(dispatcher, 0).unacked)
        released: list[Any] = []
        dispatcher.reports = ReleasesInto(released)
        # The coordinator moves shard 0 away, and Redis drops the dispatcher's
        # connection just before it acks the shard's last batch.
        dispatcher.tell(Revoke(("Rounds", 0)))
        kill_connection(redis_client, dispatcher.client)
        dispatcher.apply()
        # The hand-over happened all the same: the shard is given up and the coordinator
        # told (its lease released, or left to lapse).
        assert [h.shard for h in released] == [0]
        assert [h.shard for h in dispatcher.handlers] == [1, 2, 3]
        # The dispatcher goes on with the shards it kept.
        shard1 = ids_by_shard(queue, 2)[1][1]
        Rounds.perform_async([{"id": shard1}])
        turn_until(dispatcher, lambda: shard1 in performed_ids())
        # The next owner restores the unacked batch: nothing is lost.
        redis_client.delete(queue.keys.lease(0))
        lease, restored, _ = leases.acquire(Rounds.queue(redis_client), 0, "next", 5)
        assert lease is not None and restored == 1


def test_a_shard_lost_and_taken_again_mid_batch_never_runs_two_batches_at_once(
    redis_client: Client,
) -> None:
    with dispatcher_of(redis_client, Rounds) as (dispatcher, queue):
        ids = enqueue(queue, 1)
        Rounds.gates[ids[0][0]] = gate = threading.Event()
        turn_until(dispatcher, lambda: ids[0][0] in Rounds.running)
        old = handler_of(dispatcher, 0)
        # The lease lapses mid-perform; the coordinator takes it again, which restores
        # the running job into the queue under the new epoch.
        redis_client.delete(queue.keys.lease(0))
        lease, restored, _ = leases.acquire(old.queue, 0, "tests", 60.0)
        assert lease is not None and restored == 1
        dispatcher.tell(Lost(old.key))
        new = type(old)(Rounds, 0, old.queue, lease.token)
        dispatcher.tell(Grant(new))
        turn_for(dispatcher, 1.0)
        assert Rounds.overlaps == [] and Rounds.running == {ids[0][0]}
        gate.set()
        turn_until(dispatcher, lambda: performed_ids().count(ids[0][0]) == 2)
        assert Rounds.overlaps == []


def test_stopping_puts_batches_not_started_back_and_lets_the_running_one_finish(
    redis_client: Client,
) -> None:
    with dispatcher_of(redis_client, Rounds, threads=1) as (dispatcher, queue):
        ids = ids_by_shard(queue, 1)
        first, second = ids[0][0], ids[1][0]
        Rounds.gates[first] = gate = threading.Event()
        Rounds.perform_async([{"id": first}])
        released: list[Any] = []
        dispatcher.reports = ReleasesInto(released)
        turn_until(dispatcher, lambda: first in Rounds.running)
        # One thread, busy: shard 1's batch is popped and waits for it.
        Rounds.perform_async([{"id": second}])
        turn_until(dispatcher, lambda: ("Rounds", 1) in dispatcher.in_flight)
        waiting = dispatcher.in_flight[("Rounds", 1)]
        runner = threading.Thread(target=dispatcher.shutdown)
        runner.start()
        time.sleep(0.2)
        assert runner.is_alive()  # waits for the running batch
        # The shards with no batch in flight are given up at once, for their next owners.
        assert sorted(h.shard for h in released) == [1, 2, 3]
        assert redis_client.exists(queue.keys.lease(0))
        assert not any(redis_client.exists(queue.keys.lease(s)) for s in (1, 2, 3))
        gate.set()
        runner.join(10)
        assert not runner.is_alive()
        assert performed_ids() == [first]
        shard = waiting.handler.shard
        assert redis_client.zcard(queue.keys.perform_in_zset(shard)) == 1  # back, unperformed
        assert in_processing(redis_client, queue) == 0
        assert Rounds.metrics()["processed"] == 1
        assert sorted(h.shard for h in released) == [0, 1, 2, 3]
        assert not any(redis_client.exists(queue.keys.lease(s)) for s in queue.shards)


def kill_connection(admin: Client, client: Any) -> None:
    """Close ``client``'s connections from the server's side (on a cluster, every normal
    connection of every master but the admin's)."""
    if isinstance(admin, redis.RedisCluster):
        for node in admin.get_primaries():
            node.redis_connection.execute_command(
                "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"
            )
        return
    own_id = client.execute_command("CLIENT", "ID")
    admin.execute_command("CLIENT", "KILL", "ID", own_id)


class Doomed(lowkiq.Worker):
    shards_count = 2
    max_retry_count = 0  # the first failure sends the job to the morgue
    done: list[str] = []
    exhausted_on: list[str] = []
    gate = threading.Event()

    @classmethod
    def perform(cls, payloads_by_id: dict[str, list[Any]]) -> None:
        if "bad" in payloads_by_id:
            raise RuntimeError("bad job")
        cls.done.extend(payloads_by_id)

    @classmethod
    def retries_exhausted(cls, jobs: list[dict[str, Any]]) -> None:
        cls.exhausted_on.append(threading.current_thread().name)
        assert cls.gate.wait(10)


def test_a_slow_retries_exhausted_runs_on_an_executor_thread_not_the_dispatchers(
    redis_client: Client,
) -> None:
    Doomed.done, Doomed.exhausted_on, Doomed.gate = [], [], threading.Event()
    with dispatcher_of(redis_client, Doomed, threads=2) as (dispatcher, queue):
        good = next(
            f"good{n}" for n in range(100) if queue.shard_of(f"good{n}") != queue.shard_of("bad")
        )
        Doomed.perform_async([{"id": "bad"}])
        turn_until(dispatcher, lambda: bool(Doomed.exhausted_on))
        assert Doomed.exhausted_on[0].startswith("lowkiq-")  # an executor thread
        # While it is still in retries_exhausted, the dispatcher goes on.
        Doomed.perform_async([{"id": good}])
        turn_until(dispatcher, lambda: Doomed.done == [good])
        Doomed.gate.set()
        assert [job["id"] for job in Doomed.queries().morgue_range_by_id("-", "+")] == ["bad"]


class Capped(Rounds):
    """Rounds with at most one batch of a group at a time."""

    group_concurrency = 1


def test_a_batch_put_back_unperformed_when_its_shard_is_asked_back_frees_its_group_place(
    redis_client: Client,
) -> None:
    lowkiq.settings.workers = [Capped]
    with dispatcher_of(redis_client, Capped, threads=1) as (dispatcher, queue):
        caps = GroupCaps(GroupClaims(Capped.queue(dispatcher.client), 1, 30.0))
        dispatcher.group_caps = {"Capped": caps}
        for handler in dispatcher.handlers:
            handler.group_caps = caps
        ids = ids_by_shard(queue, 1)
        first, second = ids[0][0], ids[1][0]
        Rounds.gates[first] = gate = threading.Event()
        Capped.perform_async([{"id": first, "group": "A"}])
        turn_until(dispatcher, lambda: first in Rounds.running)
        # The one thread is busy: shard 1's batch of group B is popped, its place
        # claimed, and it waits for the thread.
        Capped.perform_async([{"id": second, "group": "B"}])
        turn_until(dispatcher, lambda: ("Capped", 1) in dispatcher.in_flight)
        held = queue.keys.group_claims_prefix + "held:"
        assert redis_client.exists(held + "B")
        dispatcher.tell(Revoke(("Capped", 1)))
        dispatcher.turn()  # put back unperformed, and its place released
        assert not redis_client.exists(held + "B")
        assert redis_client.zcard(queue.keys.perform_in_zset(1)) == 1
        gate.set()
        turn_until(dispatcher, lambda: first in performed_ids() and not dispatcher.in_flight)
        dispatcher.turn()
        assert redis_client.keys(held + "*") == []


def test_a_shard_given_up_wakes_its_next_owner_and_is_reported_released(
    redis_client: Client,
) -> None:
    keys = OwnershipKeys()
    redis_client.hset(keys.owners_hash, "Rounds:0", "next-owner")
    with dispatcher_of(redis_client, Rounds) as (dispatcher, queue):
        released: list[Any] = []
        dispatcher.reports = ReleasesInto(released)
        # On the dispatcher's own connection: no other thread's client is used.
        dispatcher.handoff = Membership(dispatcher.client, "this-process", 30.0).handoff
        dispatcher.tell(Revoke(("Rounds", 0)))
        dispatcher.turn()
        assert [h.shard for h in released] == [0]
        assert not redis_client.exists(queue.keys.lease(0))
        assert redis_client.lrange(keys.nudge_list("next-owner"), 0, -1) == [b"1"]


class CappedTracked(Rounds):
    """Rounds with at most one batch of a group at a time, its job events recorded."""

    group_concurrency = 1
    track = True


def test_a_batch_its_group_had_no_place_for_goes_back_saying_so_in_its_history(
    redis_client: Client,
) -> None:
    lowkiq.settings.workers = [CappedTracked]
    with dispatcher_of(redis_client, CappedTracked) as (dispatcher, queue):
        caps = GroupCaps(GroupClaims(CappedTracked.queue(dispatcher.client), 1, 30.0))
        dispatcher.group_caps = {"CappedTracked": caps}
        for handler in dispatcher.handlers:
            handler.group_caps = caps
        # Another process's batch of group A holds A's only place.
        other = GroupClaims(CappedTracked.queue(), 1, 30.0)
        other.call("claim", claimant(0, "7 other-host"), {"A": 1})
        job_id = ids_by_shard(queue, 1)[1][0]
        CappedTracked.perform_async([{"id": job_id, "group": "A"}])

        def restored() -> list[Any]:
            return [e for e in CappedTracked.history(job_id) if e.event == "restored"]

        turn_until(dispatcher, lambda: bool(restored()))  # popped, refused, back unrun
        assert {e.details.get("reason") for e in restored()} == {"group_full"}
        assert job_id not in performed_ids()
        other.call("release", claimant(0, "7 other-host"), {"A": 0})
        turn_until(dispatcher, lambda: job_id in performed_ids())


class DiesOnce(lowkiq.Worker):
    shards_count = 1
    max_restores = 1  # the first death sends the job to the morgue
    exhausted: list[str] = []
    #: "performed <id>" and "exhausted <id>", in order.
    events: list[str] = []

    @classmethod
    def perform(cls, payloads_by_id: dict[str, list[Any]]) -> None:
        cls.events.extend(f"performed {job_id}" for job_id in payloads_by_id)

    @classmethod
    def retries_exhausted(cls, jobs: list[dict[str, Any]]) -> None:
        cls.exhausted.extend(job["id"] for job in jobs)
        cls.events.extend(f"exhausted {job['id']}" for job in jobs)


def buried_by_next_owner(redis_client: Client, behind: Sequence[str] = ()) -> leases.Lease:
    """DiesOnce's job ``killer`` popped, ``behind`` queued after it, then its process dead:
    the lease of the next owner, whose acquisition moved ``killer`` to the morgue."""
    lowkiq.settings.workers = [DiesOnce]
    DiesOnce.exhausted, DiesOnce.events = [], []
    queue = DiesOnce.queue(redis_client)
    DiesOnce.perform_async([{"id": "killer"}])
    assert [job.id for job in pop(queue, 0, 10) or []] == ["killer"]
    if behind:
        DiesOnce.perform_async([{"id": job_id} for job_id in behind])
    redis_client.delete(queue.keys.lease(0))
    lease, restored, _ = leases.acquire(queue, 0, "next", 60.0)
    assert lease is not None and restored == 0
    assert [job["id"] for job in lease.buried] == ["killer"]
    return lease


def test_jobs_an_acquisition_buried_are_reported_when_its_lease_is_lost_before_a_round(
    redis_client: Client,
) -> None:
    lease = buried_by_next_owner(redis_client)
    with dispatcher_of(redis_client, Rounds, threads=1) as (dispatcher, _):
        handler = ShardHandler(DiesOnce, 0, DiesOnce.queue(redis_client), lease.token)
        handler.exhausted = list(lease.buried)
        # The next owner loses the lease before the dispatcher's first round of the shard.
        dispatcher.tell(Grant(handler))
        dispatcher.tell(Lost(handler.key))
        turn_until(dispatcher, lambda: DiesOnce.exhausted == ["killer"])
        turn_for(dispatcher, 0.2)
    assert DiesOnce.exhausted == ["killer"]  # once
    assert [job["id"] for job in DiesOnce.queries().morgue_range_by_id("-", "+")] == ["killer"]


def test_jobs_an_acquisition_buried_are_reported_before_the_shards_first_batch(
    redis_client: Client,
) -> None:
    lease = buried_by_next_owner(redis_client, behind=["next"])
    with dispatcher_of(redis_client, Rounds, threads=1) as (dispatcher, _):
        own = DiesOnce.queue(dispatcher.client)  # the dispatcher's connection pops
        own.refresh_layout(DiesOnce.queue(redis_client).layout)
        handler = ShardHandler(DiesOnce, 0, own, lease.token)
        handler.exhausted = list(lease.buried)
        dispatcher.tell(Grant(handler))
        turn_until(dispatcher, lambda: "performed next" in DiesOnce.events)
    assert DiesOnce.events == ["exhausted killer", "performed next"]


class Unstoppable(lowkiq.Worker):
    """One shard; a perform swallows every ``PerformTimeout`` until its gate opens."""

    shards_count = 1
    perform_timeout = 0.2
    perform_hard_timeout = 0.6
    gate = threading.Event()

    @classmethod
    def perform(cls, payloads_by_id: dict[str, list[Any]]) -> None:
        while not cls.gate.is_set():
            with contextlib.suppress(Exception):
                cls.gate.wait(0.01)


def test_a_shard_asked_back_while_its_perform_runs_past_the_hard_limit_keeps_its_lease(
    redis_client: Client,
) -> None:
    lowkiq.settings.workers = [Unstoppable]
    Unstoppable.gate = threading.Event()
    fatal: list[BaseException] = []
    try:
        with dispatcher_of(redis_client, Unstoppable, fatal=fatal.append) as (dispatcher, queue):
            released: list[Any] = []
            dispatcher.reports = ReleasesInto(released)
            Unstoppable.perform_async([{"id": "stuck"}])
            turn_until(dispatcher, lambda: bool(dispatcher.in_flight))
            # Asked back mid-perform (the process stops, or a hand-over): it leaves once
            # settled; then its perform runs past the hard limit and is given up.
            dispatcher.tell(Revoke(("Unstoppable", 0)))
            dispatcher.apply()
            assert handler_of_leaving(dispatcher).life.state is State.LEAVING
            collect_until(dispatcher, lambda: bool(fatal) and not dispatcher.leaving, 5)
            # Its thread still runs the perform: the lease is kept until the process
            # exits, for no other process to take the shard meanwhile.
            assert released == []
            assert redis_client.exists(queue.keys.lease(0))
            assert [h.shard for h in dispatcher.abandoned] == [0]
            [job] = Unstoppable.queries().fetch(["stuck"])  # it failed, for its retry
            assert job["retry_count"] == 0, job
            assert "ran past Unstoppable.perform_hard_timeout" in job["error"], job
    finally:
        Unstoppable.gate.set()


def handler_of_leaving(dispatcher: Any) -> ShardHandler:
    """The one handler the dispatcher waits on to leave."""
    [handler] = dispatcher.leaving.values()
    return handler
