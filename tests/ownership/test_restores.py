"""A job whose process died running it: new owners count its restores, run it alone, and
move it to the morgue after ``max_restores``; acquiring again by the same owner (a lost
reply) does not leave the shard idle; a restore keeps a queued job's error."""

from __future__ import annotations

import pytest
import redis

import lowkiq
from lowkiq.errors import LeaseLost
from lowkiq.ownership import leases
from lowkiq.storage.queue import Queue
from tests.leasing import batch

NOW = 1_700_000_000.0


class Fragile(lowkiq.Worker):
    shards_count = 1
    batch_size = 3
    max_restores = 3


@pytest.fixture
def queue(redis_client: redis.Redis) -> Queue:
    lowkiq.settings.workers = [Fragile]
    Fragile.perform_async([{"id": i, "payload": i, "perform_in": NOW - 10 + i} for i in range(3)])
    return Fragile.queue()


def crash_with_batch(queue: Queue, owner: str) -> tuple[leases.Lease, list[str]]:
    """``owner`` acquires shard 0 and pops a batch, then dies (its lease lapses)."""
    lease, _, _ = leases.acquire(queue, 0, owner, 10)
    assert lease is not None
    popped = queue.pop(0, lease.token, Fragile.batch_size)
    queue.client.delete(queue.keys.lease(0))  # the lease of a dead process lapsed
    return lease, [job.id for job in popped.jobs]


def test_a_job_restored_max_restores_times_goes_to_the_morgue(queue: Queue) -> None:
    assert crash_with_batch(queue, "p1")[1] == ["0", "1", "2"]
    # Every job of the batch was restored once: each now runs alone, "0" first.
    assert crash_with_batch(queue, "p2")[1] == ["0"]
    assert crash_with_batch(queue, "p3")[1] == ["0"]
    lease, restored, _ = leases.acquire(queue, 0, "p4", 10)
    assert lease is not None and restored == 0
    assert [job["id"] for job in lease.buried] == ["0"]
    assert [payload for payload, _ in lease.buried[0]["payloads"]] == [0]
    assert "died running this job 3 times" in lease.buried[0]["error"]
    dead = Fragile.queries().morgue_range_by_id("-", "+")
    assert [job["id"] for job in dead] == ["0"]
    assert "died running this job 3 times" in dead[0]["error"]
    assert Fragile.metrics()["failed"] == 1
    # The others go on, each alone once (they were restored once), then together again.
    assert [job.id for job in queue.pop(0, lease.token, 3).jobs] == ["1"]
    queue.ack(0, lease.token, batch(queue, 0))
    assert [job.id for job in queue.pop(0, lease.token, 3).jobs] == ["2"]
    queue.ack(0, lease.token, batch(queue, 0))
    Fragile.perform_async([{"id": i, "perform_in": NOW} for i in range(3, 6)])
    assert [job.id for job in queue.pop(0, lease.token, 3).jobs] == ["3", "4", "5"]


def test_a_finished_job_forgets_its_restores(queue: Queue) -> None:
    crash_with_batch(queue, "p1")
    crash_with_batch(queue, "p2")  # "0" restored twice, "1" and "2" once
    lease, _, _ = leases.acquire(queue, 0, "p3", 10)
    assert lease is not None
    assert [job.id for job in queue.pop(0, lease.token, 3).jobs] == ["0"]
    queue.ack(0, lease.token, batch(queue, 0))  # "0" ran to its end this time
    restores = queue.keys.prefix(0) + "restores"
    assert sorted(queue.client.hkeys(restores)) == [b"1", b"2"]
    for job_id in ("1", "2"):
        assert [job.id for job in queue.pop(0, lease.token, 3).jobs] == [job_id]
        queue.ack(0, lease.token, batch(queue, 0))
    assert not queue.client.exists(restores)
    Fragile.perform_async([{"id": 0, "perform_in": NOW}])
    queue.client.delete(queue.keys.lease(0))
    for owner in ("p4", "p5"):  # "0" dies twice more: 2 restores, not 4
        crash_with_batch(queue, owner)
    lease, _, _ = leases.acquire(queue, 0, "p6", 10)
    assert lease is not None and lease.buried == ()
    assert queue.client.hget(restores, "0") == b"2"


def test_a_restore_after_a_redis_error_is_not_a_death(queue: Queue) -> None:
    lease, _, _ = leases.acquire(queue, 0, "p1", 10)
    assert lease is not None
    for _ in range(5):  # the holder puts its own batch back (the pop's reply was lost)
        assert len(queue.pop(0, lease.token, 3).jobs) == 3
        assert queue.restore(0, lease.token) == 3
    assert not queue.client.exists(queue.keys.prefix(0) + "restores")
    assert Fragile.queries().morgue_range_by_id("-", "+") == []


