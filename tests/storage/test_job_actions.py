"""The per-id job actions (SPEC §11 "Job control"): delete, perform_now, kill, clear and
move, on one server and on a Redis Cluster; none touches a processing area."""

from __future__ import annotations

import time

import pytest
from storage_support import NOW, hot_layout, retry_in

import lowkiq
from lowkiq import JobsRunning
from lowkiq.errors import InvalidQuery
from lowkiq.storage.actions import KILLED_ERROR
from tests.leasing import fail, pop


def ids(jobs):
    return [job["id"] for job in jobs]


def push_hot(worker, job_id, count):
    """Enqueue payloads 0..count-1 of ``job_id`` one call each (merges spill them)."""
    for n in range(count):
        worker.perform_async([{"id": job_id, "payload": n, "score": n}])


@pytest.fixture
def queued(worker, queue):
    """Retries "r1" (payloads a, b; error "e1") and "r2"; fresh "f1" (due) and "f2" (in an
    hour); dead "d1"."""
    worker.perform_async(
        [
            {"id": "r1", "payload": "a", "score": 1, "perform_in": NOW},
            {"id": "r1", "payload": "b", "score": 2, "perform_in": NOW},
            {"id": "r2", "payload": "c", "score": 3, "perform_in": NOW},
            {"id": "d1", "payload": "z", "score": 9, "perform_in": NOW},
        ]
    )
    fail(queue, 0, pop(queue, 0, 10, now=NOW), "e1", retry_in, 5, now=NOW)
    worker.actions().kill(["d1"])
    worker.perform_async(
        [
            {"id": "f1", "payload": "d", "score": 4, "perform_in": NOW},
            {"id": "f2", "payload": "e", "score": 5, "perform_in": time.time() + 3600},
        ]
    )
    return worker


def test_delete_removes_queued_jobs_of_any_kind_and_nothing_else(queued):
    assert queued.actions().delete(["r1", "f2", "missing", "d1"]) == 2
    queries = queued.queries()
    assert ids(queries.range_by_id("-", "+")) == ["f1", "r2"]
    assert ids(queries.morgue_range_by_id("-", "+")) == ["d1"]
    metrics = queued.metrics()
    assert (metrics["fresh"], metrics["retries"], metrics["morgue_length"]) == (1, 1, 1)
    assert queued.actions().delete([]) == 0


def test_delete_takes_a_hot_ids_payloads_with_it(worker, redis_client):
    with hot_layout(SPILL_PAYLOADS=2):
        push_hot(worker, "hot", 5)
        key = worker.queue().keys.payloads_zset(0, "hot")
        assert redis_client.zcard(key) == 5
        assert worker.actions().delete(["hot"]) == 1
        assert redis_client.exists(key) == 0
        assert worker.metrics()["length"] == 0


def test_ids_with_nul_are_refused_before_anything_changes(queued):
    with pytest.raises(InvalidQuery, match="NUL"):
        queued.actions().delete(["f1", "r1\0x"])
    assert queued.metrics()["length"] == 4


def test_perform_now_makes_the_given_jobs_due_and_keeps_their_retry_count(queued):
    before = time.time()
    assert queued.actions().perform_now(["f2", "r1", "f1", "missing"]) == 3
    jobs = {job["id"]: job for job in queued.queries().fetch(["f1", "f2", "r1", "r2"])}
    assert before - 1 <= jobs["f2"]["perform_in"] <= time.time() + 1
    assert jobs["r1"]["perform_in"] <= time.time() + 1 and jobs["r1"]["retry_count"] == 0
    assert jobs["r1"]["error"] == "e1"
    assert jobs["f1"]["perform_in"] == NOW  # already due: keeps its place
    assert jobs["r2"]["perform_in"] == NOW + retry_in(0)  # not named: untouched


def test_kill_moves_jobs_whole_to_the_morgue_keeping_or_giving_an_error(queued):
    assert queued.actions().kill(["r1", "f2", "missing"]) == 2
    queries = queued.queries()
    dead = {job["id"]: job for job in queries.morgue_range_by_id("-", "+")}
    assert set(dead) == {"d1", "f2", "r1"}
    assert dead["r1"]["payloads"] == [["a", 1.0], ["b", 2.0]]
    assert dead["r1"]["error"] == "e1"
    assert dead["f2"]["error"] == KILLED_ERROR
    assert ids(queries.range_by_id("-", "+")) == ["f1", "r2"]


