"""Hot ids: an id with many payloads keeps them in a sorted set of its own.

Pushing onto it stays O(log n), a batch takes a bounded number of its payloads,
and every move (fail, restore, kill, queue up, delete) keeps them exact and
leaves no key behind.
"""

from __future__ import annotations

import pytest
from storage_support import NOW, hot_layout, retry_in

from lowkiq.errors import InvalidQuery
from lowkiq.storage import blob
from lowkiq.storage.metrics import queue_metrics
from lowkiq.storage.queries import Queries
from tests.leasing import ack, fail, pop, restore


def push_one_by_one(worker, job_id, count, first_score=0.0, perform_in=NOW):
    for n in range(count):
        worker.perform_async(
            [
                {
                    "id": job_id,
                    "payload": int(first_score) + n,
                    "score": first_score + n,
                    "perform_in": perform_in,
                }
            ]
        )


def lex_member(redis_client, queue, job_id):
    """The fresh lex-zset member of ``job_id``."""
    key = queue.keys.fresh_lex_zset(queue.shard_of(job_id))
    [member] = redis_client.zrangebylex(key, f"[{job_id}\0", f"({job_id}\x01")
    return member


def test_an_id_past_the_limit_keeps_its_payloads_in_a_sorted_set_of_its_own(
    worker, queue, redis_client
):
    push_one_by_one(worker, "hot", blob.SPILL_PAYLOADS + 1)
    assert lex_member(redis_client, queue, "hot") == b"hot\0"
    hot_zset = queue.keys.payloads_zset(queue.shard_of("hot"), "hot")
    assert redis_client.zcard(hot_zset) == blob.SPILL_PAYLOADS + 1
    [job] = worker.queries().fetch(["hot"])
    assert job["payloads"] == [[n, float(n)] for n in range(blob.SPILL_PAYLOADS + 1)]
    assert "payloads_count" not in job


