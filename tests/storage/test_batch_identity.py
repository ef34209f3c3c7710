"""A batch's number (SPEC §11): its pop returns it, and every call that ends the batch
names it; a call naming a batch no longer in the processing area raises StaleBatch,
changes nothing, and is counted by the worker."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from storage_support import NOW

from lowkiq.errors import StaleBatch
from lowkiq.outcomes import Fate
from lowkiq.storage.processing import JobEnd
from lowkiq.storage.queue import Queue
from tests.leasing import token

#: Each call that ends a batch, given the batch's number.
ENDINGS: dict[str, Callable[[Queue, str, int], Any]] = {
    "ack": lambda queue, lease, batch: queue.ack(0, lease, batch),
    "fail": lambda queue, lease, batch: queue.settle_failed(
        0, lease, batch, [JobEnd("a", Fate.RETRY, "boom", 5.0)], 3, now=NOW
    ),
    "ack_yield": lambda queue, lease, batch: queue.ack_yield(0, lease, batch, {"a": [0]}, NOW),
    "bury": lambda queue, lease, batch: queue.bury(0, lease, batch, [("a", "bad")], now=NOW),
    "restore": lambda queue, lease, batch: queue.restore(0, lease, batch, now=NOW),
}


def snapshot(queue: Queue) -> dict[str, Any]:
    """What a call could change: the processing area, the queue, the morgue, the counts."""
    client, keys = queue.client, queue.keys
    return {
        "processing": client.hgetall(keys.processing_hash(0)),
        "due": client.zrange(keys.perform_in_zset(0), 0, -1, withscores=True),
        "morgue": client.zrange(keys.morgue_lex_zset(0), 0, -1),
        "processed": client.get(keys.processed_counter(0)),
        "failed": client.get(keys.failed_counter(0)),
    }


def test_each_pop_that_takes_jobs_numbers_its_batch_anew(worker, queue: Queue) -> None:
    worker.perform_async([{"id": i, "payload": 1, "perform_in": NOW - 1} for i in "abc"])
    lease = token(queue, 0)
    numbers = []
    for _ in range(3):
        popped = queue.pop(0, lease, 1, now=NOW)
        numbers.append(popped.batch)
        queue.ack(0, lease, popped.batch)
    assert numbers == sorted(set(numbers)) and all(n > 0 for n in numbers)
    assert queue.pop(0, lease, 1, now=NOW).batch == 0  # nothing due: no batch


@pytest.mark.parametrize("ending", sorted(ENDINGS))
def test_a_call_naming_another_batch_changes_nothing(worker, queue: Queue, ending: str) -> None:
    worker.perform_async([{"id": "a", "payload": 1, "perform_in": NOW - 1}])
    lease = token(queue, 0)
    popped = queue.pop(0, lease, 10, now=NOW)
    assert [job.id for job in popped.jobs] == ["a"]
    before = snapshot(queue)
    for stale in (popped.batch - 1, popped.batch + 1):
        with pytest.raises(StaleBatch, match=f"batch {stale} is no longer in processing"):
            ENDINGS[ending](queue, lease, stale)
        assert snapshot(queue) == before
    ENDINGS[ending](queue, lease, popped.batch)  # the batch's own number ends it
    assert snapshot(queue)["processing"] == {}


def test_a_pop_carrying_a_stale_ack_acks_nothing_and_says_the_area_is_occupied(
    worker, queue: Queue
) -> None:
    worker.perform_async([{"id": i, "payload": 1, "perform_in": NOW - 1} for i in "ab"])
    lease = token(queue, 0)
    first = queue.pop(0, lease, 1, now=NOW)
    queue.ack(0, lease, first.batch)
    second = queue.pop(0, lease, 1, now=NOW)  # a batch the caller below does not know of
    popped = queue.pop(0, lease, 1, now=NOW, ack_shard=0, ack_token=lease, ack_batch=first.batch)
    assert popped.acked == -3 and popped.occupied and popped.jobs == []
    assert queue.client.hlen(queue.keys.processing_hash(0)) == 1  # the second batch stays
    assert queue.restore(0, lease) == 1  # an unsure owner puts back whatever it holds
    assert second.batch > first.batch