def test_kill_merges_into_the_morgue_entry_of_the_id(worker):
    worker.perform_async([{"id": "a", "payload": "old", "score": 1}])
    worker.actions().kill(["a"])
    worker.perform_async([{"id": "a", "payload": "new", "score": 2}])
    worker.actions().kill(["a"])
    [dead] = worker.queries().morgue_fetch(["a"])
    assert dead["payloads"] == [["old", 1.0], ["new", 2.0]]
    assert worker.metrics()["morgue_length"] == 1


def test_kill_moves_a_hot_ids_payloads_to_the_morgue(worker, redis_client):
    with hot_layout(SPILL_PAYLOADS=2):
        push_hot(worker, "hot", 5)
        assert redis_client.exists(worker.queue().keys.payloads_zset(0, "hot")) == 1
        assert worker.actions().kill(["hot"]) == 1
        [dead] = worker.queries().morgue_fetch(["hot"])
        assert dead["payloads"] == [[n, float(n)] for n in range(5)]
        assert redis_client.exists(worker.queue().keys.payloads_zset(0, "hot")) == 0


def test_clear_empties_the_queue_over_shards_and_chunks_and_keeps_the_morgue(sharded_worker):
    sharded_worker.perform_async([{"id": n, "payload": n} for n in range(2600)])
    sharded_worker.actions().kill(["7"])
    with hot_layout(SPILL_PAYLOADS=2):
        push_hot(sharded_worker, "hot", 4)
        assert sharded_worker.queue().client.exists(hot_key(sharded_worker)) == 1
        assert sharded_worker.actions().clear() == 2600
    metrics = sharded_worker.metrics()
    assert (metrics["length"], metrics["morgue_length"]) == (0, 1)
    assert sharded_worker.queue().client.exists(hot_key(sharded_worker)) == 0
    assert sharded_worker.actions().clear() == 0


def hot_key(worker):
    queue = worker.queue()
    return queue.keys.payloads_zset(queue.shard_of("hot"), "hot")


def test_no_action_touches_a_processing_area(worker, queue, redis_client):
    """A running id's queued part is affected; its running batch is not."""
    worker.perform_async([{"id": n, "payload": "running", "perform_in": NOW} for n in "abc"])
    batch = pop(queue, 0, 10, now=NOW)
    assert [job.id for job in batch] == ["a", "b", "c"]
    processing = queue.keys.processing_hash(0)
    running = redis_client.hgetall(processing)
    worker.perform_async([{"id": n, "payload": "queued"} for n in "abcd"])

    class Elsewhere(lowkiq.Worker):
        shards_count = 2

    actions = worker.actions()
    assert actions.perform_now(["a"]) == 1
    assert actions.delete(["a"]) == 1
    assert actions.kill(["b"]) == 1
    [queued_c] = worker.queries().fetch(["c"])
    # A move waits for the running batch; past its wait it moves nothing of the id.
    with pytest.raises(JobsRunning, match="batch still running") as refused:
        actions.move(["c"], to=Elsewhere, wait=0.1)
    assert refused.value.running == ["c"] and refused.value.moved == 0
    assert worker.queries().fetch(["c"]) == [queued_c]
    assert Elsewhere.queries().fetch(["c"]) == []
    assert actions.clear() == 2  # "c" and "d": the jobs left queued
    assert redis_client.hgetall(processing) == running
    assert worker.metrics()["busy"] == 3
    assert ids(worker.queries().processing_data()) == ["a", "b", "c"]
    assert [p for p, _ in worker.queries().morgue_fetch(["b"])[0]["payloads"]] == ["queued"]


class Target(lowkiq.Worker):
    """Where jobs are moved to: three shards, so ids land in other shards than they left."""

    shards_count = 3


def test_move_keeps_payload_order_and_scores_over_shards(sharded_worker):
    jobs = [
        {"id": f"o{n}", "payload": {"v": v}, "score": 1000 + v + n / 10}
        for n in range(20)
        for v in (3, 1, 2)
    ]
    sharded_worker.perform_async(jobs)
    sharded_worker.perform_async([{"id": "stay", "payload": 0}])
    moved = [f"o{n}" for n in range(20)]
    assert sharded_worker.actions().move([*moved, "missing"], to=Target) == 20

    assert ids(sharded_worker.queries().range_by_id("-", "+", limit=100)) == ["stay"]
    got = {job["id"]: job for job in Target.queries().range_by_id("-", "+", limit=100)}
    assert sorted(got) == sorted(moved)
    for n in range(20):
        job = got[f"o{n}"]
        assert job["payloads"] == [[{"v": v}, 1000 + v + n / 10] for v in (1, 2, 3)]
        assert job["retry_count"] == -1
    target = Target.queue()
    placed = {job_id: target.shard_of(job_id) for job_id in moved}
    assert len(set(placed.values())) == 3


