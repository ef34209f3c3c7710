"""``Worker.track``: each job event in its shard's capped stream, recorded by the script
that makes the change; ``Worker.history(id)`` and ``lowkiq.events(worker)`` read them,
on one server and on a Redis Cluster."""

from __future__ import annotations

import itertools
import threading
import time
from typing import Any

import pytest
import redis

import lowkiq
from lowkiq import testing
from tests.leasing import ack, fail, pop, restore, token

#: The storage tests' clock (``now`` passed explicitly).
NOW = 1_700_000_000.0


class Tracked(lowkiq.Worker):
    """Three shards, batch size 10, two tries, every event recorded."""

    shards_count = 3
    batch_size = 10
    max_retry_count = 1
    track = True
    performed: list[Any] = []

    @classmethod
    def retry_in(cls, retry_count: int) -> float:
        return 10.0

    @classmethod
    def perform(cls, batch: dict[str, list[Any]]) -> None:
        for payloads in batch.values():
            for payload in payloads:
                if payload == "discard":
                    raise lowkiq.Discard("not wanted")
                if payload == "kill":
                    raise lowkiq.Kill("hopeless")
                if payload == "bad":
                    raise KeyError("status")
                cls.performed.append(payload)


class Other(lowkiq.Worker):
    """A tracked queue jobs move to."""

    shards_count = 2
    track = True


class Untracked(lowkiq.Worker):
    """The same queue shape without tracking."""

    shards_count = 3
    batch_size = 10


@pytest.fixture(autouse=True)
def registered(redis_client: redis.Redis) -> None:
    lowkiq.settings.workers = [Tracked, Other, Untracked]
    Tracked.performed = []


def names(job_id: str, worker: type[lowkiq.Worker] = Tracked) -> list[str]:
    return [event.event for event in worker.history(job_id)]


def test_a_jobs_life_is_recorded_in_order_with_the_lease_it_ran_under() -> None:
    Tracked.perform_async([{"id": "order-1", "payload": "v1"}])
    Tracked.perform_async([{"id": "order-1", "payload": "v2"}])
    testing.drain(Tracked)
    history = Tracked.history("order-1")
    assert [e.event for e in history] == ["enqueued", "enqueued", "popped", "done"]
    enqueued, merged, popped, done = history
    assert enqueued.details["merged"] == "0" and merged.details["merged"] == "1"
    assert popped.fence is not None and popped.fence == done.fence
    assert popped.process is not None and popped.process.startswith("drain-")
    assert enqueued.fence is None
    assert enqueued.at <= popped.at <= done.at
    assert abs(done.at - time.time()) < 60
    assert {e.queue for e in history} == {"Tracked"}
    assert {e.shard for e in history} == {Tracked.queue().shard_of("order-1")}
    assert Tracked.history("never") == []


def test_failures_retries_and_the_morgue_are_recorded_with_the_error() -> None:
    Tracked.perform_async([{"id": "bad", "payload": "bad"}])
    testing.drain(Tracked)
    testing.drain(Tracked, future=True)
    history = Tracked.history("bad")
    assert [e.event for e in history] == ["enqueued", "popped", "failed", "popped", "buried"]
    failed, buried = history[2], history[4]
    assert failed.details["error"] == "KeyError: 'status'"
    assert failed.details["retry_count"] == "0"
    assert float(failed.details["perform_in"]) == pytest.approx(failed.at + 10, abs=1)
    assert buried.details["error"] == "KeyError: 'status'"
    Tracked.actions().morgue_queue_up_all_jobs()
    Tracked.actions().delete(["bad"])
    assert names("bad")[-2:] == ["enqueued", "deleted"]
    assert Tracked.history("bad")[-2].details["from"] == "morgue"


def test_discard_kill_and_a_partial_failure_record_each_ids_own_event() -> None:
    Tracked.perform_async([{"id": "d", "payload": "discard"}])
    testing.drain(Tracked)
    Tracked.perform_async([{"id": "k", "payload": "kill"}])
    testing.drain(Tracked)
    assert names("d")[-1] == "discarded"
    assert names("k")[-1] == "buried"
    assert Tracked.history("k")[-1].details["error"] == "lowkiq.Kill: hopeless"


def test_a_crash_restores_and_operators_actions_are_recorded(redis_client: redis.Redis) -> None:
    queue = Tracked.queue()
    Tracked.perform_async([{"id": "a", "payload": 1, "perform_in": NOW}])
    shard = queue.shard_of("a")
    assert pop(queue, shard, 10, now=NOW)
    held = token(queue, shard)
    restore(queue, shard, now=NOW)
    restored = Tracked.history("a")[-1]
    assert restored.event == "restored"
    assert restored.fence == int(held.split(" ")[0])
    Tracked.actions().kill(["a"])
    assert names("a")[-1] == "buried"
    Tracked.perform_async([{"id": "m", "payload": 1}, {"id": "m2", "payload": 2}])
    Tracked.actions().move(["m"], to=Other)
    assert names("m")[-1] == "moved"
    assert Tracked.history("m")[-1].details["to"] == "Other"
    assert names("m", Other) == ["enqueued"]
    assert Other.history("m")[0].details["from"] == "Tracked"
    Tracked.actions().clear()
    assert names("m2")[-1] == "deleted"


def test_a_batch_of_several_ids_and_a_batch_acked_by_the_next_pop() -> None:
    queue = Tracked.queue()
    ids = [f"o{n}" for n in range(30)]
    Tracked.perform_async([{"id": i, "payload": i, "perform_in": NOW} for i in ids])
    for shard in queue.shards:
        while batch := pop(queue, shard, 10, now=NOW):
            failing = [job for job in batch if job.id == "o0"]
            if failing:  # o0 fails alone, the rest of its batch is acked
                fail(queue, shard, failing, "boom", lambda _: 10.0, 2, now=NOW)
            ack(queue, shard)
    for job_id in ids:
        expected = ["enqueued", "popped", "failed" if job_id == "o0" else "done"]
        assert names(job_id)[:3] == expected, job_id


