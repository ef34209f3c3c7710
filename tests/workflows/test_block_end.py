"""The end of a workflow's block survives Redis going away for a moment, and a complete
workflow's counts stay those its callbacks got."""

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


def test_a_close_refused_by_a_dropped_connection_is_tried_again(
    redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_close = store.close
    refused: list[int] = []

    def close_once_lost(client: Any, workflow_id: str, *members: Any) -> bool:
        completed = real_close(client, workflow_id, *members)
        if not refused:  # it ran, but its reply never came
            refused.append(1)
            raise redis.ConnectionError("Connection reset by peer")
        return completed

    monkeypatch.setattr(store, "close", close_once_lost)
    with lowkiq.Workflow("blip") as wf:
        Step.perform_async([{"id": "a"}])
    assert refused == [1]
    drain(Step)
    assert wf.status() == lowkiq.WorkflowStatus(done=1, complete=True, succeeded=True)


def test_a_member_ending_after_a_cancel_changes_no_count(redis_client: redis.Redis) -> None:
    gone = lowkiq.Workflow("gone")
    gone.__enter__()  # its process dies in the block: the member is known to it only
    Step.perform_async([{"id": "late"}])
    gone._leave()
    lowkiq.workflow("gone").cancel()
    assert gone.status() == lowkiq.WorkflowStatus(complete=True)
    drain(Step)  # the member runs and ends: the workflow was complete before
    assert gone.status() == lowkiq.WorkflowStatus(complete=True)
