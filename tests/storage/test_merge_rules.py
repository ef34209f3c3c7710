"""The merge rules of SPEC §3, driven through ``perform_async``, pop/fail/restore and the morgue.

Every test runs twice: with the packed layout, and with every job of two
payloads or more kept as a hot id (its payloads in a sorted set of its own).
"""

from __future__ import annotations

import time

import pytest
from storage_support import NOW, hot_layout, retry_in

from tests.leasing import ack, fail, pop, restore


@pytest.fixture(autouse=True, params=["packed", "hot"])
def payload_layout(request):
    """The layout under test: the default limits, or every multi-payload job hot."""
    if request.param == "packed":
        yield
        return
    with hot_layout(SPILL_PAYLOADS=1):
        yield


V_PAST = 1536323288.0


def test_worked_example_of_the_spec(worker, queue):
    """queued {v1:1, v2:2} rc 0 + enqueued {v2:3, v3:4} rc -1 -> {v1:1, v2:2, v3:4}, rc 0."""
    worker.perform_async(
        [
            {"id": 1, "payload": "v1", "score": 1, "perform_in": V_PAST - 100},
            {"id": 1, "payload": "v2", "score": 2, "perform_in": V_PAST - 100},
        ]
    )
    # One failure at now = V_PAST - 10 puts it back with retry_count 0, perform_in V_PAST.
    batch = pop(queue, 0, 10, now=V_PAST - 10)
    fail(queue, 0, batch, "boom", retry_in, worker.max_retry_count, now=V_PAST - 10)

    worker.perform_async(
        [
            {"id": 1, "payload": "v2", "score": 3, "perform_in": V_PAST + 2},
            {"id": 1, "payload": "v3", "score": 4, "perform_in": V_PAST + 2},
        ]
    )

    [job] = worker.queries().fetch([1])
    assert job["id"] == "1"
    assert job["payloads"] == [["v1", 1.0], ["v2", 2.0], ["v3", 4.0]]
    assert job["retry_count"] == 0
    assert job["perform_in"] == V_PAST


def test_payloads_merge_as_a_union_within_one_call(worker):
    worker.perform_async(
        [
            {"id": "a", "payload": "x", "score": 1},
            {"id": "a", "payload": "y", "score": 2},
            {"id": "b", "payload": "x", "score": 3},
        ]
    )
    jobs = {job["id"]: job["payloads"] for job in worker.queries().fetch(["a", "b"])}
    assert jobs == {"a": [["x", 1.0], ["y", 2.0]], "b": [["x", 3.0]]}


def test_payloads_merge_as_a_union_across_calls(worker):
    worker.perform_async([{"id": "a", "payload": "x", "score": 5}])
    worker.perform_async([{"id": "a", "payload": "y", "score": 2}])
    [job] = worker.queries().fetch(["a"])
    assert job["payloads"] == [["y", 2.0], ["x", 5.0]]


def test_equal_payloads_keep_the_smallest_score_whatever_the_order(worker):
    worker.perform_async([{"id": "a", "payload": "x", "score": 5}])
    worker.perform_async([{"id": "a", "payload": "x", "score": 2}])
    worker.perform_async([{"id": "a", "payload": "x", "score": 9}])
    worker.perform_async(
        [{"id": "b", "payload": "x", "score": 7}, {"id": "b", "payload": "x", "score": 3}]
    )
    jobs = {job["id"]: job["payloads"] for job in worker.queries().fetch(["a", "b"])}
    assert jobs == {"a": [["x", 2.0]], "b": [["x", 3.0]]}


def test_canonical_json_merges_dicts_with_different_key_order(worker):
    worker.perform_async(
        [
            {"id": 1, "payload": {"a": 1, "b": 2}, "score": 2},
            {"id": 1, "payload": {"b": 2, "a": 1}, "score": 1},
        ]
    )
    worker.perform_async([{"id": 1, "payload": {"b": 2, "a": 1}, "score": 3}])
    [job] = worker.queries().fetch([1])
    assert job["payloads"] == [[{"a": 1, "b": 2}, 1.0]]


def test_ids_are_stored_as_str(worker):
    worker.perform_async([{"id": 7, "payload": "int", "score": 1}])
    worker.perform_async([{"id": "7", "payload": "str", "score": 2}])
    [job] = worker.queries().fetch(["7"])
    assert job["payloads"] == [["int", 1.0], ["str", 2.0]]


