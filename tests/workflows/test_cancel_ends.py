"""``cancel()`` ends a workflow whatever left it waiting: a process gone inside its block, a
member whose enqueue raised, a held member deleted; and it changes nothing once complete."""

from __future__ import annotations

from typing import Any

import pytest
import redis

import lowkiq
from lowkiq.testing import drain
from lowkiq.workflows import store


class Step(lowkiq.Worker):
    @classmethod
    def perform(cls, payloads_by_id: dict[str, list[Any]]) -> None:
        pass


class Finished(lowkiq.Worker):
    seen: list[dict[str, Any]] = []

    @classmethod
    def perform(cls, payloads_by_id: dict[str, list[Any]]) -> None:
        cls.seen += [payload for payloads in payloads_by_id.values() for payload in payloads]


@pytest.fixture(autouse=True)
def clean(redis_client: redis.Redis) -> None:
    Finished.seen = []


def test_a_workflow_whose_process_died_in_its_block_is_ended_by_cancel(
    redis_client: redis.Redis,
) -> None:
    gone = lowkiq.Workflow("gone", on_complete=Finished)
    gone.__enter__()  # the process dies inside the block: never closed
    Step.perform_async([{"id": "a"}])
    gone._leave()
    drain(Step)
    assert not lowkiq.workflow("gone").status().complete
    assert lowkiq.workflow("gone").cancel() == 0
    status = lowkiq.workflow("gone").status()
    assert status.complete and not status.succeeded
    drain(Finished)
    assert [payload["workflow"] for payload in Finished.seen] == ["gone"]
    with lowkiq.Workflow("gone"):  # the id can be used again
        pass


def test_a_member_whose_enqueue_raised_is_ended_by_cancel(
    redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    with lowkiq.Workflow("raised", on_complete=Finished) as wf:
        Step.perform_async([{"id": "a"}])

        def refuse(*args: Any, **kwargs: Any) -> None:
            raise redis.ConnectionError("Redis went away")

        with monkeypatch.context() as patch:
            patch.setattr(lowkiq.storage.queue.Queue, "push", refuse)
            with pytest.raises(lowkiq.RedisUnavailable):
                Step.perform_async([{"id": "b"}])
    drain(Step)
    assert wf.status() == lowkiq.WorkflowStatus(pending=1, done=1)  # "b" was never stored
    assert wf.cancel() == 0
    assert wf.status() == lowkiq.WorkflowStatus(done=1, discarded=1, complete=True)
    drain(Finished)
    assert len(Finished.seen) == 1


def test_a_member_held_and_deleted_is_ended_by_cancel(redis_client: redis.Redis) -> None:
    with lowkiq.Workflow("first"):
        Step.perform_async([{"id": "a"}])
    with lowkiq.Workflow("second") as second:
        Step.perform_async([{"id": "b"}], after="first")  # a member of "second", held
    assert lowkiq.workflow("first").cancel() == 1
    assert lowkiq.workflow("first").delete_held() == 1
    assert second.status() == lowkiq.WorkflowStatus(pending=1)
    second.cancel()
    assert second.status() == lowkiq.WorkflowStatus(discarded=1, complete=True)


def test_cancel_while_the_block_runs_closes_it(redis_client: redis.Redis) -> None:
    with lowkiq.Workflow("busy") as busy:
        Step.perform_async([{"id": "a"}])
        lowkiq.workflow("busy").cancel()
    assert busy.status() == lowkiq.WorkflowStatus(complete=True)
    drain(Step)  # the member known only to the block still runs, not counted


def test_cancel_of_a_complete_workflow_changes_nothing(redis_client: redis.Redis) -> None:
    with lowkiq.Workflow("ok") as ok:
        Step.perform_async([{"id": "a"}])
    drain(Step)
    assert ok.cancel() == 0
    assert ok.status().succeeded
    assert "cancelled" not in store.read_state(redis_client, "ok")  # type: ignore[operator]
