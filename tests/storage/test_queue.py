"""Processing of SPEC §4 through the storage layer: pop, ack, fail and restore."""

from __future__ import annotations

import time

from storage_support import NOW, retry_in

from lowkiq.storage.queue import PoppedJob
from tests.leasing import ack, fail, pop, restore
from tests.leasing import token as lease_token


def test_pop_takes_due_jobs_earliest_perform_in_first_up_to_the_limit(worker, queue):
    worker.perform_async(
        [
            {"id": "c", "payload": "c", "perform_in": NOW - 10},
            {"id": "a", "payload": "a", "perform_in": NOW - 30},
            {"id": "later", "payload": "x", "perform_in": NOW + 1},
            {"id": "b", "payload": "b", "perform_in": NOW - 20},
            {"id": "d", "payload": "d", "perform_in": NOW},
        ]
    )
    first = pop(queue, 0, 3, now=NOW)
    assert [job.id for job in first] == ["a", "b", "c"]
    ack(queue, 0)
    assert [job.id for job in pop(queue, 0, 3, now=NOW)] == ["d"]
    ack(queue, 0)
    assert pop(queue, 0, 3, now=NOW) == []
    assert [job["id"] for job in worker.queries().fetch(["later"])] == ["later"]


def test_pop_returns_an_empty_list_when_nothing_is_due(worker, queue):
    assert pop(queue, 0, 10, now=NOW) == []
    worker.perform_async([{"id": 1, "perform_in": NOW + 60}])
    assert pop(queue, 0, 10, now=NOW) == []
    assert worker.metrics()["busy"] == 0


def test_a_pop_says_whether_the_shard_holds_no_job_at_all(worker, queue):
    token = lease_token(queue, 0)
    assert queue.pop(0, token, 10, now=NOW).empty  # nothing queued, nothing in processing
    worker.perform_async([{"id": 1, "perform_in": NOW + 60}])
    later = queue.pop(0, token, 10, now=NOW)
    assert later.jobs == [] and not later.empty  # a job, not due yet
    assert [job.id for job in queue.pop(0, token, 10, now=NOW + 61).jobs] == ["1"]
    # The processing area holds that batch: the shard is not empty, nor popped.
    occupied = queue.pop(0, token, 10, now=NOW + 61)
    assert occupied.occupied and not occupied.empty


def test_popped_job_holds_id_retry_count_and_payloads_ascending_by_score(worker, queue):
    worker.perform_async(
        [
            {"id": 42, "payload": {"v": 2}, "score": 20, "perform_in": NOW - 1},
            {"id": 42, "payload": {"v": 1}, "score": 10, "perform_in": NOW - 1},
            {"id": 42, "payload": [3], "score": 30, "perform_in": NOW - 1},
        ]
    )
    assert pop(queue, 0, 10, now=NOW) == [
        PoppedJob(id="42", retry_count=-1, payloads=[{"v": 1}, {"v": 2}, [3]], perform_in=NOW - 1)
    ]


def test_default_payload_is_the_empty_string(worker, queue):
    worker.perform_async([{"id": 1, "perform_in": NOW - 1}])
    assert pop(queue, 0, 10, now=NOW)[0].payloads == [""]


def test_popped_jobs_move_to_the_processing_area(worker, queue):
    worker.perform_async([{"id": "a", "payload": "p", "score": 1, "perform_in": NOW - 1}])
    pop(queue, 0, 10, now=NOW)
    assert worker.queries().fetch(["a"]) == []
    assert worker.queries().processing_data() == [
        {"id": "a", "payloads": [["p", 1.0]], "perform_in": NOW - 1, "retry_count": -1}
    ]
    assert worker.metrics()["busy"] == 1
    assert worker.metrics()["length"] == 0


def test_pop_returns_none_while_the_processing_area_is_occupied(worker, queue):
    worker.perform_async([{"id": i, "perform_in": NOW - 1} for i in range(3)])
    assert len(pop(queue, 0, 1, now=NOW)) == 1
    assert pop(queue, 0, 1, now=NOW) is None
    assert worker.metrics()["fresh"] == 2


