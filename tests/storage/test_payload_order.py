"""The order of an id's payloads given without ``score``: as given in one
``perform_async`` call, then call after call; with equal explicit scores, the
byte order of the serialized payloads (see docs/concepts/merge.md).

Every test runs with the packed layout and with every job of two payloads or more
kept as a hot id (its payloads in a sorted set of its own), on a single Redis
server and on a Redis Cluster.
"""

from __future__ import annotations

import pytest
from storage_support import hot_layout

import lowkiq
from lowkiq.testing import drain
from tests.leasing import pop


@pytest.fixture(autouse=True, params=["packed", "hot"])
def payload_layout(request):
    """The layout under test: the default limits, or every multi-payload job hot."""
    if request.param == "packed":
        yield
        return
    with hot_layout(SPILL_PAYLOADS=1):
        yield


def popped_payloads(queue, job_id: str) -> list:
    """The payloads of ``job_id`` as ``perform`` gets them (its batch popped now)."""
    jobs = pop(queue, 0, 10)
    assert jobs is not None
    [job] = [job for job in jobs if job.id == job_id]
    return job.payloads


def scores(worker, job_id: str) -> list[float]:
    """The scores of ``job_id``'s queued payloads, in their order."""
    [job] = worker.queries().fetch([job_id])
    return [score for _, score in job["payloads"]]


def test_one_call_keeps_the_order_of_its_payloads(worker, queue):
    statuses = ["new", "shipped", "paid"]
    worker.perform_async([{"id": "order-1", "payload": {"status": s}} for s in statuses])

    assert popped_payloads(queue, "order-1") == [{"status": s} for s in statuses]


def test_the_last_payload_of_a_call_is_the_newest(worker, queue):
    """What ``payloads[-1]`` relies on: the last one given, not the largest in bytes."""
    worker.perform_async(
        [{"id": 7, "payload": "paid"}, {"id": 7, "payload": "new"}, {"id": 7, "payload": "a"}]
    )

    assert popped_payloads(queue, "7")[-1] == "a"


def test_many_payloads_of_one_call_keep_their_order(worker, queue):
    """'sku 36' given among 'sku 1' .. 'sku 200' stays where it was given."""
    skus = [f"sku {n}" for n in range(1, 201)]
    worker.perform_async([{"id": "shop", "payload": sku} for sku in skus])

    assert popped_payloads(queue, "shop") == skus


def test_the_scores_of_one_call_are_distinct_and_ascending_within_a_microsecond(worker):
    worker.perform_async([{"id": "a", "payload": n} for n in (3, 1, 2, 10)])

    given = scores(worker, "a")
    assert given == sorted(given)
    assert len(set(given)) == 4
    assert given[-1] - given[0] < 1e-6


def test_a_later_call_comes_after_an_earlier_one(worker, queue):
    worker.perform_async([{"id": "a", "payload": "z"}, {"id": "a", "payload": "y"}])
    worker.perform_async([{"id": "a", "payload": "b"}, {"id": "a", "payload": "a"}])
    worker.perform_async([{"id": "a", "payload": "0"}])

    assert popped_payloads(queue, "a") == ["z", "y", "b", "a", "0"]


def test_a_payload_given_again_merges_and_keeps_its_first_place(worker, queue):
    worker.perform_async([{"id": "a", "payload": p} for p in ("y", "x", "y")])
    worker.perform_async([{"id": "a", "payload": p} for p in ("w", "x")])

    assert popped_payloads(queue, "a") == ["y", "x", "w"]


def test_payloads_of_equal_explicit_score_are_in_byte_order_and_equal_ones_merge(worker, queue):
    worker.perform_async(
        [
            {"id": "a", "payload": "shipped", "score": 5},
            {"id": "a", "payload": "new", "score": 5},
            {"id": "a", "payload": "shipped", "score": 5},
            {"id": "a", "payload": "paid", "score": 5},
        ]
    )

    [job] = worker.queries().fetch(["a"])
    assert job["payloads"] == [["new", 5.0], ["paid", 5.0], ["shipped", 5.0]]


def test_explicit_scores_order_payloads_given_without_among_them(worker, queue):
    """A call mixing both: the explicit scores (versions, say) first, then the others as
    given (their score is Redis's time)."""
    worker.perform_async(
        [
            {"id": "a", "payload": "b, given first"},
            {"id": "a", "payload": "v2", "score": 2},
            {"id": "a", "payload": "a, given second"},
            {"id": "a", "payload": "v1", "score": 1},
        ]
    )

    assert popped_payloads(queue, "a") == ["v1", "v2", "b, given first", "a, given second"]


def test_perform_gets_the_payloads_of_a_call_in_order(worker):
    seen: list[list[str]] = []

    class OrderStatusWorker(lowkiq.Worker):
        shards_count = 1
        batch_size = 5

        @classmethod
        def perform(cls, payloads_by_id):
            seen.extend(payloads_by_id.values())

    OrderStatusWorker.perform_async(
        [{"id": 1, "payload": s} for s in ("new", "shipped", "paid")]
        + [{"id": 2, "payload": f"sku {n}"} for n in (367, 368, 369, 36, 370)]
    )
    drain(OrderStatusWorker)

    assert seen == [
        ["new", "shipped", "paid"],
        ["sku 367", "sku 368", "sku 369", "sku 36", "sku 370"],
    ]