def test_a_few_large_payloads_also_move_out(worker, queue, redis_client):
    big = "x" * (blob.SPILL_BYTES // 2)
    worker.perform_async([{"id": "big", "payload": big + "1", "score": 1}])
    worker.perform_async([{"id": "big", "payload": big + "2", "score": 2}])
    worker.perform_async([{"id": "big", "payload": big + "3", "score": 3}])
    assert lex_member(redis_client, queue, "big") == b"big\0"
    [job] = worker.queries().fetch(["big"])
    assert [score for _, score in job["payloads"]] == [1.0, 2.0, 3.0]


def test_one_large_payload_stays_packed(worker, queue, redis_client):
    worker.perform_async([{"id": "one", "payload": "x" * (2 * blob.SPILL_BYTES)}])
    assert lex_member(redis_client, queue, "one") != b"one\0"


def test_pushing_onto_a_hot_id_keeps_the_merge_rules(worker, queue):
    push_one_by_one(worker, "hot", 100, first_score=10.0, perform_in=NOW - 5)
    batch = pop(queue, 0, 10, now=NOW)
    fail(queue, 0, batch, "boom", retry_in, worker.max_retry_count, now=NOW)
    worker.perform_async(
        [
            {"id": "hot", "payload": 10, "score": 1.0, "perform_in": NOW + 999},  # older: wins
            {"id": "hot", "payload": 11, "score": 500.0, "perform_in": NOW + 999},  # newer: loses
            {"id": "hot", "payload": "new", "score": 5.0, "perform_in": NOW + 999},
        ]
    )
    [job] = worker.queries().fetch(["hot"])
    assert (job["retry_count"], job["perform_in"], job["error"]) == (0, NOW + 10, "boom")
    assert job["payloads"][:4] == [[10, 1.0], ["new", 5.0], [11, 11.0], [12, 12.0]]
    assert len(job["payloads"]) == 101


def test_a_batch_takes_a_bounded_share_of_a_hot_id_the_rest_stays_due(worker, queue):
    with hot_layout(SPILL_PAYLOADS=2, BATCH_PAYLOADS=3):
        queue = worker.queue()
        push_one_by_one(worker, "hot", 7)
        worker.perform_async([{"id": "cold", "payload": "c", "score": 0, "perform_in": NOW + 1}])
        [first] = pop(queue, 0, 10, now=NOW + 2)
        assert (first.id, first.payloads) == ("hot", [0, 1, 2])
        [rest] = worker.queries().fetch(["hot"])
        assert rest["payloads"] == [[3, 3.0], [4, 4.0], [5, 5.0], [6, 6.0]]
        # The rest stays due, behind the ids already due.
        assert rest["perform_in"] == NOW + 2
        # It waits for the batch (one batch per shard at a time).
        assert pop(queue, 0, 10, now=NOW + 2) is None
        second = pop(queue, 0, 10, now=NOW + 2, ack_shard=0)
        assert [(job.id, job.payloads) for job in second] == [("cold", ["c"]), ("hot", [3, 4, 5])]
        third = pop(queue, 0, 10, now=NOW + 2, ack_shard=0)
        assert [(job.id, job.payloads) for job in third] == [("hot", [6])]
        assert worker.queries().fetch(["hot"]) == []


def test_a_failed_share_of_a_hot_id_merges_back_with_its_schedule(worker, queue):
    with hot_layout(SPILL_PAYLOADS=2, BATCH_PAYLOADS=3):
        queue = worker.queue()
        push_one_by_one(worker, "hot", 5)
        batch = pop(queue, 0, 10, now=NOW)
        fail(queue, 0, batch, "boom", retry_in, worker.max_retry_count, now=NOW)
        [job] = worker.queries().fetch(["hot"])
        assert (job["retry_count"], job["perform_in"], job["error"]) == (0, NOW + 10, "boom")
        assert job["payloads"] == [[n, float(n)] for n in range(5)]


def test_retries_exhausted_on_a_hot_id_buries_its_oldest_payload(worker, queue, fail_batch):
    push_one_by_one(worker, "hot", 100, perform_in=NOW - 100)
    now = NOW
    for _ in range(worker.max_retry_count):
        fail_batch(now=now)
        now += 1000
    [dead] = fail_batch(now=now)
    assert (dead["id"], dead["payloads"]) == ("hot", [[0, 0.0]])
    [job] = worker.queries().fetch(["hot"])
    assert (job["retry_count"], job["perform_in"]) == (-1, now)
    assert job["payloads"] == [[n, float(n)] for n in range(1, 100)]
    [morgue] = worker.queries().morgue_fetch(["hot"])
    assert morgue["payloads"] == [[0, 0.0]]


def test_restore_puts_a_hot_share_back_exactly(worker, queue):
    with hot_layout(SPILL_PAYLOADS=2, BATCH_PAYLOADS=3):
        queue = worker.queue()
        push_one_by_one(worker, "hot", 5)
        pop(queue, 0, 10, now=NOW)
        assert restore(queue, 0, now=NOW) == 1
        [job] = worker.queries().fetch(["hot"])
        assert job["payloads"] == [[n, float(n)] for n in range(5)]


def test_kill_and_queue_up_move_a_hot_id_whole_and_merge_with_what_is_there(
    worker, queue, fail_batch, redis_client
):
    push_one_by_one(worker, "hot", 100, perform_in=NOW - 100)
    fail_batch(now=NOW)
    assert worker.actions().kill_all_failed_jobs() == 1
    assert not redis_client.exists(queue.keys.payloads_zset(queue.shard_of("hot"), "hot"))
    [dead] = worker.queries().morgue_fetch(["hot"])
    assert len(dead["payloads"]) == 100 and dead["error"] == "boom"
    # A newer hot job of the same id arrives; queuing up merges both (smaller into larger).
    push_one_by_one(worker, "hot", 150, first_score=50.0)
    assert worker.actions().morgue_queue_up(["hot"]) == 1
    [job] = worker.queries().fetch(["hot"])
    assert job["payloads"] == [[n, float(n)] for n in range(200)]
    assert (job["retry_count"], worker.queries().morgue_fetch(["hot"])) == (-1, [])
    # Killed again onto a hot morgue entry: the union again, nothing left queued.
    fail_batch(now=time_after(job))
    worker.actions().kill_all_failed_jobs()
    assert len(worker.queries().morgue_fetch(["hot"])[0]["payloads"]) == 200
    worker.actions().morgue_queue_up_all_jobs()
    assert len(worker.queries().fetch(["hot"])[0]["payloads"]) == 200


def time_after(job):
    return job["perform_in"] + 1


def test_deleting_a_hot_id_deletes_its_payloads(worker, queue, fail_batch, redis_client):
    push_one_by_one(worker, "a", 100, perform_in=NOW - 100)
    push_one_by_one(worker, "b", 100, perform_in=NOW - 100)
    fail_batch(now=NOW)
    worker.actions().kill_all_failed_jobs()
    push_one_by_one(worker, "a", 100, perform_in=NOW - 100)
    push_one_by_one(worker, "b", 100, perform_in=NOW - 100)
    fail_batch(now=NOW)
    assert worker.actions().delete_all_failed_jobs() == 2
    assert worker.actions().morgue_delete(["a"]) == 1
    assert worker.actions().morgue_delete_all_jobs() == 1
    assert [k for k in redis_client.scan_iter(match="*payloads*")] == []
    assert worker.metrics()["length"] == 0 and worker.metrics()["morgue_length"] == 0


def test_queries_bound_the_payloads_of_a_job_and_page_through_them(worker, queue):
    push_one_by_one(worker, "hot", 100)
    push_one_by_one(worker, "cold", 3)
    bounded = Queries(queue, payloads_limit=10)
    hot, cold = bounded.fetch(["hot", "cold"])
    assert hot["payloads"] == [[n, float(n)] for n in range(10)]
    assert hot["payloads_count"] == 100
    assert (cold["payloads_count"], len(cold["payloads"])) == (3, 3)
    assert bounded.payloads("hot", start=95, limit=10) == [[n, float(n)] for n in range(95, 100)]
    assert bounded.payloads("cold", start=1, limit=1) == [[1, 1.0]]
    assert bounded.payloads("missing") == []
    with pytest.raises(InvalidQuery):
        bounded.payloads("hot", start=-1)
    with pytest.raises(InvalidQuery):
        Queries(queue, payloads_limit=0)


def test_dead_payloads_page_too(worker, queue, fail_batch):
    push_one_by_one(worker, "hot", 100, perform_in=NOW - 100)
    fail_batch(now=NOW)
    worker.actions().kill_all_failed_jobs()
    queries = Queries(queue, payloads_limit=5)
    [dead] = queries.morgue_fetch(["hot"])
    assert (len(dead["payloads"]), dead["payloads_count"]) == (5, 100)
    assert queries.morgue_payloads("hot", start=98) == [[98, 98.0], [99, 99.0]]


def popped(batch):
    return [(job.id, job.payloads) for job in batch]


def test_a_hot_id_that_leaves_payloads_behind_queues_behind_the_ids_already_due(
    worker, queue, redis_client
):
    with hot_layout(SPILL_PAYLOADS=2, BATCH_PAYLOADS=3):
        queue = worker.queue()
        push_one_by_one(worker, "hot", 9, perform_in=NOW - 10)
        worker.perform_async(
            [
                {"id": "a", "payload": "a", "perform_in": NOW - 5},
                {"id": "b", "payload": "b", "perform_in": NOW - 1},
                {"id": "later", "payload": "l", "perform_in": NOW + 100},
            ]
        )
        # Batches of one id: the hot id takes its share, then every id due before the
        # pop goes first, and the hot id comes back with its next payloads, in order.
        order = [popped(pop(queue, 0, 1, now=NOW))]
        for now in (NOW + 1, NOW + 2, NOW + 3, NOW + 4):
            order.append(popped(pop(queue, 0, 1, now=now, ack_shard=0)))
        assert order == [
            [("hot", [0, 1, 2])],
            [("a", ["a"])],
            [("b", ["b"])],
            [("hot", [3, 4, 5])],
            [("hot", [6, 7, 8])],
        ]
        assert worker.queries().fetch(["hot"]) == []
        # Nothing is left of the time it first became due.
        assert not redis_client.exists(queue.keys.due_since_zset(0))


def test_a_hot_id_yields_to_an_id_enqueued_while_its_batch_runs(worker, queue):
    with hot_layout(SPILL_PAYLOADS=2, BATCH_PAYLOADS=3):
        queue = worker.queue()
        push_one_by_one(worker, "hot", 6, perform_in=NOW - 10)
        assert popped(pop(queue, 0, 10, now=NOW)) == [("hot", [0, 1, 2])]
        push_one_by_one(worker, "hot", 3, first_score=6.0, perform_in=NOW + 0.5)
        worker.perform_async([{"id": "new", "payload": "n", "perform_in": NOW + 0.5}])
        # The next pop acks the hot id's batch: it queues again behind "new".
        second = popped(pop(queue, 0, 1, now=NOW + 1, ack_shard=0))
        third = popped(pop(queue, 0, 1, now=NOW + 1, ack_shard=0))
        assert [second, third] == [[("new", ["n"])], [("hot", [3, 4, 5])]]
        assert popped(pop(queue, 0, 10, now=NOW + 2, ack_shard=0)) == [("hot", [6, 7, 8])]
        assert worker.queries().fetch(["hot"]) == []


def test_the_lag_counts_from_when_a_yielding_hot_id_first_became_due(worker, queue, redis_client):
    with hot_layout(SPILL_PAYLOADS=2, BATCH_PAYLOADS=3):
        queue = worker.queue()
        push_one_by_one(worker, "hot", 9, perform_in=NOW - 100)
        worker.perform_async([{"id": "cold", "payload": "c", "perform_in": NOW - 1}])
        pop(queue, 0, 1, now=NOW)
        pop(queue, 0, 1, now=NOW + 1, ack_shard=0)
        # The hot id's perform_in moved to NOW, yet its oldest due payload waits since NOW - 100.
        assert queue_metrics(queue, now=NOW + 10)["lag"] == 110
        pop(queue, 0, 1, now=NOW + 2, ack_shard=0)  # the hot id again: it yields again
        assert queue_metrics(queue, now=NOW + 10)["lag"] == 110
        pop(queue, 0, 1, now=NOW + 3, ack_shard=0)  # its last payloads
        ack(queue, 0)
        assert queue_metrics(queue, now=NOW + 10)["lag"] == 0
        assert not redis_client.exists(queue.keys.due_since_zset(0))


@pytest.mark.parametrize("ending", ["fail", "restore", "delete", "latest"])
def test_a_yielding_hot_id_that_is_rescheduled_or_gone_leaves_no_due_time_behind(
    worker, queue, redis_client, ending
):
    with hot_layout(SPILL_PAYLOADS=2, BATCH_PAYLOADS=3):
        queue = worker.queue()
        push_one_by_one(worker, "hot", 9, perform_in=NOW - 100)
        batch = pop(queue, 0, 1, now=NOW)
        assert redis_client.zscore(queue.keys.due_since_zset(0), "hot") == NOW - 100
        if ending == "fail":  # the failed share's schedule wins (SPEC §3 rule 3)
            fail(queue, 0, batch, "boom", retry_in, worker.max_retry_count, now=NOW)
            expected = NOW + 10
        elif ending == "restore":  # the processing copy's perform_in wins
            restore(queue, 0, now=NOW)
            expected = NOW - 100
        elif ending == "delete":
            worker.actions().delete(["hot"])
            expected = None
        else:
            worker.merge_perform_in = "latest"
            worker.perform_async([{"id": "hot", "payload": "x", "perform_in": NOW + 50}])
            expected = NOW + 50
        assert not redis_client.exists(queue.keys.due_since_zset(0))
        jobs = worker.queries().fetch(["hot"])
        assert [job["perform_in"] for job in jobs] == ([] if expected is None else [expected])