def test_enqueue_keeps_perform_in_of_the_queued_job(worker):
    """Rule 2: a later or earlier perform_in of the new job does not move the queued one."""
    worker.perform_async([{"id": "a", "payload": 1, "perform_in": NOW}])
    worker.perform_async([{"id": "a", "payload": 2, "perform_in": NOW + 100}])
    worker.perform_async([{"id": "a", "payload": 3, "perform_in": NOW - 100}])
    [job] = worker.queries().fetch(["a"])
    assert job["perform_in"] == NOW
    assert job["retry_count"] == -1
    assert [payload for payload, _ in job["payloads"]] == [1, 2, 3]


def test_enqueue_keeps_retry_count_and_error_of_a_queued_retry(worker, fail_batch):
    worker.perform_async([{"id": "a", "payload": 1, "score": 1, "perform_in": NOW - 1}])
    fail_batch(now=NOW, error="first failure")
    worker.perform_async([{"id": "a", "payload": 2, "score": 2, "perform_in": NOW + 999}])
    [job] = worker.queries().fetch(["a"])
    assert job["retry_count"] == 0
    assert job["perform_in"] == NOW + retry_in(0)
    assert job["error"] == "first failure"
    assert job["payloads"] == [[1, 1.0], [2, 2.0]]


def test_failed_job_returning_onto_a_queued_job_brings_its_schedule(worker, queue):
    """Rule 3: a job of the same id arrived while the batch ran; the failed job's
    perform_in, retry_count and error win, payloads merge."""
    worker.perform_async([{"id": "a", "payload": "old", "score": 1, "perform_in": NOW - 1}])
    batch = pop(queue, 0, 10, now=NOW)
    worker.perform_async([{"id": "a", "payload": "new", "score": 2, "perform_in": NOW + 1}])
    worker.perform_async([{"id": "a", "payload": "old", "score": 3}])

    fail(queue, 0, batch, "broken", retry_in, worker.max_retry_count, now=NOW)

    [job] = worker.queries().fetch(["a"])
    assert job["perform_in"] == NOW + retry_in(0)
    assert job["retry_count"] == 0
    assert job["error"] == "broken"
    assert job["payloads"] == [["old", 1.0], ["new", 2.0]]


def test_failed_retry_returning_onto_a_fresh_job_raises_its_retry_count(worker, queue):
    worker.perform_async([{"id": "a", "payload": "p", "perform_in": NOW - 1}])
    for attempt in range(2):
        now = NOW + 1000 * attempt
        fail(queue, 0, pop(queue, 0, 10, now=now), f"fail {attempt}", retry_in, 3, now=now)
    batch = pop(queue, 0, 10, now=NOW + 5000)
    assert [job.retry_count for job in batch] == [1]
    worker.perform_async([{"id": "a", "payload": "q", "perform_in": NOW}])
    fail(queue, 0, batch, "fail 2", retry_in, 10, now=NOW + 5000)

    [job] = worker.queries().fetch(["a"])
    assert job["retry_count"] == 2
    assert job["perform_in"] == NOW + 5000 + retry_in(2)
    assert job["error"] == "fail 2"


def test_restore_onto_a_queued_job_brings_the_processing_schedule(worker, queue, fail_batch):
    """Rule 3 applies to a processing area restored after a crash."""
    worker.perform_async([{"id": "a", "payload": "old", "score": 1, "perform_in": NOW - 1}])
    fail_batch(now=NOW, error="first")
    later = NOW + retry_in(0)
    assert [job.retry_count for job in pop(queue, 0, 10, now=later)] == [0]
    worker.perform_async([{"id": "a", "payload": "new", "score": 2, "perform_in": NOW + 5}])

    assert restore(queue, 0, now=later + 1) == 1

    [job] = worker.queries().fetch(["a"])
    assert job["perform_in"] == later
    assert job["retry_count"] == 0
    assert job["error"] == "first"
    assert job["payloads"] == [["old", 1.0], ["new", 2.0]]
    assert worker.queries().processing_data() == []


def test_morgue_job_moved_back_onto_a_queued_retry(worker, queue):
    """Rule 4: perform_in = now, retry_count = -1, payloads merge; the dead job's error
    is kept as the last error (the queued retry's own error is replaced)."""
    worker.perform_async([{"id": "a", "payload": "dead", "score": 1, "perform_in": NOW - 1}])
    fail(queue, 0, pop(queue, 0, 10, now=NOW), "fatal", retry_in, 0, now=NOW)
    assert worker.metrics()["morgue_length"] == 1

    worker.perform_async([{"id": "a", "payload": "queued", "score": 2, "perform_in": NOW - 1}])
    fail(queue, 0, pop(queue, 0, 10, now=NOW), "again", retry_in, 3, now=NOW)
    assert worker.queries().fetch(["a"])[0]["retry_count"] == 0

    before = time.time()
    assert worker.actions().morgue_queue_up(["a"]) == 1
    after = time.time()

    [job] = worker.queries().fetch(["a"])
    assert job["retry_count"] == -1
    assert before <= job["perform_in"] <= after
    assert job["error"] == "fatal"
    assert job["payloads"] == [["dead", 1.0], ["queued", 2.0]]
    assert worker.queries().morgue_fetch(["a"]) == []