def test_move_merges_by_rule_4_and_keeps_the_error(worker, queue):
    worker.perform_async([{"id": "a", "payload": "p1", "score": 1, "perform_in": NOW}])
    fail(queue, 0, pop(queue, 0, 10, now=NOW), "it broke", retry_in, 5, now=NOW)
    far = time.time() + 7200
    Target.perform_async([{"id": "a", "payload": "p0", "score": 0, "perform_in": far}])
    before = time.time()
    assert worker.actions().move(["a"], to=Target) == 1
    [job] = Target.queries().fetch(["a"])
    assert job["payloads"] == [["p0", 0.0], ["p1", 1.0]]
    assert job["retry_count"] == -1
    assert before - 1 <= job["perform_in"] <= time.time() + 1
    assert job["error"] == "it broke"
    assert worker.queries().fetch(["a"]) == []


def test_move_of_a_hot_id(worker, redis_client):
    with hot_layout(SPILL_PAYLOADS=3):
        push_hot(worker, "hot", 10)
        assert redis_client.exists(worker.queue().keys.payloads_zset(0, "hot")) == 1
        assert worker.actions().move(["hot"], to=Target) == 1
        [job] = Target.queries().fetch(["hot"])
        assert job["payloads"] == [[n, float(n)] for n in range(10)]
        assert redis_client.exists(worker.queue().keys.payloads_zset(0, "hot")) == 0
        assert worker.metrics()["length"] == 0


def test_move_takes_out_only_what_it_put_in_the_target(worker, queue):
    """A payload enqueued between the read and the take stays in the source, with the
    job's schedule; the copied ones are taken out (the three steps run by hand)."""
    worker.perform_async([{"id": "a", "payload": p, "score": s} for p, s in (("x", 1), ("y", 2))])
    [before] = worker.queries().fetch(["a"])
    found, _, _, hold = queue.run("move_read", 0, "", 30, "a")
    target = Target.queue()
    shard = target.shard_of("a")
    assert target.run("move_put", shard, "", queue.name, found[0], found[1], b"", b"") == 1
    worker.perform_async([{"id": "a", "payload": "late", "score": 3}])
    # The job stays, with "late", and its perform_in from before the move held it.
    assert queue.run("move_take", 0, target.name, hold, found[0], found[1], found[4]) == [0, []]
    [left] = worker.queries().fetch(["a"])
    assert left["payloads"] == [["late", 3.0]]
    assert left["perform_in"] == before["perform_in"]
    [moved] = Target.queries().fetch(["a"])
    assert moved["payloads"] == [["x", 1.0], ["y", 2.0]]


def test_move_onto_its_own_queue_is_refused(worker):
    worker.perform_async([{"id": "a"}])
    with pytest.raises(InvalidQuery, match="own queue"):
        worker.actions().move(["a"], to=worker)
    assert worker.metrics()["length"] == 1


def test_perform_all_failed_jobs_now_makes_retries_due_and_leaves_fresh_ones(queued):
    assert queued.actions().perform_all_failed_jobs_now() == 2
    jobs = {job["id"]: job for job in queued.queries().fetch(["r1", "r2", "f2"])}
    assert jobs["r1"]["perform_in"] <= time.time() + 1 and jobs["r1"]["retry_count"] == 0
    assert jobs["r2"]["perform_in"] <= time.time() + 1
    assert jobs["f2"]["perform_in"] > time.time() + 3000


def test_perform_all_failed_jobs_now_over_several_chunks(worker, queue):
    worker.perform_async([{"id": n, "perform_in": NOW} for n in range(2500)])
    fail(queue, 0, pop(queue, 0, 10_000, now=NOW), "e", retry_in, 5, now=NOW)
    assert worker.actions().perform_all_failed_jobs_now() == 2500
    assert len(pop(queue, 0, 10_000)) == 2500


def test_delete_all_scheduled_jobs_keeps_due_ones(sharded_worker):
    now = time.time()
    sharded_worker.perform_async([{"id": f"s{n}", "perform_in": now + 600} for n in range(1200)])
    sharded_worker.perform_async([{"id": f"d{n}", "perform_in": now - 1} for n in range(5)])
    assert sharded_worker.actions().delete_all_scheduled_jobs() == 1200
    left = sharded_worker.queries().range_by_id("-", "+", limit=100)
    assert sorted(ids(left)) == [f"d{n}" for n in range(5)]
