"""Workflows on a 3-master Redis Cluster: a workflow's state lives in a slot of its own,
its members in shards served by other masters; settling them across slots stays exact,
callbacks come once, after the last member; ``after=`` and ``cancel`` too; and a worker
process SIGKILLed mid-workflow loses nothing (the property test of
tests/workflows/test_workflow_properties.py runs on this cluster too)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

import lowkiq
from lowkiq.clients.embedded_cluster import EmbeddedCluster
from lowkiq.testing import drain
from lowkiq.workflows import store
from tests.apps.runner import WorkerProcess, eventually
from tests.cluster.cluster_support import shards_by_master
from tests.conftest import lowkiq_on
from tests.workflows.workflow_support import (
    Done,
    Member,
    Other,
    Single,
    Success,
    callback_body,
    callbacks,
    catch_up,
    check_crash_workflows,
    enqueue_crash_workflows,
    reset,
)


@pytest.fixture(autouse=True)
def fresh_workers() -> Iterator[None]:
    """The recording workers of tests/workflows/workflow_support.py start empty."""
    reset()
    yield
    reset()


def jobs(*ids: str) -> list[dict[str, Any]]:
    """One job per id, its payload ``{"v": id}``."""
    return [{"id": i, "payload": {"v": i}} for i in ids]


def test_members_on_several_masters_settle_in_the_workflows_slot_once(
    cluster_client: redis.RedisCluster,
) -> None:
    assert len(shards_by_master(cluster_client, Member)) > 1
    masters = {cluster_client.get_node_from_key(store.prefix(f"w{n}")).name for n in range(6)}
    assert len(masters) > 1, "workflows' slots on several masters"
    ids = [f"o{n}" for n in range(10)]
    for n in range(6):
        with lowkiq.Workflow(f"w{n}", on_complete=Done, on_success=Success, payload=n):
            Member.perform_async([{"id": i, "payload": {"w": n}} for i in ids[n:]])
            Other.perform_async(jobs("a", "b"))  # merges with every other workflow's
    drain(Member)
    assert callbacks(Done) == []
    drain(Other)
    expected = [(f"w{n}", [callback_body(f"w{n}", n, done=12 - n)]) for n in range(6)]
    assert sorted(callbacks(Done)) == expected
    assert sorted(callbacks(Success)) == expected
    catch_up(cluster_client, *(f"w{n}" for n in range(6)))
    assert callbacks(Done) == [] and callbacks(Success) == []


def test_outcomes_on_a_cluster_count_each_member_once(
    cluster_client: redis.RedisCluster,
) -> None:
    runs: list[int] = []

    def plan(payloads_by_id: dict[str, list[Any]]) -> None:
        runs.append(1)
        if len(runs) == 1:
            raise lowkiq.BatchFailed(
                {"b": RuntimeError("retry b"), "c": lowkiq.Kill("c is dead"), "d": lowkiq.Discard()}
            )

    Single.plan = staticmethod(plan)
    with lowkiq.Workflow("outcomes", on_complete=Done, on_success=Success) as wf:
        Single.perform_async(jobs("a", "b", "c", "d"))
        Single.perform_async([{"id": "a", "payload": 2, "score": 2}])  # a second member of "a"
        Single.perform_async(jobs("b"))  # the same payload again: one member
    assert wf.status().total == 5
    drain(Single)
    assert wf.status() == lowkiq.WorkflowStatus(done=2, failed=1, dead=1, discarded=1)
    assert callbacks(Done) == []
    drain(Single, future=True)
    body = callback_body("outcomes", None, done=3, dead=1, discarded=1)
    assert callbacks(Done) == [("outcomes", [body])]
    assert callbacks(Success) == []


def test_after_and_cancel_on_a_cluster(cluster_client: redis.RedisCluster) -> None:
    with lowkiq.Workflow("first", on_complete=Done):
        Member.perform_async(jobs("a", "b", "c"))
    with lowkiq.Workflow("second", on_complete=Done, on_success=Success):
        Member.perform_async(jobs("d", "e", "f"))
    Other.perform_async(jobs("after-both"), after=["first", "second"])
    Other.perform_async(jobs("after-second"), after="second")
    assert lowkiq.workflow("second").cancel() == 3
    assert callbacks(Done) == [
        ("second", [callback_body("second", None, discarded=3, succeeded=False)])
    ]
    drain(Member)
    assert sorted(i for batch in Member.batches for i in batch) == ["a", "b", "c"]
    assert callbacks(Done) == [("first", [callback_body("first", None, done=3)])]
    drain(Other)
    assert Other.batches == []  # "second" did not succeed: both calls stay held
    assert len(lowkiq.workflow("second").held()) == 2
    assert lowkiq.workflow("second").release_held() == 2
    drain(Other)
    assert sorted(i for batch in Other.batches for i in batch) == ["after-both", "after-second"]
    assert callbacks(Success) == []


def test_aperform_async_inside_async_with_on_a_cluster(
    cluster_client: redis.RedisCluster,
) -> None:
    async def enqueue() -> None:
        async with lowkiq.Workflow("async", on_complete=Done):
            await Member.aperform_async(jobs("a", "b", "c"))
            await Other.aperform_async(jobs("d"))

    asyncio.run(enqueue())
    assert lowkiq.workflow("async").status() == lowkiq.WorkflowStatus(pending=4)
    drain(Member)
    drain(Other)
    assert callbacks(Done) == [("async", [callback_body("async", None, done=4)])]


@pytest.fixture
def start(
    redis_cluster: EmbeddedCluster,
    redis_client: redis.Redis,
    redis_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Callable[[], WorkerProcess]]:
    """``start()`` starts a process of tests/apps/workflow_app.py on the cluster (its
    records on the single server); all are killed after the test."""
    monkeypatch.setenv("REDIS_URL", redis_url)  # the app's records, read on import
    from tests.apps.workflow_app import Finished, Step

    url = redis_cluster.url.replace("redis://", "redis+cluster://")
    started: list[WorkerProcess] = []
    with lowkiq_on(lambda: redis.RedisCluster.from_url(redis_cluster.url)):
        lowkiq.settings.workers = [Step, Finished]

        def run() -> WorkerProcess:
            process = WorkerProcess(
                "-r", "tests/apps/workflow_app.py", env={"REDIS_URL": url, "RECORD_URL": redis_url}
            )
            started.append(process)
            process.wait_started()
            return process

        yield run
        for process in started:
            process.close()


def test_a_process_killed_mid_workflow_on_a_cluster_loses_nothing(
    start: Callable[[], WorkerProcess], redis_client: redis.Redis
) -> None:
    from tests.apps.workflow_app import Step

    first = start()
    start()
    members = enqueue_crash_workflows(Step, 4)
    total = sum(len(m) for m in members.values())
    eventually(lambda: sum(redis_client.scard(f"wf:performed:{w}") for w in members) >= total // 4)
    first.kill()
    check_crash_workflows(redis_client, members)
    assert Step.metrics()["length"] == 0


def test_a_workflow_id_with_braces_and_non_ascii_on_a_cluster(
    cluster_client: redis.RedisCluster,
) -> None:
    name = "réindex {account:42} }{"
    with lowkiq.Workflow(name, on_complete=Done, on_success=Success, payload="ü") as wf:
        Member.perform_async(jobs("a", "b", "c"))
    with pytest.raises(lowkiq.WorkflowError):
        lowkiq.workflow("réindex {account:42}").status()  # another id
    drain(Member)
    assert wf.status() == lowkiq.WorkflowStatus(done=3, complete=True, succeeded=True)
    assert callbacks(Done) == [(name, [callback_body(name, "ü", done=3)])]
    assert len(callbacks(Success)) == 1
