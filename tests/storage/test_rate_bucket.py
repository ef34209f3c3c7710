"""A rate limit inside pop: a pop takes at most the tokens its shard may spend, and says
when to come back (on a Redis Cluster, after reserving tokens with rate_take)."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest
from storage_support import hot_layout, retry_in

import lowkiq
from lowkiq.storage.queue import Popped, Queue
from lowkiq.storage.rate_bucket import Throttle, bucket_state, take, throttle_for
from tests.leasing import ack, fail, token

#: One token every 10 s: within a test, only the bucket's capacity can be spent.
SLOW = 0.1 / 1000


def due(worker: type[lowkiq.Worker], count: int, prefix: str = "job") -> None:
    worker.perform_async(
        [{"id": f"{prefix}{n:03}", "perform_in": time.time() - 60} for n in range(count)]
    )


def pop(queue: Queue, shard: int, limit: int, throttle: Throttle) -> Popped:
    """Pop as a processing thread does: on a Redis Cluster, reserve tokens with rate_take
    when the pop asks for them, and pop again with the grant (if it is valid now)."""
    popped = queue.pop(shard, token(queue, shard), limit, throttle=throttle)
    if popped.needs_tokens and popped.limited:
        tokens, wait = take(queue, throttle)
        if wait > 0:
            return Popped(popped.acked, [], limited=True, wait=wait)
        granted = replace(throttle, grant=tokens)
        popped = queue.pop(shard, token(queue, shard), limit, throttle=granted)
    return popped


def test_a_pop_takes_at_most_the_tokens_left(worker, queue):
    due(worker, 10)
    throttle = Throttle(SLOW, capacity=3, want=3)
    first = pop(queue, 0, 10, throttle)
    assert len(first.jobs) == 3
    ack(queue, 0)
    second = pop(queue, 0, 10, throttle)
    assert second.jobs == [] and second.limited
    assert 25 < second.wait <= 30  # 3 tokens at one per 10 s
    assert len(worker.queries().fetch([f"job{n:03}" for n in range(10)])) == 7


def test_the_wait_comes_with_the_last_batch_when_jobs_remain(redis_client, worker, queue):
    due(worker, 10)
    throttle = Throttle(SLOW, capacity=2, want=2)
    first = pop(queue, 0, 10, throttle)
    assert len(first.jobs) == 2
    if queue.cluster:
        # The budget ran out: reserve the next pop's tokens apart (another slot).
        assert first.needs_tokens and first.wait == 0
        tokens, wait = take(queue, throttle)
        assert tokens == 2 and 15 < wait <= 20
    else:
        # The next batch's tokens are reserved by this pop: come back in 20 s.
        assert not first.needs_tokens and 15 < first.wait <= 20


def test_unspent_tokens_go_back_to_the_bucket_on_one_server(redis_client, worker, queue):
    throttle = Throttle(SLOW, capacity=5, want=5)
    due(worker, 2)
    assert len(pop(queue, 0, 10, throttle).jobs) == 2
    ack(queue, 0)
    due(worker, 10, prefix="more")
    # 3 tokens of the 5 are left (on a cluster in the shard's budget, on one server back
    # in the bucket): 3 jobs, not 5.
    popped = pop(queue, 0, 10, throttle)
    assert len(popped.jobs) == 3


def test_no_pop_is_spent_on_a_shard_with_nothing_due(worker, queue):
    throttle = Throttle(SLOW, capacity=1, want=1)
    for _ in range(3):
        popped = pop(queue, 0, 10, throttle)
        assert popped.jobs == [] and not popped.limited
    due(worker, 1)
    assert len(pop(queue, 0, 10, throttle).jobs) == 1


def test_shards_waiting_for_tokens_are_served_in_turn(redis_client, sharded_worker):
    queue = sharded_worker.queue()
    sharded_worker.perform_async([{"id": n, "perform_in": time.time() - 60} for n in range(60)])
    shards = sorted({queue.shard_of(str(n)) for n in range(60)})[:3]
    throttle = Throttle(1 / 1000, capacity=1, want=1)  # one token per second
    popped = [pop(queue, shard, 3, throttle) for shard in shards]
    # The first takes the bucket's token; the others reserve the next ones, in turn
    # (on one server the first pop also reserved its shard's next token already).
    assert len(popped[0].jobs) == 1
    assert popped[1].limited and popped[2].limited
    assert 0.8 < popped[2].wait - popped[1].wait <= 1.0
    assert popped[1].wait <= (2.0 if not queue.cluster else 1.0)


def test_the_bucket_counts_reservations_and_those_that_waited(worker, queue):
    due(worker, 5)
    throttle = Throttle(SLOW, capacity=2, want=2)
    pop(queue, 0, 10, throttle)
    ack(queue, 0)
    pop(queue, 0, 10, throttle)
    state = bucket_state(queue.client, queue.name, SLOW * 1000)
    assert state.taken == 4 and state.waited == 1
    assert -2.1 < state.tokens < -1.9


def test_no_throttle_means_no_limit(worker, queue):
    due(worker, 10)
    popped = queue.pop(0, token(queue, 0), 10)
    assert len(popped.jobs) == 10 and popped.wait == 0 and not popped.limited


def test_a_shard_reserves_whole_batches_for_its_share_of_200_ms_or_50_ms_on_a_cluster():
    # One server: the whole batches the shard's share of 200 ms of the rate holds (100
    # jobs at 500/s over 8 shards: 12.5), at least one, at most the capacity.
    assert throttle_for(500, 25, 1, cluster=False, shards=8).want == 12
    assert throttle_for(500, 25, 1, cluster=False, shards=1000).want == 1
    assert throttle_for(500, 25, 5, cluster=False, shards=8).want == 10
    assert throttle_for(500, 25, 10, cluster=False, shards=8).want == 10
    assert throttle_for(500, 25, 20, cluster=False, shards=8).want == 20
    assert throttle_for(500, 25, 100, cluster=False, shards=8).want == 25
    assert throttle_for(500, 25, 1, cluster=False, shards=1).want == 25
    # A cluster: 50 ms of the rate per rate_take call, at most the capacity.
    assert throttle_for(500, 25, 1, cluster=True, shards=8).want == 25
    assert throttle_for(500, 25, 10, cluster=True, shards=8).want == 20
    assert throttle_for(500, 10, 1, cluster=True, shards=8).want == 10
    assert throttle_for(500, 25, 1, cluster=True).per_ms == 0.5


def test_the_grid_is_50_ms_or_the_bursts_worth_of_the_rate_when_less():
    assert throttle_for(500, 25, 1, cluster=False).pace_ms == 50
    assert throttle_for(500, 1000, 1, cluster=True).pace_ms == 50
    assert throttle_for(500, 5, 1, cluster=False).pace_ms == 10  # burst 5: 10 ms
    assert throttle_for(5000, 1, 1, cluster=False).pace_ms == 0  # under 1 ms: none


def redis_ms(queue: Queue) -> float:
    seconds, micros = queue.client.time()
    return seconds * 1000 + micros / 1000


def test_a_reservation_that_waits_is_paid_on_the_grid(redis_client, sharded_worker):
    queue = sharded_worker.queue()
    sharded_worker.perform_async([{"id": n, "perform_in": time.time() - 60} for n in range(60)])
    shards = sorted({queue.shard_of(str(n)) for n in range(60)})[:3]
    # A token every 500 ms (so no token refills between these calls, however slow the
    # host), on a grid of 1 s: the reservations after the bucket's token are paid at
    # whole seconds of Redis's clock, not 500 ms apart.
    throttle = Throttle(0.002, capacity=1, want=1, pace_ms=1000)
    assert len(pop(queue, shards[0], 3, throttle).jobs) == 1
    paid = []
    for shard in shards[1:]:
        before = redis_ms(queue)
        popped = pop(queue, shard, 3, throttle)
        assert popped.limited and 0 < popped.wait <= 3.0
        paid.append(before + popped.wait * 1000)
    # Each at a whole second, give or take the time the call took (and 1 ms of
    # rounding); without the grid they would be 500 and 1,000 ms after the calls.
    for at in paid:
        assert min(at % 1000, 1000 - at % 1000) < 30


def test_a_shard_with_nothing_due_reserves_no_token(worker, queue):
    throttle = Throttle(SLOW, capacity=2, want=2)
    for _ in range(3):
        popped = queue.pop(0, token(queue, 0), 10, throttle=throttle)
        assert popped.jobs == [] and not popped.limited and not popped.needs_tokens
    assert bucket_state(queue.client, queue.name, None).taken == 0


def test_tokens_granted_to_a_pop_that_finds_nothing_are_kept(worker, queue):
    if not queue.cluster:
        pytest.skip("grants are a Redis Cluster's")
    throttle = Throttle(SLOW, capacity=3, want=3)
    tokens, wait = take(queue, throttle)
    assert (tokens, wait) == (3, 0)
    granted = Throttle(SLOW, 3, 3, grant=tokens)
    assert queue.pop(0, token(queue, 0), 10, throttle=granted).jobs == []
    due(worker, 5)
    # The grant waited in the shard's budget: 3 jobs without another rate_take.
    assert len(queue.pop(0, token(queue, 0), 10, throttle=throttle).jobs) == 3


def test_a_limited_pop_takes_several_batches_each_with_its_own_payload_budget(worker, queue):
    # Batches of one job; hot ids give a batch at most 3 payloads.
    with hot_layout(SPILL_PAYLOADS=1, BATCH_PAYLOADS=3):
        queue = worker.queue()  # with the scripts of these limits
        for job_id, count in (("a", 5), ("b", 5), ("c", 1), ("d", 1)):
            for n in range(count):
                worker.perform_async(
                    [{"id": job_id, "payload": n, "score": n, "perform_in": time.time() - 60}]
                )
        throttle = Throttle(SLOW, capacity=10, want=10, batches=3)
        popped = pop(queue, 0, 1, throttle)
    # Three batches of one job, the hot ones 3 payloads each (a budget shared by the pop
    # would have ended it after "a").
    assert [(job.id, len(job.payloads)) for job in popped.jobs] == [("a", 3), ("b", 3), ("c", 1)]


def test_a_failed_batch_leaves_the_other_batches_of_its_pop_in_processing(worker, queue):
    due(worker, 6)
    popped = pop(queue, 0, 2, Throttle(SLOW, capacity=10, want=10, batches=3))
    assert [job.id for job in popped.jobs] == [f"job{n:03}" for n in range(6)]
    second = popped.jobs[2:4]
    fail(queue, 0, second, "boom", retry_in, worker.max_retry_count)
    assert ack(queue, 0) == 4
    metrics = worker.metrics()
    assert (metrics["processed"], metrics["failed"], metrics["length"]) == (4, 2, 2)
    retried = worker.queries().fetch(["job002", "job003"])
    assert [job["retry_count"] for job in retried] == [0, 0]