def test_pop_with_ack_shard_acks_its_own_last_batch_then_pops(worker, queue):
    worker.perform_async([{"id": "a", "perform_in": NOW - 2}, {"id": "b", "perform_in": NOW - 1}])
    assert [job.id for job in pop(queue, 0, 1, now=NOW)] == ["a"]
    assert [job.id for job in pop(queue, 0, 1, now=NOW, ack_shard=0)] == ["b"]
    assert worker.metrics()["processed"] == 1
    assert [job["id"] for job in worker.queries().processing_data()] == ["b"]


def test_pop_with_ack_shard_acks_another_shard_of_the_queue(sharded_worker):
    queue = sharded_worker.queue()
    ids = [str(n) for n in range(40)]
    sharded_worker.perform_async([{"id": i, "perform_in": NOW - 1} for i in ids])
    first, second = sorted({queue.shard_of(i) for i in ids})[:2]
    assert pop(queue, first, 3, now=NOW)
    popped = pop(queue, second, 3, now=NOW, ack_shard=first)
    assert popped and all(queue.shard_of(job.id) == second for job in popped)
    metrics = sharded_worker.metrics()
    assert (metrics["processed"], metrics["busy"]) == (3, len(popped))
    # The acked shard can pop again; the other still holds its batch.
    assert pop(queue, first, 3, now=NOW)
    assert pop(queue, second, 3, now=NOW) is None


def test_ack_clears_the_processing_area_and_counts_processed(worker, queue):
    worker.perform_async([{"id": i, "perform_in": NOW - 1} for i in range(4)])
    pop(queue, 0, 3, now=NOW)
    assert ack(queue, 0) == 3
    assert worker.queries().processing_data() == []
    metrics = worker.metrics()
    assert (metrics["processed"], metrics["busy"], metrics["failed"]) == (3, 0, 0)
    pop(queue, 0, 3, now=NOW)
    ack(queue, 0)
    assert worker.metrics()["processed"] == 4
    assert ack(queue, 0) == 0
    assert worker.metrics()["processed"] == 4


def test_a_new_job_of_a_running_id_waits_in_the_queue(worker, queue):
    worker.perform_async([{"id": "a", "payload": 1, "perform_in": NOW - 1}])
    pop(queue, 0, 10, now=NOW)
    worker.perform_async([{"id": "a", "payload": 2, "score": 5, "perform_in": NOW - 1}])
    assert pop(queue, 0, 10, now=NOW) is None
    ack(queue, 0)
    [job] = worker.queries().fetch(["a"])
    assert job["payloads"] == [[2, 5.0]]
    assert job["retry_count"] == -1


def test_failure_schedules_a_retry(worker, queue):
    worker.perform_async(
        [
            {"id": "a", "payload": "p", "score": 1, "perform_in": NOW - 1},
            {"id": "b", "payload": "q", "score": 2, "perform_in": NOW - 1},
        ]
    )
    batch = pop(queue, 0, 10, now=NOW)
    dead = fail(queue, 0, batch, "ValueError: bad", retry_in, 3, now=NOW)

    assert dead == []
    assert worker.queries().processing_data() == []
    jobs = worker.queries().fetch(["a", "b"])
    assert jobs == [
        {
            "id": "a",
            "payloads": [["p", 1.0]],
            "perform_in": NOW + retry_in(0),
            "retry_count": 0,
            "error": "ValueError: bad",
        },
        {
            "id": "b",
            "payloads": [["q", 2.0]],
            "perform_in": NOW + retry_in(0),
            "retry_count": 0,
            "error": "ValueError: bad",
        },
    ]
    metrics = worker.metrics()
    assert (metrics["failed"], metrics["processed"], metrics["retries"]) == (2, 0, 2)


