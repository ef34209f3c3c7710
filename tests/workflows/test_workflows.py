"""Workflows on one Redis server, run by ``lowkiq.testing.drain`` (the production slot
code on the test's thread): members settle as their batches end, the callbacks fire
exactly once after the last member with the counts of what happened, and ``after=``
jobs wait for success (SPEC §12)."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, ClassVar

import pytest
import redis

import lowkiq
from lowkiq.ownership import leases
from lowkiq.ownership.resharding import reshard
from lowkiq.testing import drain
from lowkiq.workflows import relay, store
from lowkiq.workflows.relayer import RELAYER
from tests.workflows.workflow_support import (
    Done,
    Member,
    Other,
    Single,
    Success,
    callback_body,
    callbacks,
    catch_up,
    run_coroutine,
)


def jobs(*ids: str, payload: Any = None, **extra: Any) -> list[dict[str, Any]]:
    """One job per id, its payload ``{"v": id}`` unless given."""
    return [{"id": i, "payload": {"v": i} if payload is None else payload, **extra} for i in ids]


def test_fan_out_over_workers_and_shards_fires_each_callback_once_after_the_last_member(
    redis_client: redis.Redis,
) -> None:
    ids = [f"o{n}" for n in range(12)]
    with lowkiq.Workflow(
        "reindex-42", on_complete=Done, on_success=Success, payload={"account": 42}
    ) as wf:
        Member.perform_async(jobs(*ids))
        Other.perform_async(jobs("a", "b", "c"))
    assert wf.status() == lowkiq.WorkflowStatus(pending=15)
    assert len({i for i in ids if Member.queue().shard_of(i) == 0}) not in (0, len(ids))

    drain(Member)
    assert lowkiq.workflow("reindex-42").status() == lowkiq.WorkflowStatus(pending=3, done=12)
    assert callbacks(Done) == [] and callbacks(Success) == []  # not before the last member

    drain(Other)
    assert wf.status() == lowkiq.WorkflowStatus(done=15, complete=True, succeeded=True)
    body = callback_body("reindex-42", {"account": 42}, done=15)
    assert callbacks(Done) == [("reindex-42", [body])]
    assert callbacks(Success) == [("reindex-42", [body])]
    catch_up(redis_client, "reindex-42")
    assert callbacks(Done) == [] and callbacks(Success) == []


def test_a_workflow_without_members_completes_when_its_block_ends(
    redis_client: redis.Redis,
) -> None:
    with lowkiq.Workflow("empty", on_complete=Done, on_success=Success) as wf:
        pass
    assert wf.status() == lowkiq.WorkflowStatus(complete=True, succeeded=True)
    assert callbacks(Done) == [("empty", [callback_body("empty", None)])]
    assert len(callbacks(Success)) == 1


def test_members_that_end_before_the_block_does_are_counted_once(
    redis_client: redis.Redis,
) -> None:
    with lowkiq.Workflow("early", on_complete=Done) as wf:
        Member.perform_async(jobs("a", "b"))
        drain(Member)  # they end while the workflow is still open
        assert callbacks(Done) == []
        Member.perform_async(jobs("c"))
    assert wf.status() == lowkiq.WorkflowStatus(pending=1, done=2)
    assert callbacks(Done) == []
    drain(Member)
    assert callbacks(Done) == [("early", [callback_body("early", None, done=3)])]


def test_a_dead_member_fires_on_complete_and_never_on_success(redis_client: redis.Redis) -> None:
    def plan(payloads_by_id: dict[str, list[Any]]) -> None:
        if "bad" in payloads_by_id:
            raise lowkiq.Kill("no such customer")

    Member.plan = staticmethod(plan)
    Member.batch_size = 1
    try:
        with lowkiq.Workflow("w", on_complete=Done, on_success=Success, payload=[1]) as wf:
            Member.perform_async(jobs("ok1", "bad", "ok2"))
        drain(Member)
    finally:
        del Member.batch_size
    assert wf.status() == lowkiq.WorkflowStatus(done=2, dead=1, complete=True)
    assert callbacks(Done) == [("w", [callback_body("w", [1], done=2, dead=1)])]
    assert callbacks(Success) == []
    catch_up(redis_client, "w")
    assert callbacks(Done) == [] and callbacks(Success) == []
    assert [job["id"] for job in Member.queries().morgue_range_by_id("-", "+")] == ["bad"]


def test_payloads_of_one_id_that_merge_are_separate_members(redis_client: redis.Redis) -> None:
    with lowkiq.Workflow("merges", on_complete=Done) as wf:
        Member.perform_async([{"id": "x", "payload": 1, "score": 1}])
        Member.perform_async([{"id": "x", "payload": 2, "score": 2}])
        Member.perform_async([{"id": "x", "payload": 1, "score": 1}])  # the same: merged away
    assert wf.status().total == 2
    drain(Member)
    assert Member.batches == [{"x": [1, 2]}]
    assert callbacks(Done) == [("merges", [callback_body("merges", None, done=2)])]


def test_an_equal_payload_inside_and_outside_is_performed_once_and_the_member_settles(
    redis_client: redis.Redis,
) -> None:
    Member.perform_async([{"id": "x", "payload": "same", "score": 1}])
    with lowkiq.Workflow("inside", on_complete=Done) as wf:
        Member.perform_async([{"id": "x", "payload": "same", "score": 1}])
    assert wf.status().total == 1
    drain(Member)
    assert Member.batches == [{"x": ["same"]}]
    assert callbacks(Done) == [("inside", [callback_body("inside", None, done=1)])]


def test_two_workflows_with_an_equal_payload_of_one_id_both_settle(
    redis_client: redis.Redis,
) -> None:
    with lowkiq.Workflow("one", on_complete=Done):
        Member.perform_async([{"id": "x", "payload": "same", "score": 1}])
    with lowkiq.Workflow("two", on_complete=Done):
        Member.perform_async([{"id": "x", "payload": "same", "score": 1}])
    drain(Member)
    assert Member.batches == [{"x": ["same"]}]
    assert sorted(callbacks(Done)) == [
        ("one", [callback_body("one", None, done=1)]),
        ("two", [callback_body("two", None, done=1)]),
    ]


def test_a_failed_member_counts_failed_then_done_after_its_retry(
    redis_client: redis.Redis,
) -> None:
    tries: list[int] = []

    def plan(payloads_by_id: dict[str, list[Any]]) -> None:
        tries.append(1)
        if len(tries) == 1:
            raise RuntimeError("flaky")

    Member.plan = staticmethod(plan)
    with lowkiq.Workflow("retry", on_complete=Done, on_success=Success) as wf:
        Member.perform_async([{"id": "x", "payload": 1}])
    drain(Member)
    assert wf.status() == lowkiq.WorkflowStatus(failed=1)
    assert callbacks(Done) == []
    drain(Member, future=True)
    assert wf.status() == lowkiq.WorkflowStatus(done=1, complete=True, succeeded=True)
    assert callbacks(Done) == [("retry", [callback_body("retry", None, done=1)])]
    assert len(callbacks(Success)) == 1


def test_retries_exhausted_kill_only_the_oldest_payload(redis_client: redis.Redis) -> None:
    def plan(payloads_by_id: dict[str, list[Any]]) -> None:
        if 1 in payloads_by_id.get("x", []):
            raise RuntimeError("the first payload always fails")

    Member.plan = staticmethod(plan)
    with lowkiq.Workflow("exhaust", on_complete=Done, on_success=Success) as wf:
        Member.perform_async([{"id": "x", "payload": 1, "score": 1}])
        Member.perform_async([{"id": "x", "payload": 2, "score": 2}])
    drain(Member)  # retry_count 0
    drain(Member, future=True)  # 1
    assert wf.status() == lowkiq.WorkflowStatus(failed=2)
    drain(Member, future=True)  # 2 = max_retry_count: payload 1 dies, 2 goes on fresh
    assert Member.batches == [{"x": [1, 2]}] * 3 + [{"x": [2]}]
    assert wf.status() == lowkiq.WorkflowStatus(done=1, dead=1, complete=True)
    assert callbacks(Done) == [("exhaust", [callback_body("exhaust", None, done=1, dead=1)])]
    assert callbacks(Success) == []


def test_discard_counts_discarded_and_the_workflow_still_succeeds(
    redis_client: redis.Redis,
) -> None:
    def plan(payloads_by_id: dict[str, list[Any]]) -> None:
        raise lowkiq.Discard("order was cancelled")

    Member.plan = staticmethod(plan)
    with lowkiq.Workflow("discard", on_complete=Done, on_success=Success) as wf:
        Member.perform_async(jobs("a", "b"))
    drain(Member)
    assert wf.status() == lowkiq.WorkflowStatus(discarded=2, complete=True, succeeded=True)
    body = callback_body("discard", None, discarded=2)
    assert callbacks(Done) == [("discard", [body])]
    assert callbacks(Success) == [("discard", [body])]


def test_batch_failed_settles_each_id_by_its_own_fate(redis_client: redis.Redis) -> None:
    runs: list[int] = []

    def plan(payloads_by_id: dict[str, list[Any]]) -> None:
        runs.append(1)
        if len(runs) == 1:
            raise lowkiq.BatchFailed(
                {"b": RuntimeError("retry b"), "c": lowkiq.Kill("c is dead"), "d": lowkiq.Discard()}
            )

    Single.plan = staticmethod(plan)
    with lowkiq.Workflow("partial", on_complete=Done, on_success=Success) as wf:
        Single.perform_async(jobs("a", "b", "c", "d"))
    drain(Single)
    assert Single.batches == [{i: [{"v": i}] for i in "abcd"}]
    assert wf.status() == lowkiq.WorkflowStatus(done=1, failed=1, dead=1, discarded=1)
    assert callbacks(Done) == []
    drain(Single, future=True)
    assert wf.status() == lowkiq.WorkflowStatus(done=2, dead=1, discarded=1, complete=True)
    body = callback_body("partial", None, done=2, dead=1, discarded=1)
    assert callbacks(Done) == [("partial", [body])]
    assert callbacks(Success) == []


def test_yielded_payloads_stay_pending_until_they_run(redis_client: redis.Redis) -> None:
    seen: list[lowkiq.WorkflowStatus] = []

    def plan(payloads_by_id: dict[str, list[Any]]) -> None:
        RELAYER.flush()  # what the batches before this one told (a thread does it)
        seen.append(lowkiq.workflow("yields").status())
        payloads = payloads_by_id["x"]
        if len(payloads) > 1:
            lowkiq.current_batch().yield_rest("x", payloads[1:])

    Member.plan = staticmethod(plan)
    with lowkiq.Workflow("yields", on_complete=Done):
        Member.perform_async([{"id": "x", "payload": n, "score": n} for n in (1, 2, 3)])
    drain(Member)
    assert Member.batches == [{"x": [1, 2, 3]}, {"x": [2, 3]}, {"x": [3]}]
    assert seen == [
        lowkiq.WorkflowStatus(pending=3),
        lowkiq.WorkflowStatus(pending=2, done=1),
        lowkiq.WorkflowStatus(pending=1, done=2),
    ]
    assert callbacks(Done) == [("yields", [callback_body("yields", None, done=3)])]


def crash_with_a_batch(worker: type[lowkiq.Worker], shard: int) -> list[str]:
    """A process takes ``shard``, pops a batch and dies (its lease lapses): the ids."""
    queue = worker.queue()
    lease, _, _ = leases.acquire(queue, shard, "crashed-process", 30)
    assert lease is not None
    popped = queue.pop(shard, lease.token, worker.batch_size)
    queue.client.delete(queue.keys.lease(shard))
    return [job.id for job in popped.jobs]


def test_a_crashed_batch_is_restored_by_the_next_owner_and_its_members_stay_pending(
    redis_client: redis.Redis,
) -> None:
    with lowkiq.Workflow("crash", on_complete=Done, on_success=Success) as wf:
        Single.perform_async(jobs("a", "b", "c", "d", "e"))
    assert crash_with_a_batch(Single, 0) == ["a", "b", "c", "d"]
    catch_up(redis_client, "crash")
    assert wf.status() == lowkiq.WorkflowStatus(pending=5)
    drain(Single)  # takes the shard: restores the batch, then runs everything
    assert sorted(i for batch in Single.batches for i in batch) == ["a", "b", "c", "d", "e"]
    assert wf.status() == lowkiq.WorkflowStatus(done=5, complete=True, succeeded=True)
    assert len(callbacks(Done)) == 1 and len(callbacks(Success)) == 1


def test_a_job_dying_max_restores_times_is_a_dead_member(redis_client: redis.Redis) -> None:
    Single.max_restores = 2
    try:
        with lowkiq.Workflow("dies", on_complete=Done, on_success=Success) as wf:
            Single.perform_async(jobs("a"))
        with lowkiq.Workflow("lives", on_complete=Done):
            Single.perform_async(jobs("b"))
        assert crash_with_a_batch(Single, 0) == ["a", "b"]
        assert crash_with_a_batch(Single, 0) == ["a"]  # a restored job runs alone
        drain(Single)  # restores it a second time: dead; then runs "b"
    finally:
        del Single.max_restores
    assert Single.batches == [{"b": [{"v": "b"}]}]
    assert wf.status() == lowkiq.WorkflowStatus(dead=1, complete=True)
    assert sorted(callbacks(Done)) == [
        ("dies", [callback_body("dies", None, dead=1)]),
        ("lives", [callback_body("lives", None, done=1)]),
    ]
    assert callbacks(Success) == []


def test_cancel_deletes_queued_members_and_fires_on_complete_only(
    redis_client: redis.Redis,
) -> None:
    Member.perform_async([{"id": "a", "payload": "not a member", "score": 1}])
    with lowkiq.Workflow("cancelled", on_complete=Done, on_success=Success) as wf:
        Member.perform_async(jobs("a", "b", "c"))
        Other.perform_async(jobs("d"))
    drain(Other)
    Other.perform_async(jobs("later"), after="cancelled")
    assert wf.cancel() == 3
    assert wf.status() == lowkiq.WorkflowStatus(done=1, discarded=3, complete=True)
    body = callback_body("cancelled", None, done=1, discarded=3, succeeded=False)
    assert callbacks(Done) == [("cancelled", [body])]
    assert callbacks(Success) == []
    drain(Member)
    assert Member.batches == [{"a": ["not a member"]}]  # payloads of no workflow stay
    drain(Other)
    assert [list(b) for b in Other.batches] == [["d"]]  # "later" stays held
    assert len(lowkiq.workflow("cancelled").held()) == 1
    catch_up(redis_client, "cancelled")
    assert callbacks(Done) == [] and callbacks(Success) == []


def test_cancel_of_a_workflow_whose_members_ended_completes_it_once(
    redis_client: redis.Redis,
) -> None:
    def plan(payloads_by_id: dict[str, list[Any]]) -> None:
        raise RuntimeError("retry later")

    Member.plan = staticmethod(plan)
    with lowkiq.Workflow("retrying", on_complete=Done, on_success=Success) as wf:
        Member.perform_async(jobs("a"))
    drain(Member)
    assert wf.status() == lowkiq.WorkflowStatus(failed=1)
    assert wf.cancel() == 1  # a member waiting for its retry is queued: deleted
    assert wf.status() == lowkiq.WorkflowStatus(discarded=1, complete=True)
    assert len(callbacks(Done)) == 1 and callbacks(Success) == []
    drain(Member, future=True)
    assert len(Member.batches) == 1


def test_after_jobs_wait_for_success(redis_client: redis.Redis) -> None:
    with lowkiq.Workflow("first", on_complete=Done):
        Member.perform_async(jobs("a"))
    Other.perform_async(jobs("next"), after="first")
    assert drain(Other).performed == 0
    assert [call.jobs[0][0] for call in lowkiq.workflow("first").held()] == ["next"]
    drain(Member)
    drain(Other)
    assert Other.batches == [{"next": [{"v": "next"}]}]
    assert lowkiq.workflow("first").held() == []
    catch_up(redis_client, "first")
    assert drain(Other).performed == 0  # released once


def test_after_a_succeeded_workflow_jobs_go_at_once(redis_client: redis.Redis) -> None:
    with lowkiq.Workflow("done-already"):
        Member.perform_async(jobs("a"))
    drain(Member)
    Other.perform_async(jobs("next"), after="done-already")
    drain(Other)
    assert Other.batches == [{"next": [{"v": "next"}]}]


def test_after_a_list_of_workflows_waits_for_all_of_them(redis_client: redis.Redis) -> None:
    with lowkiq.Workflow("w1"):
        Member.perform_async(jobs("a"))
    with lowkiq.Workflow("w2"):
        Other.perform_async(jobs("b"))
    Success.perform_async([{"id": "both", "payload": 1}], after=["w1", "w2"])
    drain(Member)
    assert callbacks(Success) == []
    drain(Other)
    assert callbacks(Success) == [("both", [1])]
    catch_up(redis_client, "w1", "w2")
    assert callbacks(Success) == []


def test_after_a_failed_workflow_jobs_stay_held_until_released(
    redis_client: redis.Redis,
) -> None:
    Member.plan = staticmethod(lambda payloads_by_id: (_ for _ in ()).throw(lowkiq.Kill("x")))
    with lowkiq.Workflow("failed", on_complete=Done):
        Member.perform_async(jobs("a"))
    Other.perform_async(jobs("held1"), after="failed")
    drain(Member)
    assert lowkiq.workflow("failed").status().dead == 1
    assert drain(Other).performed == 0
    Other.perform_async(jobs("held2"), after="failed")  # after it failed: held too
    assert drain(Other).performed == 0
    ref = lowkiq.workflow("failed")
    assert len(ref.held()) == 2
    assert ref.release_held() == 2
    assert ref.held() == []
    drain(Other)
    assert sorted(i for batch in Other.batches for i in batch) == ["held1", "held2"]


def test_delete_held_drops_the_held_jobs(redis_client: redis.Redis) -> None:
    with lowkiq.Workflow("open-long"):
        Member.perform_async(jobs("a"))
    Other.perform_async(jobs("never"), after="open-long")
    assert lowkiq.workflow("open-long").delete_held() == 1
    drain(Member)
    drain(Other)
    assert Other.batches == []


class Chain(lowkiq.Worker):
    """An ``on_success`` callback that opens the next workflow of a chain."""

    shards_count = 2

    @classmethod
    def perform(cls, payloads_by_id: dict[str, list[Any]]) -> None:
        for workflow_id, bodies in payloads_by_id.items():
            step = bodies[0]["payload"]["step"]
            if step < 3:
                with lowkiq.Workflow(
                    f"step-{step + 1}", on_success=Chain, payload={"step": step + 1}
                ):
                    Member.perform_async(jobs(f"{workflow_id}-m1", f"{workflow_id}-m2"))
            else:
                Done.perform_async([{"id": "chain-end", "payload": workflow_id}])


def test_a_callback_that_opens_a_workflow_chains_them(redis_client: redis.Redis) -> None:
    with lowkiq.Workflow("step-1", on_success=Chain, payload={"step": 1}):
        Member.perform_async(jobs("m"))
    for _ in range(3):
        drain(Member)
        drain(Chain)
    assert callbacks(Done) == [("chain-end", ["step-3"])]
    assert [lowkiq.workflow(f"step-{n}").status().done for n in (1, 2, 3)] == [1, 2, 2]


def test_aperform_async_inside_async_with_adds_members(redis_client: redis.Redis) -> None:
    async def enqueue() -> lowkiq.WorkflowStatus:
        async with lowkiq.Workflow("async", on_complete=Done) as wf:
            await Member.aperform_async(jobs("a", "b"))
            Other.perform_async(jobs("c"))
        return wf.status()

    assert run_coroutine(enqueue()) == lowkiq.WorkflowStatus(pending=3)
    drain(Member)
    drain(Other)
    assert callbacks(Done) == [("async", [callback_body("async", None, done=3)])]


# -- bad input: a clear error, nothing changed --------------------------------------------------


def test_an_unknown_after_id_stores_nothing(redis_client: redis.Redis) -> None:
    with pytest.raises(lowkiq.WorkflowError, match="nope"):
        Member.perform_async(jobs("a"), after="nope")
    with lowkiq.Workflow("known"):
        pass
    with pytest.raises(lowkiq.WorkflowError, match="nope"):
        Member.perform_async(jobs("a"), after=["known", "nope"])
    assert lowkiq.workflow("known").held() == []
    assert drain(Member).performed == 0


def test_an_unknown_after_id_inside_a_workflow_adds_no_member(redis_client: redis.Redis) -> None:
    with lowkiq.Workflow("outer", on_complete=Done) as wf:
        Member.perform_async(jobs("a"))
        with pytest.raises(lowkiq.WorkflowError, match="nope"):
            Member.perform_async(jobs("a", "b"), after="nope")  # "a": enqueued before
    assert wf.status() == lowkiq.WorkflowStatus(pending=1)
    drain(Member)
    assert callbacks(Done) == [("outer", [callback_body("outer", None, done=1)])]


def test_a_callback_that_is_not_a_worker_is_refused(redis_client: redis.Redis) -> None:
    with pytest.raises(lowkiq.WorkflowError, match="on_complete"):
        lowkiq.Workflow("w", on_complete=print)  # type: ignore[arg-type]
    with pytest.raises(lowkiq.WorkflowError, match="on_success"):
        lowkiq.Workflow("w", on_success=Member())  # type: ignore[arg-type]
    with pytest.raises(lowkiq.WorkflowError):
        lowkiq.workflow("w").status()


def test_an_id_is_reused_only_once_complete(redis_client: redis.Redis) -> None:
    with lowkiq.Workflow("again", on_complete=Done):
        Member.perform_async(jobs("a"))
    with pytest.raises(lowkiq.WorkflowError, match="open"), lowkiq.Workflow("again"):
        Member.perform_async(jobs("b"))  # never runs
    assert lowkiq.workflow("again").status() == lowkiq.WorkflowStatus(pending=1)
    drain(Member)
    assert Member.batches == [{"a": [{"v": "a"}]}]
    assert len(callbacks(Done)) == 1
    with lowkiq.Workflow("again", on_complete=Done):  # complete: a new one of that id
        Member.perform_async(jobs("c"))
    drain(Member)
    assert callbacks(Done) == [("again", [callback_body("again", None, done=1)])]


def test_a_workflow_object_is_entered_once(redis_client: redis.Redis) -> None:
    wf = lowkiq.Workflow("once", on_complete=Done)
    with wf:
        Member.perform_async(jobs("a"))
    with pytest.raises(lowkiq.WorkflowError, match="entered once"), wf:
        Member.perform_async(jobs("b"))
    assert wf.status() == lowkiq.WorkflowStatus(pending=1)
    drain(Member)
    assert len(callbacks(Done)) == 1


def test_a_task_enqueueing_after_the_block_ended_is_refused(redis_client: redis.Redis) -> None:
    async def main() -> None:
        started = asyncio.Event()
        release = asyncio.Event()

        async def late() -> None:
            started.set()
            await release.wait()
            await Member.aperform_async(jobs("late"))

        async with lowkiq.Workflow("tasks", on_complete=Done):
            task = asyncio.create_task(late())
            await started.wait()
            await Member.aperform_async(jobs("a"))
        release.set()
        with pytest.raises(lowkiq.WorkflowError, match="closed"):
            await task

    run_coroutine(main())
    assert lowkiq.workflow("tasks").status() == lowkiq.WorkflowStatus(pending=1)
    drain(Member)
    assert Member.batches == [{"a": [{"v": "a"}]}]
    assert callbacks(Done) == [("tasks", [callback_body("tasks", None, done=1)])]


def test_yield_rest_of_an_id_holding_an_equal_payload_in_and_out_of_a_workflow(
    redis_client: redis.Redis,
) -> None:
    def plan(payloads_by_id: dict[str, list[Any]]) -> None:
        payloads = payloads_by_id["x"]
        if payloads == ["A", "B"]:
            lowkiq.current_batch().yield_rest("x", ["B"])

    Member.plan = staticmethod(plan)
    Member.perform_async([{"id": "x", "payload": "A", "score": 1}])
    with lowkiq.Workflow("equal", on_complete=Done) as wf:
        Member.perform_async(
            [{"id": "x", "payload": p, "score": s} for p, s in (("A", 1), ("B", 2))]
        )
    drain(Member)
    assert Member.batches == [{"x": ["A", "B"]}, {"x": ["B"]}]  # "B" runs after its yield
    assert wf.status() == lowkiq.WorkflowStatus(done=2, complete=True, succeeded=True)
    assert callbacks(Done) == [("equal", [callback_body("equal", None, done=2)])]


def test_a_hot_id_with_many_members_is_settled_slice_by_slice(redis_client: redis.Redis) -> None:
    killed: list[int] = []

    def plan(payloads_by_id: dict[str, list[Any]]) -> None:
        if len(Single.batches) == 2:
            killed.extend(payloads_by_id["hot"])
            raise lowkiq.Kill("the second slice dies")

    Single.plan = staticmethod(plan)
    # Payloads of no workflow, some equal to members; more than a batch takes of one id.
    Single.perform_async([{"id": "hot", "payload": n, "score": n} for n in range(500, 700)])
    with lowkiq.Workflow("hot", on_complete=Done, on_success=Success) as wf:
        for start in range(0, 600, 100):
            Single.perform_async(
                [{"id": "hot", "payload": n, "score": n} for n in range(start, start + 100)]
            )
    assert wf.status().total == 600
    drain(Single)
    performed = [n for batch in Single.batches for n in batch["hot"]]
    assert len(Single.batches) > 2 and set(performed) == set(range(700))
    members_killed = len([n for n in killed if n < 600])
    assert members_killed > 0
    assert wf.status() == lowkiq.WorkflowStatus(
        done=600 - members_killed, dead=members_killed, complete=True
    )
    body = callback_body("hot", None, done=600 - members_killed, dead=members_killed)
    assert callbacks(Done) == [("hot", [body])]
    assert callbacks(Success) == []


def test_cancel_deletes_a_hot_ids_member_payloads_only(redis_client: redis.Redis) -> None:
    Single.perform_async([{"id": "hot", "payload": -n, "score": n} for n in range(1, 41)])
    with lowkiq.Workflow("hot", on_complete=Done) as wf:
        Single.perform_async([{"id": "hot", "payload": n, "score": n} for n in range(100)])
    assert wf.cancel() == 100
    assert callbacks(Done) == [
        ("hot", [callback_body("hot", None, discarded=100, succeeded=False)])
    ]
    drain(Single)
    performed = sorted(n for batch in Single.batches for n in batch["hot"])
    assert performed == sorted(-n for n in range(1, 41))


def test_a_last_member_dying_max_restores_times_completes_the_workflow_at_once(
    redis_client: redis.Redis,
) -> None:
    Single.max_restores = 1
    try:
        with lowkiq.Workflow("dies", on_complete=Done, on_success=Success) as wf:
            Single.perform_async(jobs("a"))
        assert crash_with_a_batch(Single, 0) == ["a"]
        drain(Single)  # takes the shard: "a" died running once, the most it may
    finally:
        del Single.max_restores
    assert Single.batches == []
    assert wf.status() == lowkiq.WorkflowStatus(dead=1, complete=True)
    assert callbacks(Done) == [("dies", [callback_body("dies", None, dead=1)])]


def test_a_snoozed_member_stays_pending_until_it_runs(redis_client: redis.Redis) -> None:
    def plan(payloads_by_id: dict[str, list[Any]]) -> None:
        if len(Member.batches) == 1:
            raise lowkiq.Snooze(3600)

    Member.plan = staticmethod(plan)
    with lowkiq.Workflow("snoozed", on_complete=Done):
        Member.perform_async(jobs("a"))
    drain(Member)
    assert lowkiq.workflow("snoozed").status() == lowkiq.WorkflowStatus(pending=1)
    assert callbacks(Done) == []
    drain(Member, future=True)
    assert callbacks(Done) == [("snoozed", [callback_body("snoozed", None, done=1)])]


def test_members_of_groups_settle(redis_client: redis.Redis) -> None:
    with lowkiq.Workflow("groups", on_complete=Done):
        Member.perform_async(
            [{"id": f"g{n}", "payload": n, "group": f"tenant{n % 3}"} for n in range(9)]
        )
        Member.perform_async([{"id": "plain", "payload": 1}])
    drain(Member)
    assert callbacks(Done) == [("groups", [callback_body("groups", None, done=10)])]


def test_an_inner_block_has_its_own_members_and_the_outer_goes_on_after_it(
    redis_client: redis.Redis,
) -> None:
    with lowkiq.Workflow("outer", on_complete=Done) as outer:
        Member.perform_async(jobs("a"))
        with lowkiq.Workflow("inner", on_complete=Done) as inner:
            Member.perform_async(jobs("b", "c"))
        Member.perform_async(jobs("d"))
    assert (outer.status().total, inner.status().total) == (2, 2)
    drain(Member)
    assert sorted(callbacks(Done)) == [
        ("inner", [callback_body("inner", None, done=2)]),
        ("outer", [callback_body("outer", None, done=2)]),
    ]


def test_a_job_held_after_another_workflow_inside_a_block_is_a_member_once_released(
    redis_client: redis.Redis,
) -> None:
    with lowkiq.Workflow("first", on_complete=Done):
        Member.perform_async(jobs("a"))
    with lowkiq.Workflow("second", on_complete=Done) as second:
        Other.perform_async(jobs("b"), after="first")
    assert second.status() == lowkiq.WorkflowStatus(pending=1)
    drain(Other)
    assert Other.batches == [] and callbacks(Done) == []
    drain(Member)  # "first" succeeds: "b" is released
    assert callbacks(Done) == [("first", [callback_body("first", None, done=1)])]
    drain(Other)
    assert Other.batches == [{"b": [{"v": "b"}]}]
    assert callbacks(Done) == [("second", [callback_body("second", None, done=1)])]


class Resharded(lowkiq.Worker):
    """Members of a queue resharded while they wait."""

    shards_count = 2
    batch_size = 5
    performed: ClassVar[list[str]] = []

    @classmethod
    def perform(cls, payloads_by_id: dict[str, list[Any]]) -> None:
        cls.performed.extend(payloads_by_id)


def test_cancel_after_a_reshard_deletes_the_members_where_they_moved(
    redis_client: redis.Redis,
) -> None:
    Resharded.performed = []
    Resharded.perform_async([{"id": "o1", "payload": "not a member"}])
    with lowkiq.Workflow("moved", on_complete=Done) as wf:
        Resharded.perform_async([{"id": f"o{n}", "payload": n} for n in range(20)])
    reshard(Resharded.queue(), 5)  # every job moves to one of 5 new shards
    assert wf.cancel() == 20
    drain(Resharded)
    assert Resharded.performed == ["o1"]
    body = callback_body("moved", None, discarded=20, succeeded=False)
    assert callbacks(Done) == [("moved", [body])]


def test_the_sweep_finds_members_a_reshard_moved(
    redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    Resharded.performed = []
    with lowkiq.Workflow("moved", on_complete=Done):
        Resharded.perform_async([{"id": f"o{n}", "payload": n} for n in range(20)])
    reshard(Resharded.queue(), 5)
    # The process that ran them died before its relay: the sweep must find the records.
    monkeypatch.setattr(RELAYER, "notify", lambda queue_name, shard: None)
    drain(Resharded)
    assert len(Resharded.performed) == 20
    catch_up(redis_client)  # the sweep, as if an hour later
    assert callbacks(Done) == [("moved", [callback_body("moved", None, done=20)])]


def test_after_its_own_workflow_inside_the_block_is_refused(redis_client: redis.Redis) -> None:
    with lowkiq.Workflow("self", on_complete=Done) as wf:
        Member.perform_async(jobs("a"))
        with pytest.raises(lowkiq.WorkflowError, match="own"):
            Other.perform_async(jobs("b"), after="self")
    assert wf.status() == lowkiq.WorkflowStatus(pending=1)
    assert wf.held() == []
    drain(Member)
    assert callbacks(Done) == [("self", [callback_body("self", None, done=1)])]


def test_concurrent_relays_and_sweeps_count_each_member_once_and_fire_once(
    redis_client: redis.Redis,
) -> None:
    failed: set[str] = set()

    def plan(payloads_by_id: dict[str, list[Any]]) -> None:
        if len(Member.batches) % 3 == 0 and not failed & set(payloads_by_id):
            failed.update(payloads_by_id)
            raise RuntimeError("a retry")  # once per id: never exhausted

    Member.plan = staticmethod(plan)
    names = [f"c{n}" for n in range(8)]
    for n, name in enumerate(names):
        with lowkiq.Workflow(name, on_complete=Done, on_success=Success, payload=n):
            Member.perform_async([{"id": f"o{k}", "payload": {"n": n}} for k in range(n, n + 10)])
    stop = threading.Event()
    errors: list[BaseException] = []

    def hammer() -> None:
        client = lowkiq.settings.client()
        try:
            while not stop.is_set():
                client.delete(relay.SWEEP_LOCK)
                relay.sweep(client, time.time() + 3600)
                for shard in range(Member.shards_count):
                    relay.relay(client, Member.queue_name, shard)
                for name in names:
                    relay.fire(client, name)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=hammer) for _ in range(3)]
    for thread in threads:
        thread.start()
    try:
        for _ in range(6):
            drain(Member, future=True)
            drain(Done)
            drain(Success)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert errors == []
    catch_up(redis_client, *names)
    drain(Done)
    drain(Success)
    expected = sorted((name, [callback_body(name, n, done=10)]) for n, name in enumerate(names))
    assert sorted(Done.calls) == expected
    assert sorted(Success.calls) == expected


def test_an_unknown_after_id_in_an_async_block_adds_no_member(redis_client: redis.Redis) -> None:
    async def enqueue() -> None:
        async with lowkiq.Workflow("async-outer", on_complete=Done):
            await Member.aperform_async(jobs("a"))
            with pytest.raises(lowkiq.WorkflowError, match="nope"):
                await Member.aperform_async(jobs("a", "b"), after="nope")
            with pytest.raises(lowkiq.WorkflowError, match="own"):
                await Member.aperform_async(jobs("c"), after="async-outer")

    run_coroutine(enqueue())
    assert lowkiq.workflow("async-outer").status() == lowkiq.WorkflowStatus(pending=1)
    drain(Member)
    assert callbacks(Done) == [("async-outer", [callback_body("async-outer", None, done=1)])]


def test_a_finished_workflow_expires_after_workflow_ttl_but_its_held_jobs_stay(
    redis_client: redis.Redis,
) -> None:
    lowkiq.settings.workflow_ttl = 60
    Member.plan = staticmethod(lambda payloads_by_id: (_ for _ in ()).throw(lowkiq.Kill("x")))
    with lowkiq.Workflow("short", on_complete=Done) as wf:
        Member.perform_async(jobs("a"))
    Other.perform_async(jobs("held"), after="short")
    prefix = store.prefix("short")
    assert redis_client.pttl(prefix + "state") == -1  # not before it completes
    drain(Member)
    assert wf.status().complete
    instance = redis_client.hget(prefix + "state", "instance").decode()
    kept = [prefix + key for key in ("state", "states", "registered")]  # (a member dead: states)
    kept.append(store.ended_key("short", instance))
    for key in kept:
        assert 0 < redis_client.pttl(key) <= 60_000
    assert redis_client.pttl(prefix + "held") == -1
    redis_client.delete(*kept)
    with pytest.raises(lowkiq.WorkflowError, match="expired"):
        wf.status()
    assert lowkiq.workflow("short").release_held() == 1
    drain(Other)
    assert Other.batches == [{"held": [{"v": "held"}]}]
