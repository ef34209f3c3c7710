"""Cursor paging with ``after_id``: walking a score order page by page through
large ties gives every job exactly once, in the order of one big query."""

from __future__ import annotations

import random

import pytest
from storage_support import NOW

import lowkiq
from lowkiq.errors import InvalidQuery
from tests.leasing import fail, pop


def fail_all_due(queue, now, max_retry_count=3):
    """Pop every job due at ``now`` in every shard and fail it at ``now``."""
    for shard in range(queue.shards_count):
        batch = pop(queue, shard, 1000, now=now)
        if batch:
            fail(queue, shard, batch, "boom", lambda c: 100.0, max_retry_count, now=now)


@pytest.fixture
def queue_with_ties(redis_client):
    """Fresh jobs, retries at counts 0, 1 and 2, and dead jobs; scores tie in groups."""

    class PagedWorker(lowkiq.Worker):
        shards_count = 3

    lowkiq.settings.workers = [PagedWorker]
    queue = PagedWorker.queue()
    rng = random.Random(7)

    def enqueue(count, perform_in):
        ids = [f"{rng.randrange(10**6)}-{rng.random()}" for _ in range(count)]
        PagedWorker.perform_async([{"id": i, "perform_in": perform_in} for i in ids])

    # Later groups first, so that popping an earlier group never reaches them.
    for retry_count, start in ((2, NOW + 10_000), (1, NOW + 5_000), (0, NOW + 1_000)):
        enqueue(30, start)
        for round_ in range(retry_count + 1):
            fail_all_due(queue, start + 100 * round_)
    for updated_at in (NOW, NOW + 1):  # the morgue, two ties of updated_at
        enqueue(20, updated_at)
        fail_all_due(queue, updated_at, max_retry_count=0)
    enqueue(60, NOW + 20_000)  # fresh
    return PagedWorker


def walk(fetch, first, end, per, key):
    """Every job of a score order, ``per`` at a time, following the (score, id) cursor."""
    jobs = fetch(first, end, per)
    seen = list(jobs)
    while len(jobs) == per:
        last = jobs[-1]
        jobs = fetch(last[key], end, per, after_id=last["id"])
        seen += jobs
    return [job["id"] for job in seen]


def assert_pages_walk_the_whole_order(forward, backward, key, per):
    """Both directions, page by page, equal one big query; returns the ascending ids."""
    everything = [job["id"] for job in forward("-inf", "+inf", 10_000)]
    assert walk(forward, "-inf", "+inf", per, key) == everything
    backwards = [job["id"] for job in backward("+inf", "-inf", 10_000)]
    assert backwards == everything[::-1]
    assert walk(backward, "+inf", "-inf", per, key) == backwards
    return everything


@pytest.mark.parametrize("per", [1, 7, 50])
def test_paging_by_perform_in_gives_every_job_once_in_order(queue_with_ties, per):
    queries = queue_with_ties.queries()
    everything = assert_pages_walk_the_whole_order(
        queries.range_by_perform_in, queries.rev_range_by_perform_in, "perform_in", per
    )
    assert len(everything) == queue_with_ties.metrics()["length"] > 0


@pytest.mark.parametrize("per", [1, 7, 50])
def test_paging_by_retry_count_crosses_from_fresh_to_retries(queue_with_ties, per):
    queries = queue_with_ties.queries()
    metrics = queue_with_ties.metrics()
    assert metrics["fresh"] > per and metrics["retries"] > per
    listed = queries.range_by_retry_count("-inf", "+inf", 10_000)
    assert [job["retry_count"] for job in listed] == sorted(job["retry_count"] for job in listed)
    assert {job["retry_count"] for job in listed} == {-1, 0, 1, 2}
    everything = assert_pages_walk_the_whole_order(
        queries.range_by_retry_count, queries.rev_range_by_retry_count, "retry_count", per
    )
    assert everything == [job["id"] for job in listed]
    assert len(everything) == metrics["length"]


@pytest.mark.parametrize("per", [1, 7, 15])
def test_paging_the_morgue_by_updated_at(queue_with_ties, per):
    queries = queue_with_ties.queries()
    everything = assert_pages_walk_the_whole_order(
        queries.morgue_range_by_updated_at,
        queries.morgue_rev_range_by_updated_at,
        "updated_at",
        per,
    )
    assert len(everything) == queue_with_ties.metrics()["morgue_length"] > per


def test_paging_stops_at_the_far_bound(queue_with_ties):
    queries = queue_with_ties.queries()
    first = queries.range_by_retry_count(0, 0, 1)[0]
    rest = queries.range_by_retry_count(0, 0, 10_000, after_id=first["id"])
    assert {job["retry_count"] for job in rest} == {0}
    assert [first] + rest == queries.range_by_retry_count(0, 0, 10_000)
    assert queries.range_by_retry_count(0, "(0", 10, after_id=first["id"]) == []


def test_an_exclusive_cursor_bound_is_rejected(queue_with_ties):
    with pytest.raises(InvalidQuery):
        queue_with_ties.queries().range_by_perform_in("(5", "+inf", 10, after_id="x")
