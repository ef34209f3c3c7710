"""The bulk actions of SPEC §5 (what the dashboard's buttons do)."""

from __future__ import annotations

import time

import pytest
from storage_support import NOW, retry_in

from tests.leasing import fail, pop


def ids(jobs):
    return [job["id"] for job in jobs]


def fail_all(queue, now, error="e", max_retry_count=5, limit=10_000):
    """Pop every due job of shard 0 at ``now`` and fail them."""
    batch = pop(queue, 0, limit, now=now)
    return fail(queue, 0, batch, error, retry_in, max_retry_count, now=now)


@pytest.fixture
def failed_and_fresh(worker, queue):
    """Retries "r1" (two payloads, error "e1") and "r2"; fresh "f1" (due) and "f2" (future)."""
    worker.perform_async(
        [
            {"id": "r1", "payload": "a", "score": 1, "perform_in": NOW},
            {"id": "r1", "payload": "b", "score": 2, "perform_in": NOW},
            {"id": "r2", "payload": "c", "score": 3, "perform_in": NOW},
        ]
    )
    fail_all(queue, NOW, "e1")
    worker.perform_async(
        [
            {"id": "f1", "payload": "d", "score": 4, "perform_in": NOW},
            {"id": "f2", "payload": "e", "score": 5, "perform_in": time.time() + 3600},
        ]
    )
    return worker


def test_perform_all_jobs_now_makes_every_queued_job_due(failed_and_fresh):
    before = time.time()
    failed_and_fresh.actions().perform_all_jobs_now()
    after = time.time()

    jobs = {job["id"]: job for job in failed_and_fresh.queries().range_by_id("-", "+")}
    assert set(jobs) == {"r1", "r2", "f1", "f2"}
    assert all(job["perform_in"] <= after for job in jobs.values())
    assert before <= jobs["f2"]["perform_in"]
    assert {job["id"]: job["retry_count"] for job in jobs.values()} == {
        "r1": 0,
        "r2": 0,
        "f1": -1,
        "f2": -1,
    }


def test_perform_all_jobs_now_across_shards_and_chunks(sharded_worker):
    future = time.time() + 3600
    sharded_worker.perform_async([{"id": n, "perform_in": future} for n in range(2500)])
    queue = sharded_worker.queue()
    assert all(pop(queue, shard, 10_000) == [] for shard in range(5))

    sharded_worker.actions().perform_all_jobs_now()

    popped = sum(len(pop(queue, shard, 10_000)) for shard in range(5))
    assert popped == 2500
    assert sharded_worker.metrics()["length"] == 0


def test_kill_all_failed_jobs_moves_retries_whole_to_the_morgue(failed_and_fresh):
    before = time.time()
    failed_and_fresh.actions().kill_all_failed_jobs()
    after = time.time()

    queries = failed_and_fresh.queries()
    assert ids(queries.range_by_id("-", "+")) == ["f1", "f2"]
    dead = queries.morgue_fetch(["r1", "r2"])
    assert [(job["id"], job["payloads"], job["error"]) for job in dead] == [
        ("r1", [["a", 1.0], ["b", 2.0]], "e1"),
        ("r2", [["c", 3.0]], "e1"),
    ]
    assert all(before <= job["updated_at"] <= after for job in dead)
    metrics = failed_and_fresh.metrics()
    assert (metrics["fresh"], metrics["retries"], metrics["morgue_length"]) == (2, 0, 2)


def test_kill_all_failed_jobs_merges_into_existing_morgue_entries(worker, queue):
    worker.perform_async([{"id": "a", "payload": "old", "score": 1, "perform_in": NOW}])
    fail_all(queue, NOW, "first death", max_retry_count=0)
    worker.perform_async([{"id": "a", "payload": "new", "score": 2, "perform_in": NOW}])
    fail_all(queue, NOW, "retrying")

    worker.actions().kill_all_failed_jobs()

    [dead] = worker.queries().morgue_fetch(["a"])
    assert dead["payloads"] == [["old", 1.0], ["new", 2.0]]
    assert dead["error"] == "retrying"
    assert worker.queries().fetch(["a"]) == []


