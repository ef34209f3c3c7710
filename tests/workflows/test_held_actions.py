"""``Worker.actions()`` releases or deletes a queue's jobs held ``after=`` a workflow that
failed (an operator's call), and leaves other queues' held jobs alone."""

from __future__ import annotations

from typing import Any

import pytest
import redis

import lowkiq
from lowkiq.testing import drain
from lowkiq.workflows import store


class Member(lowkiq.Worker):
    @classmethod
    def perform(cls, payloads_by_id: dict[str, list[Any]]) -> None:
        raise lowkiq.Kill(RuntimeError("dead"))


class Next(lowkiq.Worker):
    seen: list[str] = []

    @classmethod
    def perform(cls, payloads_by_id: dict[str, list[Any]]) -> None:
        cls.seen += list(payloads_by_id)


class Other(lowkiq.Worker):
    @classmethod
    def perform(cls, payloads_by_id: dict[str, list[Any]]) -> None:
        pass


@pytest.fixture
def failed(redis_client: redis.Redis) -> str:
    Next.seen = []
    with lowkiq.Workflow("import"):
        Member.perform_async([{"id": "row"}])
    drain(Member)
    Next.perform_async([{"id": "report"}], after="import")
    Other.perform_async([{"id": "other"}], after="import")
    assert lowkiq.workflow("import").status() == lowkiq.WorkflowStatus(dead=1, complete=True)
    return "import"


def test_jobs_after_a_failed_workflow_stay_held_until_released(failed: str) -> None:
    drain(Next)
    assert Next.seen == []
    actions = Next.actions()
    assert [job[0] for call in actions.held(failed) for job in call.jobs] == ["report"]
    assert actions.release_held(failed) == 1
    drain(Next)
    assert Next.seen == ["report"]
    assert actions.held(failed) == []
    assert len(lowkiq.workflow(failed).held()) == 1  # Other's call is still held


def test_deleted_held_jobs_never_run(failed: str) -> None:
    assert Next.actions().delete_held(failed) == 1
    assert Next.actions().release_held(failed) == 0
    drain(Next)
    assert Next.seen == []
    assert [call.queue for call in lowkiq.workflow(failed).held()] == [Other.queue_name]


def test_a_call_whose_next_workflow_expired_stays_held_in_the_one_that_succeeded(
    redis_client: redis.Redis,
) -> None:
    Next.seen = []
    with lowkiq.Workflow("first"):
        Other.perform_async([{"id": "a"}])
    with lowkiq.Workflow("second"):
        Other.perform_async([{"id": "b"}])
    Next.perform_async([{"id": "report"}], after=["first", "second"])
    redis_client.delete(store.prefix("second") + "state")  # as its expiry would
    drain(Other)  # "first" succeeds: the call cannot go on to "second"
    assert lowkiq.workflow("first").status().succeeded
    assert [call.after for call in lowkiq.workflow("first").held()] == [["second"]]
    # Its relay ended: "first" is finished (fired, expiring), nothing left to tell it.
    assert redis_client.zscore(store.UNFINISHED, "first") is None
    assert redis_client.ttl(store.prefix("first") + "state") > 0
    assert Next.actions().release_held("first") == 1
    drain(Next)
    assert Next.seen == ["report"]


def test_an_action_that_deletes_members_tells_their_workflow_at_once(
    redis_client: redis.Redis,
) -> None:
    with lowkiq.Workflow("dropped") as wf:
        Other.perform_async([{"id": "a"}, {"id": "b"}, {"id": "c"}])
    Other.actions().delete(["a"])
    Other.actions().kill(["b"])
    assert wf.status() == lowkiq.WorkflowStatus(pending=1, dead=1, discarded=1)
    Other.actions().clear()
    assert wf.status() == lowkiq.WorkflowStatus(dead=1, discarded=2, complete=True)