def test_events_of_a_worker_come_in_time_order_and_follow_new_ones() -> None:
    Tracked.perform_async([{"id": f"e{n}", "payload": n} for n in range(20)])
    testing.drain(Tracked)
    events = list(lowkiq.events(Tracked))
    assert len(events) == 60
    assert [(e.at, e.entry) for e in events] == sorted(
        ((e.at, e.entry) for e in events), key=lambda pair: pair[0]
    )
    for job_id in (f"e{n}" for n in range(20)):
        assert [e.event for e in events if e.id == job_id] == ["enqueued", "popped", "done"]
    assert {e.shard for e in events} == set(Tracked.queue().shards)
    later = events[-1].at + 0.001
    assert all(e.at >= later for e in lowkiq.events(Tracked, since=later))

    seen: list[lowkiq.JobEvent] = []
    following = lowkiq.events(Tracked, since=time.time() + 0.5, follow=True, poll=0.05)

    def follow() -> None:
        seen.extend(itertools.islice(following, 2))

    reader = threading.Thread(target=follow, daemon=True)
    reader.start()
    time.sleep(0.8)
    Tracked.perform_async([{"id": "late", "payload": 1}, {"id": "later", "payload": 2}])
    reader.join(10)
    assert sorted((e.id, e.event) for e in seen) == [("late", "enqueued"), ("later", "enqueued")]


def test_the_stream_is_capped_at_about_track_length(redis_client: redis.Redis) -> None:
    class Short(lowkiq.Worker):
        shards_count = 1
        track = True
        track_length = 100

    for n in range(1000):  # an entry per enqueue call
        Short.perform_async([{"id": f"s{n}", "payload": n}])
    length = redis_client.xlen(Short.queue().keys.events_stream(0))
    assert 100 <= length < 300
    assert names("s999", Short) == ["enqueued"]
    assert names("s0", Short) == []


def test_one_entry_holds_the_events_of_a_batch_and_of_an_enqueue(
    redis_client: redis.Redis,
) -> None:
    queue = Tracked.queue()
    ids = [f"b{n}" for n in range(40)]
    Tracked.perform_async([{"id": i, "payload": 1, "perform_in": NOW} for i in ids])
    Tracked.perform_async([{"id": i, "payload": 2, "perform_in": NOW} for i in ids[:5]])
    shard = queue.shard_of("b0")
    batch = pop(queue, shard, 10, now=NOW)
    assert batch is not None and len(batch) == 10
    ack(queue, shard)
    entries = redis_client.xrange(queue.keys.events_stream(shard))
    assert [fields[b"event"] for _, fields in entries] == [
        b"enqueued",
        b"enqueued",
        b"popped",
        b"done",
    ]
    events = Tracked.history("b0")
    assert [(e.event, e.details.get("merged")) for e in events] == [
        ("enqueued", "0"),
        ("enqueued", "1"),
        ("popped", None),
        ("done", None),
    ]
    second = pop(queue, shard, 10, now=NOW)
    assert second
    assert names(second[0].id)[-1] == "popped"
    third = pop(queue, shard, 10, now=NOW, ack_shard=shard)  # acks the second batch
    assert third
    *_, (_, both) = redis_client.xrange(queue.keys.events_stream(shard))
    assert both[b"event"] == b"done" and b"popped" in both  # one entry for the two
    assert names(second[0].id)[-1] == "done"
    assert names(third[0].id)[-1] == "popped"
    fences = {e.fence for e in Tracked.history(third[0].id)} - {None}
    assert fences == {Tracked.history(second[0].id)[-1].fence}
    in_shard = [i for i in ids if queue.shard_of(i) == shard]
    popped = {e.id for e in lowkiq.events(Tracked) if e.event == "popped"}
    taken = {job.id for jobs in (batch, second, third) for job in jobs}
    assert popped == taken and popped <= set(in_shard)


def test_an_untracked_worker_writes_no_stream_and_bad_settings_are_refused(
    redis_client: redis.Redis,
) -> None:
    Untracked.perform_async([{"id": "u", "payload": 1}])
    testing.drain(Untracked)
    queue = Untracked.queue()
    assert not any(redis_client.exists(queue.keys.events_stream(s)) for s in queue.shards)
    with pytest.raises(lowkiq.ConfigurationError, match="Untracked.track is off"):
        Untracked.history("u")
    with pytest.raises(lowkiq.ConfigurationError, match="track must be True or False"):

        class Bad(lowkiq.Worker):
            track = "yes"  # type: ignore[assignment]

    with pytest.raises(lowkiq.ConfigurationError, match="track_length"):

        class Short(lowkiq.Worker):
            track_length = 0


def test_an_events_error_is_its_first_line_cut_at_a_character(redis_client: redis.Redis) -> None:
    queue = Tracked.queue()
    Tracked.perform_async([{"id": "e", "payload": 1, "perform_in": NOW}])
    shard = queue.shard_of("e")
    batch = pop(queue, shard, 10, now=NOW)
    assert batch
    long = "Error: " + "é" * 150 + "\n\nTraceback (most recent call last): ..."
    fail(queue, shard, batch, long, lambda _: 10.0, 5, now=NOW)
    error = Tracked.history("e")[-1].details["error"]
    assert error == "Error: " + "é" * 96  # 200 bytes would cut the 97th in two
