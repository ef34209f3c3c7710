"""What a crash between the script that ends a member and the relay leaves is finished by
the sweep; callbacks stay exactly once; a reused workflow id never counts the members of
the workflow that had it before."""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis

import lowkiq
from lowkiq.testing import drain
from lowkiq.workflows import relay, store


class Members(lowkiq.Worker):
    shards_count = 2
    max_retry_count = 1
    kill: set[str] = set()

    @classmethod
    def retry_in(cls, retry_count: int) -> float:
        return 0.0

    @classmethod
    def perform(cls, payloads_by_id: dict[str, list[Any]]) -> None:
        if cls.kill & set(payloads_by_id):
            raise lowkiq.Kill(RuntimeError("killed"))


class Done(lowkiq.Worker):
    seen: list[dict[str, list[Any]]] = []

    @classmethod
    def perform(cls, payloads_by_id: dict[str, list[Any]]) -> None:
        cls.seen.append(payloads_by_id)


@pytest.fixture(autouse=True)
def clean(redis_client: redis.Redis) -> None:
    Members.kill, Done.seen = set(), []


def relay_lost(monkeypatch: pytest.MonkeyPatch) -> None:
    """The process dies after each script that ends members, before it relays them."""
    monkeypatch.setattr("lowkiq.workflows.relayer.relay_many", lambda *args: 0)


def test_the_sweep_tells_a_workflow_what_a_crash_left_in_the_outboxes(
    redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    relay_lost(monkeypatch)
    with lowkiq.Workflow("crashed", on_complete=Done) as wf:
        Members.perform_async([{"id": str(i), "payload": i} for i in range(6)])
    drain(Members)
    assert wf.status().done == 0  # every member ended, none told
    assert relay.sweep(redis_client, time.time()) == 0  # closed too recently to look
    redis_client.delete(relay.SWEEP_LOCK)
    assert relay.sweep(redis_client, time.time() + relay.SWEEP_AFTER) == 1
    assert wf.status() == lowkiq.WorkflowStatus(done=6, complete=True, succeeded=True)
    drain(Done)
    assert [list(batch) for batch in Done.seen] == [["crashed"]]


def test_a_sweep_runs_in_one_process_at_a_time(redis_client: redis.Redis) -> None:
    with lowkiq.Workflow("idle"):
        Members.perform_async([{"id": "a"}])
    later = time.time() + relay.SWEEP_AFTER
    assert relay.sweep(redis_client, later) == 1
    assert relay.sweep(redis_client, later) == 0  # another sweep holds the lock


def test_firing_again_after_a_crash_enqueues_each_callback_once(redis_client: redis.Redis) -> None:
    with lowkiq.Workflow("twice", on_complete=Done) as wf:
        Members.perform_async([{"id": "a"}])
    drain(Members)
    drain(Done)
    assert wf.status().succeeded and len(Done.seen) == 1
    # A crash after the callback's push, before it was marked fired: fired again, after
    # the callback already ran.
    redis_client.hdel(store.prefix("twice") + "state", "fired_complete")
    assert relay.fire(redis_client, "twice")
    drain(Done)
    assert len(Done.seen) == 1


def test_on_complete_and_on_success_of_one_worker_are_one_job(redis_client: redis.Redis) -> None:
    with lowkiq.Workflow("both", on_complete=Done, on_success=Done):
        Members.perform_async([{"id": "a"}])
    drain(Members)
    drain(Done)
    # Two jobs of id "both" with equal payloads: merged, performed once.
    assert [list(batch) for batch in Done.seen] == [["both"]]
    assert len(Done.seen[0]["both"]) == 1


def test_a_reused_id_never_counts_the_members_of_the_workflow_before_it(
    redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    Members.kill = {"a"}
    with lowkiq.Workflow("again") as first:
        Members.perform_async([{"id": "a", "payload": 1}])
    drain(Members)
    assert first.status() == lowkiq.WorkflowStatus(dead=1, complete=True)
    first_instance = store.read_state(redis_client, "again")["instance"]
    # The dead member is queued up again and performed; its record is not relayed yet.
    Members.kill = set()
    relay_lost(monkeypatch)
    lowkiq.Actions(Members.queue()).morgue_queue_up(["a"])
    drain(Members)
    with lowkiq.Workflow("again") as second:
        Members.perform_async([{"id": "a", "payload": 1, "delay": 3600}])
    monkeypatch.undo()
    for shard in Members.queue().shards:
        relay.relay(redis_client, Members.queue_name, shard)
    assert second.status() == lowkiq.WorkflowStatus(pending=1)
    # (The relay's set of that member, of the first instance, is gone with it.)
    assert not redis_client.exists(store.ended_key("again", first_instance))


def test_a_member_that_cannot_be_decoded_is_dead_and_told_at_once(
    redis_client: redis.Redis,
) -> None:
    import json

    def load(data: bytes) -> Any:
        if data == b'"garbled"':
            raise ValueError("garbled")
        return json.loads(data)

    lowkiq.settings.load_payload = load
    with lowkiq.Workflow("unreadable", on_complete=Done) as wf:
        Members.perform_async([{"id": "a", "payload": "garbled"}])
    drain(Members)
    assert wf.status() == lowkiq.WorkflowStatus(dead=1, complete=True)


def test_a_member_done_after_failing_whose_relay_died_half_way_is_counted_done_once(
    redis_client: redis.Redis,
) -> None:
    """A relay adds the done members to the workflow's set, then tells the workflow: one
    that dies in between, the member failed before, leaves it in the set and still
    counted failed.  The workflow completes when another relay tells it the last member,
    with counts that add up: every member done, none failed."""
    with lowkiq.Workflow("half", on_complete=Done) as wf:
        Members.perform_async([{"id": "a", "payload": 1}, {"id": "b", "payload": 2}])
    first, second = sorted(store.members(redis_client, "half"))
    instance = store.read_state(redis_client, "half")["instance"]
    assert store.settle(redis_client, "half", [("f", first)], instance) == 0
    assert wf.status() == lowkiq.WorkflowStatus(pending=1, failed=1)
    redis_client.sadd(store.ended_key("half", instance), first)  # then the relay died
    assert store.settle(redis_client, "half", [("d", second)], instance) == 1
    assert wf.status() == lowkiq.WorkflowStatus(done=2, complete=True, succeeded=True)
    assert store.members(redis_client, "half") == {first: "d", second: "d"}
    # The dead relay's records, told again by the sweep, change nothing.
    assert store.settle(redis_client, "half", [("d", first)], instance) == 0
    assert wf.status().done == 2