def test_kill_all_failed_jobs_over_several_chunks(worker, queue):
    worker.perform_async([{"id": n, "perform_in": NOW} for n in range(2500)])
    fail_all(queue, NOW)
    worker.actions().kill_all_failed_jobs()
    metrics = worker.metrics()
    assert (metrics["retries"], metrics["morgue_length"]) == (0, 2500)


def test_delete_all_failed_jobs_keeps_fresh_jobs_and_the_morgue(failed_and_fresh, queue):
    failed_and_fresh.perform_async([{"id": "dead", "perform_in": NOW - 10}])
    fail(queue, 0, pop(queue, 0, 1, now=NOW), "x", retry_in, 0, now=NOW)

    failed_and_fresh.actions().delete_all_failed_jobs()

    queries = failed_and_fresh.queries()
    assert ids(queries.range_by_id("-", "+")) == ["f1", "f2"]
    assert queries.fetch(["r1", "r2"]) == []
    assert ids(queries.morgue_range_by_id("-", "+")) == ["dead"]
    metrics = failed_and_fresh.metrics()
    assert (metrics["fresh"], metrics["retries"], metrics["morgue_length"]) == (2, 0, 1)


def test_delete_all_failed_jobs_over_several_chunks(worker, queue):
    worker.perform_async([{"id": n, "perform_in": NOW} for n in range(2500)])
    fail_all(queue, NOW)
    worker.perform_async([{"id": "fresh"}])
    worker.actions().delete_all_failed_jobs()
    assert worker.metrics()["length"] == 1


@pytest.fixture
def dead(sharded_worker):
    """Dead jobs "0".."9" of the five-shard worker."""
    queue = sharded_worker.queue()
    sharded_worker.perform_async([{"id": n, "payload": n, "perform_in": NOW} for n in range(10)])
    for shard in range(5):
        batch = pop(queue, shard, 100, now=NOW)
        if batch:
            fail(queue, shard, batch, "dead", retry_in, 0, now=NOW)
    assert sharded_worker.metrics()["morgue_length"] == 10
    return sharded_worker


def test_morgue_queue_up_moves_the_given_ids_to_their_shards(dead):
    assert dead.actions().morgue_queue_up(["3", 7, "missing"]) == 2
    queries = dead.queries()
    assert ids(queries.fetch(["3", "7"])) == ["3", "7"]
    assert ids(queries.morgue_range_by_id("-", "+", limit=100)) == [
        "0", "1", "2", "4", "5", "6", "8", "9"
    ]  # fmt: skip
    queue = dead.queue()
    popped = {job.id: shard for shard in range(5) for job in pop(queue, shard, 100)}
    assert popped == {"3": queue.shard_of("3"), "7": queue.shard_of("7")}
    assert dead.actions().morgue_queue_up([]) == 0


def test_morgue_queue_up_all_jobs(dead):
    dead.actions().morgue_queue_up_all_jobs()
    metrics = dead.metrics()
    assert (metrics["morgue_length"], metrics["fresh"]) == (0, 10)
    [job] = dead.queries().fetch(["4"])
    assert (job["payloads"][0][0], job["retry_count"]) == (4, -1)


def test_morgue_queue_up_all_jobs_over_several_chunks(worker, queue):
    worker.perform_async([{"id": n, "perform_in": NOW} for n in range(2500)])
    fail_all(queue, NOW, max_retry_count=0)
    worker.actions().morgue_queue_up_all_jobs()
    metrics = worker.metrics()
    assert (metrics["morgue_length"], metrics["fresh"]) == (0, 2500)


def test_morgue_delete_deletes_only_the_given_ids(dead):
    assert dead.actions().morgue_delete([1, "2", "missing"]) == 2
    assert ids(dead.queries().morgue_range_by_id("-", "+", limit=100)) == [
        "0", "3", "4", "5", "6", "7", "8", "9"
    ]  # fmt: skip
    assert dead.queries().fetch(["1", "2"]) == []
    assert dead.actions().morgue_delete([]) == 0


def test_morgue_delete_all_jobs(dead):
    dead.perform_async([{"id": "queued"}])
    dead.actions().morgue_delete_all_jobs()
    assert dead.queries().morgue_range_by_id("-", "+") == []
    assert dead.queries().morgue_range_by_updated_at("-inf", "+inf") == []
    metrics = dead.metrics()
    assert (metrics["morgue_length"], metrics["length"]) == (0, 1)
