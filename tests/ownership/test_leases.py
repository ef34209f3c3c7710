"""Shard leases on a real Redis: acquisition, epochs, expiry, and fencing of every write."""

from __future__ import annotations

import time

import pytest
import redis

import lowkiq
from lowkiq.errors import LeaseLost
from lowkiq.ownership import leases
from lowkiq.storage.queue import ACK_FENCED, Queue

NOW = 1_700_000_000.0


@pytest.fixture
def queue(redis_client: redis.Redis) -> Queue:
    class LeaseWorker(lowkiq.Worker):
        shards_count = 2
        batch_size = 10

    lowkiq.settings.workers = [LeaseWorker]
    LeaseWorker.perform_async([{"id": i, "perform_in": NOW - 1} for i in range(20)])
    return LeaseWorker.queue()


def test_only_one_process_holds_a_shard_and_epochs_grow(queue: Queue) -> None:
    first, restored, _ = leases.acquire(queue, 0, "a", 10)
    assert first is not None and first.epoch > 0 and restored == 0
    second, _, left_ms = leases.acquire(queue, 0, "b", 10)
    assert second is None and 9000 < left_ms <= 10000
    assert leases.release(queue, [first]) == 1
    third, _, _ = leases.acquire(queue, 0, "b", 10)
    assert (
        third is not None and third.epoch > first.epoch and leases.parse_owner(third.token) == "b"
    )
    assert leases.tokens(queue) == [third.token, None]


def test_a_lease_expires_on_redis_clock_unless_renewed(queue: Queue) -> None:
    lease, _, _ = leases.acquire(queue, 0, "a", 0.2)
    assert lease is not None
    time.sleep(0.1)
    assert leases.renew(queue, [lease], 0.2) == []
    time.sleep(0.15)
    assert leases.tokens(queue)[0] == lease.token  # renewed past its first expiry
    time.sleep(0.15)
    assert leases.tokens(queue)[0] is None
    assert leases.renew(queue, [lease], 10) == [lease]


def test_a_stale_token_can_neither_pop_ack_fail_restore_nor_bury(queue: Queue) -> None:
    old, _, _ = leases.acquire(queue, 0, "a", 10)
    assert old is not None
    popped = queue.pop(0, old.token, 3, now=NOW)
    assert len(popped.jobs) == 3
    queue.client.delete(queue.keys.lease(0))  # a pause past the lease: it expired
    new, restored, _ = leases.acquire(queue, 0, "b", 10)
    assert new is not None and new.epoch > old.epoch
    assert restored == 3  # the new owner put the stale owner's batch back, once
    before = queue.client.dump(queue.keys.fresh_lex_zset(0))

    assert queue.pop(0, old.token, 3, now=NOW).fenced
    with pytest.raises(LeaseLost):
        queue.ack(0, old.token, popped.batch)
    with pytest.raises(LeaseLost):
        queue.fail(0, old.token, popped.batch, popped.jobs, "late", lambda c: 1.0, 5, now=NOW)
    with pytest.raises(LeaseLost):
        queue.restore(0, old.token, popped.batch, now=NOW)
    with pytest.raises(LeaseLost):
        queue.bury(0, old.token, popped.batch, [(popped.jobs[0].id, "late")], now=NOW)
    assert queue.client.dump(queue.keys.fresh_lex_zset(0)) == before


def test_a_riding_ack_with_a_stale_token_acks_nothing_and_the_pop_goes_on(queue: Queue) -> None:
    shard0, _, _ = leases.acquire(queue, 0, "a", 10)
    shard1, _, _ = leases.acquire(queue, 1, "a", 10)
    assert shard0 is not None and shard1 is not None
    assert queue.pop(0, shard0.token, 2, now=NOW).jobs
    queue.client.delete(queue.keys.lease(0))
    popped = queue.pop(1, shard1.token, 2, now=NOW, ack_shard=0, ack_token=shard0.token)
    assert popped.acked == ACK_FENCED and popped.jobs
    assert int(queue.client.get(queue.keys.processed_counter(0)) or 0) == 0
    assert queue.client.hlen(queue.keys.processing_hash(0)) == 2


def test_acquiring_restores_the_previous_owners_batch_with_its_retry_state(queue: Queue) -> None:
    old, _, _ = leases.acquire(queue, 1, "a", 10)
    assert old is not None
    popped = queue.pop(1, old.token, 10, now=NOW)
    queue.fail(1, old.token, popped.batch, popped.jobs, "boom", lambda c: 5.0, 5, now=NOW)
    retried = queue.pop(1, old.token, 10, now=NOW + 10).jobs
    assert {job.retry_count for job in retried} == {-1, 0}
    assert leases.release(queue, [old]) == 1  # released with a batch still in processing
    new, restored, _ = leases.acquire(queue, 1, "b", 10)
    assert new is not None and restored == len(retried)
    # Left on purpose by a release, the batch counts no restore: its jobs are no
    # suspects and come back together, each with its retry state.
    again = {job.id: job.retry_count for job in queue.pop(1, new.token, 10, now=NOW + 10).jobs}
    assert again == {j.id: j.retry_count for j in retried}