def test_acquiring_again_by_the_same_owner_takes_a_new_epoch_at_once(queue: Queue) -> None:
    first, _, _ = leases.acquire(queue, 0, "p1", 10)  # its reply was lost, say
    assert first is not None
    assert len(queue.pop(0, first.token, 3).jobs) == 3  # (or a thread of p1 still runs)
    again, restored, _ = leases.acquire(queue, 0, "p1", 10)
    assert again is not None and again.epoch == first.epoch + 1  # not idle for a TTL
    assert restored == 3  # the batch goes back under the new epoch...
    with pytest.raises(LeaseLost):  # ...and whatever ran under the old one is fenced
        queue.ack(0, first.token, batch(queue, 0))
    other, _, _ = leases.acquire(queue, 0, "p2", 10)
    assert other is None
    assert leases.acquire(queue, 0, "p", 10)[0] is None  # a prefix of the owner is not it


def test_a_restore_keeps_the_error_of_a_dead_job_queued_up_meanwhile(queue: Queue) -> None:
    lease, _, _ = leases.acquire(queue, 0, "p1", 10)
    assert lease is not None
    popped = queue.pop(0, lease.token, 1).jobs
    assert [job.id for job in popped] == ["0"]
    queue.fail(
        0, lease.token, batch(queue, 0), popped, "boom", lambda count: 1.0, 0
    )  # "0" dies: morgue
    Fragile.perform_async([{"id": 0, "payload": "new"}])
    assert [job.id for job in queue.pop(0, lease.token, 3).jobs] == ["1", "2", "0"]
    # While "0" is in processing, its dead job is queued up: it keeps its error.
    assert Fragile.actions().morgue_queue_up(["0"]) == 1
    assert Fragile.queries().fetch(["0"])[0]["error"] == "boom"
    queue.restore(0, lease.token)  # the batch goes back (after a Redis error, say)
    assert Fragile.queries().fetch(["0"])[0]["error"] == "boom"


def test_batches_no_process_holds_are_put_back_by_the_operator(queue: Queue) -> None:
    # A process died with a batch; no live process serves the queue (its class was
    # removed from settings.workers, say): the batch would show as busy forever.
    crash_with_batch(queue, "p1")
    assert Fragile.metrics()["busy"] == 3
    assert Fragile.actions().restore_orphaned_batches() == 3
    metrics = Fragile.metrics()
    assert (metrics["busy"], metrics["length"]) == (0, 3)
    assert leases.tokens(queue) == [None]  # the lease it took is given back
    # A batch under a live process's lease is that process's: left alone.
    lease, _, _ = leases.acquire(queue, 0, "live", 10)
    assert lease is not None and len(queue.pop(0, lease.token, 3).jobs) == 1
    assert Fragile.actions().restore_orphaned_batches() == 0
    assert Fragile.metrics()["busy"] == 1


def test_a_batch_left_by_a_release_is_restored_without_counting(queue: Queue) -> None:
    # A process gives the shard up on purpose with a batch in processing (its ack
    # failed): that is no death, so no job of it counts a restore (a counted one would
    # run alone next, as a suspect).
    lease, _, _ = leases.acquire(queue, 0, "p1", 10)
    assert lease is not None
    assert len(queue.pop(0, lease.token, Fragile.batch_size).jobs) == 3
    assert leases.release_many([lease]) == 1
    taken, restored, _ = leases.acquire(queue, 0, "p2", 10)
    assert taken is not None and restored == 3 and taken.buried == ()
    assert [job.id for job in queue.pop(0, taken.token, 3).jobs] == ["0", "1", "2"]


class Reported(Fragile):
    max_restores = 1  # the first death sends a job to the morgue
    exhausted: list[list[str]] = []

    @classmethod
    def retries_exhausted(cls, jobs: list[dict[str, object]]) -> None:
        cls.exhausted.append([str(job["id"]) for job in jobs])


def test_jobs_the_operators_put_back_buries_are_reported_to_retries_exhausted(
    redis_client: redis.Redis,
) -> None:
    # No process serves the shard to report them: the operator's call does.
    lowkiq.settings.workers = [Reported]
    Reported.exhausted = []
    Reported.perform_async([{"id": i, "perform_in": NOW - 10 + i} for i in range(3)])
    lease, _, _ = leases.acquire(Reported.queue(), 0, "p1", 10)
    assert lease is not None
    assert len(Reported.queue().pop(0, lease.token, 2).jobs) == 2
    redis_client.delete(Reported.queue().keys.lease(0))  # its process died
    assert Reported.actions().restore_orphaned_batches() == 0
    assert Reported.exhausted == [["0", "1"]]
    assert [job["id"] for job in Reported.queries().morgue_range_by_id("-", "+")] == ["0", "1"]
    assert Reported.metrics()["length"] == 1