def test_morgue_job_moved_back_onto_a_future_fresh_job_becomes_due_now(worker, queue):
    worker.perform_async([{"id": "a", "payload": "dead", "score": 1, "perform_in": NOW - 1}])
    fail(queue, 0, pop(queue, 0, 10, now=NOW), "fatal", retry_in, 0, now=NOW)
    future = time.time() + 3600
    worker.perform_async([{"id": "a", "payload": "later", "score": 2, "perform_in": future}])

    before = time.time()
    worker.actions().morgue_queue_up(["a"])
    [job] = worker.queries().fetch(["a"])
    assert before <= job["perform_in"] <= time.time()
    assert job["retry_count"] == -1
    assert job["payloads"] == [["dead", 1.0], ["later", 2.0]]


def test_morgue_job_moved_back_with_nothing_queued(worker, queue):
    worker.perform_async([{"id": "a", "payload": "dead", "score": 1, "perform_in": NOW - 1}])
    fail(queue, 0, pop(queue, 0, 10, now=NOW), "fatal", retry_in, 0, now=NOW)
    assert worker.queries().fetch(["a"]) == []

    before = time.time()
    worker.actions().morgue_queue_up(["a"])
    [job] = worker.queries().fetch(["a"])
    assert before <= job["perform_in"] <= time.time()
    assert job["retry_count"] == -1
    assert job["error"] == "fatal"  # the last error stays in sight
    assert job["payloads"] == [["dead", 1.0]]

    # Being performed, it shows the error too; a new failure replaces it, and a
    # success leaves no error behind.
    batch = pop(queue, 0, 10, now=time.time())
    assert [busy["error"] for busy in worker.queries().processing_data()] == ["fatal"]
    fail(queue, 0, batch, "newer", retry_in, 3, now=NOW)
    assert worker.queries().fetch(["a"])[0]["error"] == "newer"
    pop(queue, 0, 10, now=NOW + 1000)
    ack(queue, 0)
    worker.perform_async([{"id": "a", "payload": "next"}])
    assert "error" not in worker.queries().fetch(["a"])[0]


def test_payloads_merging_into_the_morgue_keep_the_smallest_score(worker, queue):
    for score in (5, 2):
        worker.perform_async([{"id": "a", "payload": "x", "score": score, "perform_in": NOW - 1}])
        fail(
            queue, 0, pop(queue, 0, 10, now=NOW + score), f"e{score}", retry_in, 0, now=NOW + score
        )
    worker.perform_async([{"id": "a", "payload": "y", "score": 3, "perform_in": NOW - 1}])
    fail(queue, 0, pop(queue, 0, 10, now=NOW + 9), "e9", retry_in, 0, now=NOW + 9)

    [dead] = worker.queries().morgue_fetch(["a"])
    assert dead["payloads"] == [["x", 2.0], ["y", 3.0]]
    assert dead["updated_at"] == NOW + 9
    assert dead["error"] == "e9"


def test_same_id_twice_in_one_call_keeps_the_first_perform_in(worker):
    """Rule 2 applied in list order: the first job of an id sets the schedule."""
    worker.perform_async(
        [
            {"id": "a", "payload": 1, "score": 1, "perform_in": NOW + 50},
            {"id": "a", "payload": 2, "score": 2, "perform_in": NOW - 50},
        ]
    )
    [job] = worker.queries().fetch(["a"])
    assert job["perform_in"] == NOW + 50
    assert job["payloads"] == [[1, 1.0], [2, 2.0]]


def test_an_enqueued_job_does_not_touch_the_morgue_entry_of_its_id(worker, queue):
    worker.perform_async([{"id": "a", "payload": "dead", "score": 1, "perform_in": NOW - 1}])
    fail(queue, 0, pop(queue, 0, 10, now=NOW), "fatal", retry_in, 0, now=NOW)
    worker.perform_async([{"id": "a", "payload": "new", "score": 2, "perform_in": NOW + 1}])

    [queued] = worker.queries().fetch(["a"])
    assert (queued["payloads"], queued["retry_count"]) == ([["new", 2.0]], -1)
    [dead] = worker.queries().morgue_fetch(["a"])
    assert (dead["payloads"], dead["updated_at"]) == ([["dead", 1.0]], NOW)