def test_retry_states_follow_the_table(worker, queue):
    """new: -1, given perform_in; failed once: 0, now + retry_in(0); again: 1, now + retry_in(1)."""
    worker.perform_async([{"id": "a", "perform_in": NOW - 5}])
    [job] = worker.queries().fetch(["a"])
    assert (job["retry_count"], job["perform_in"]) == (-1, NOW - 5)

    calls = []

    def recording_retry_in(retry_count):
        calls.append(retry_count)
        return retry_in(retry_count)

    fail(queue, 0, pop(queue, 0, 10, now=NOW), "e", recording_retry_in, 5, now=NOW)
    [job] = worker.queries().fetch(["a"])
    assert (job["retry_count"], job["perform_in"]) == (0, NOW + retry_in(0))

    later = NOW + 100
    [popped] = pop(queue, 0, 10, now=later)
    assert popped.retry_count == 0
    fail(queue, 0, [popped], "e", recording_retry_in, 5, now=later)
    [job] = worker.queries().fetch(["a"])
    assert (job["retry_count"], job["perform_in"]) == (1, later + retry_in(1))
    assert calls == [0, 1]


def test_a_job_never_failed_has_no_error_and_a_default_perform_in_of_now(worker):
    before = time.time()
    worker.perform_async([{"id": "a"}])
    [job] = worker.queries().fetch(["a"])
    assert before <= job["perform_in"] <= time.time()
    assert job["retry_count"] == -1
    assert "error" not in job


def test_exhausted_retries_send_the_oldest_payload_to_the_morgue(worker, queue):
    worker.perform_async(
        [
            {"id": "a", "payload": "oldest", "score": 1, "perform_in": NOW - 1},
            {"id": "a", "payload": "newer", "score": 2, "perform_in": NOW - 1},
            {"id": "a", "payload": "newest", "score": 3, "perform_in": NOW - 1},
        ]
    )
    dead = fail(queue, 0, pop(queue, 0, 10, now=NOW), "fatal", retry_in, 0, now=NOW)

    assert dead == [{"id": "a", "payloads": [["oldest", 1.0]], "error": "fatal"}]
    assert worker.queries().morgue_fetch(["a"]) == [
        {"id": "a", "payloads": [["oldest", 1.0]], "updated_at": NOW, "error": "fatal"}
    ]
    assert worker.queries().fetch(["a"]) == [
        {
            "id": "a",
            "payloads": [["newer", 2.0], ["newest", 3.0]],
            "perform_in": NOW,
            "retry_count": -1,
        }
    ]
    metrics = worker.metrics()
    assert (metrics["morgue_length"], metrics["fresh"], metrics["failed"]) == (1, 1, 1)


def test_exhausted_retries_of_a_single_payload_leave_nothing_queued(worker, queue):
    worker.perform_async([{"id": "a", "payload": "only", "score": 1, "perform_in": NOW - 1}])
    dead = fail(queue, 0, pop(queue, 0, 10, now=NOW), "fatal", retry_in, 0, now=NOW)
    assert dead == [{"id": "a", "payloads": [["only", 1.0]], "error": "fatal"}]
    assert worker.queries().fetch(["a"]) == []
    assert worker.metrics()["length"] == 0


def test_morgue_when_retry_count_reaches_max_retry_count(worker, queue):
    """With max_retry_count 2: failures 1 and 2 retry (retry_count 0, 1), failure 3 buries."""
    worker.perform_async([{"id": "a", "payload": "p", "score": 1, "perform_in": NOW - 1}])
    now = NOW
    for expected_retry_count in (0, 1):
        assert fail(queue, 0, pop(queue, 0, 10, now=now), "e", retry_in, 2, now=now) == []
        assert worker.queries().fetch(["a"])[0]["retry_count"] == expected_retry_count
        now += 1000
    assert fail(queue, 0, pop(queue, 0, 10, now=now), "last", retry_in, 2, now=now) == [
        {"id": "a", "payloads": [["p", 1.0]], "error": "last"}
    ]
    assert worker.queries().fetch(["a"]) == []
    assert worker.queries().morgue_fetch(["a"])[0]["updated_at"] == now
    assert worker.metrics()["failed"] == 3


def test_fail_returns_only_the_morgue_bound_jobs_of_a_mixed_batch(worker, queue):
    worker.perform_async([{"id": "old", "payload": 1, "score": 1, "perform_in": NOW - 2}])
    fail(queue, 0, pop(queue, 0, 10, now=NOW), "e", retry_in, 1, now=NOW)
    later = NOW + 1000
    worker.perform_async([{"id": "new", "payload": 2, "score": 2, "perform_in": later - 1}])
    batch = pop(queue, 0, 10, now=later)
    assert {job.id: job.retry_count for job in batch} == {"old": 0, "new": -1}

    dead = fail(queue, 0, batch, "second", retry_in, 1, now=later)

    assert dead == [{"id": "old", "payloads": [[1, 1.0]], "error": "second"}]
    [retried] = worker.queries().fetch(["new"])
    assert (retried["retry_count"], retried["perform_in"]) == (0, later + retry_in(0))
    assert worker.metrics()["failed"] == 1 + 2


def test_exhausted_rest_goes_back_onto_a_job_that_arrived_meanwhile(worker, queue):
    worker.perform_async(
        [
            {"id": "a", "payload": "p1", "score": 1, "perform_in": NOW - 1},
            {"id": "a", "payload": "p2", "score": 2, "perform_in": NOW - 1},
        ]
    )
    batch = pop(queue, 0, 10, now=NOW)
    worker.perform_async([{"id": "a", "payload": "p3", "score": 3, "perform_in": NOW + 50}])
    fail(queue, 0, batch, "fatal", retry_in, 0, now=NOW)

    [job] = worker.queries().fetch(["a"])
    assert job["payloads"] == [["p2", 2.0], ["p3", 3.0]]
    assert (job["retry_count"], job["perform_in"]) == (-1, NOW)
    assert worker.queries().morgue_fetch(["a"])[0]["payloads"] == [["p1", 1.0]]


def test_restore_puts_a_crashed_batch_back_with_its_schedule(worker, queue):
    worker.perform_async(
        [
            {"id": "fresh", "payload": "f", "score": 1, "perform_in": NOW - 7},
            {"id": "retry", "payload": "r", "score": 2, "perform_in": NOW - 9},
        ]
    )
    pop(queue, 0, 1, now=NOW)  # "retry" (earliest)
    fail(queue, 0, [PoppedJob("retry", -1)], "flaky", retry_in, 5, now=NOW)
    later = NOW + 1000
    batch = pop(queue, 0, 10, now=later)
    assert [job.id for job in batch] == ["fresh", "retry"]
    # The process dies here: the batch stays in the processing area.

    assert restore(queue, 0, now=later + 5) == 2

    assert worker.queries().processing_data() == []
    assert worker.queries().fetch(["fresh", "retry"]) == [
        {"id": "fresh", "payloads": [["f", 1.0]], "perform_in": NOW - 7, "retry_count": -1},
        {
            "id": "retry",
            "payloads": [["r", 2.0]],
            "perform_in": NOW + retry_in(0),
            "retry_count": 0,
            "error": "flaky",
        },
    ]
    metrics = worker.metrics()
    assert (metrics["busy"], metrics["processed"], metrics["failed"]) == (0, 0, 1)
    assert [job.id for job in pop(queue, 0, 10, now=later + 5)] == ["fresh", "retry"]


def test_restore_of_an_empty_processing_area_does_nothing(worker, queue):
    worker.perform_async([{"id": "a", "perform_in": NOW - 1}])
    assert restore(queue, 0, now=NOW) == 0
    assert len(worker.queries().fetch(["a"])) == 1


def test_shards_are_popped_independently(sharded_worker):
    queue = sharded_worker.queue()
    sharded_worker.perform_async([{"id": i, "perform_in": NOW - 1} for i in range(30)])
    seen = []
    for shard in range(5):
        batch = pop(queue, shard, 100, now=NOW)
        assert all(queue.shard_of(job.id) == shard for job in batch)
        seen += [job.id for job in batch]
    assert sorted(seen, key=int) == [str(i) for i in range(30)]
    assert sharded_worker.metrics()["busy"] == 30
