"""Reads of groups for people and the dashboard: ``Queries.groups()`` (backlog, oldest due
job and jobs in flight of each group) and the ``group`` of queued and dead jobs."""

from __future__ import annotations

import time

import pytest
from storage_support import NOW, retry_in

from lowkiq.errors import InvalidQuery
from tests.leasing import fail, pop


def enqueue(worker, group, ids, perform_in=NOW):
    """Jobs ``ids`` of ``group`` (``None``: the default group), due at ``perform_in``."""
    jobs = [{"id": job_id, "payload": job_id, "perform_in": perform_in} for job_id in ids]
    if group is not None:
        for job in jobs:
            job["group"] = group
    worker.perform_async(jobs)


def ids_in_shards(worker, shards, count, prefix):
    """``count`` ids of each of ``shards`` of ``worker``'s queue."""
    locate = worker.queue().locator()
    found = {shard: [] for shard in shards}
    n = 0
    while any(len(ids) < count for ids in found.values()):
        job_id = f"{prefix}{n}"
        ids = found.get(locate(job_id))
        if ids is not None and len(ids) < count:
            ids.append(job_id)
        n += 1
    return found


def rows(queries, limit=20):
    """``groups()`` as ``(name, length, oldest_due, in_flight)`` tuples."""
    return [
        (row["name"], row["length"], row["oldest_due"], row["in_flight"])
        for row in queries.groups(limit)
    ]


def test_groups_across_shards_largest_backlog_first_with_their_oldest_due_job(sharded_worker):
    later = time.time() + 3600  # not due: the group waits instead of taking turns
    enqueue(sharded_worker, "A", [f"a{n}" for n in range(6)], perform_in=NOW - 10)
    enqueue(sharded_worker, "A", ["a-first"], perform_in=NOW - 50)
    enqueue(sharded_worker, "B", ["b0", "b1"], perform_in=NOW - 20)
    enqueue(sharded_worker, "C", ["c0", "c1", "c2"], perform_in=later)
    enqueue(sharded_worker, None, [f"x{n}" for n in range(4)], perform_in=NOW - 5)
    assert rows(sharded_worker.queries()) == [
        ("A", 7, NOW - 50, 0),
        (None, 4, NOW - 5, 0),
        ("C", 3, later, 0),
        ("B", 2, NOW - 20, 0),
    ]


def test_groups_are_cut_at_the_limit(sharded_worker):
    enqueue(sharded_worker, "A", ["a0", "a1", "a2"])
    enqueue(sharded_worker, "B", ["b0"])
    enqueue(sharded_worker, "C", ["c0", "c1"])
    assert [name for name, *_ in rows(sharded_worker.queries(), limit=2)] == ["A", "C"]
    assert rows(sharded_worker.queries(), limit=0) == []
    with pytest.raises(InvalidQuery, match="limit"):
        sharded_worker.queries().groups(-1)


def test_groups_count_the_jobs_in_processing_areas(worker, queue):
    enqueue(worker, "A", ["a0", "a1", "a2"], perform_in=NOW - 3)
    enqueue(worker, "B", ["b0"], perform_in=NOW - 2)
    enqueue(worker, None, ["x0", "x1"], perform_in=NOW - 1)
    batch = pop(queue, 0, 3, now=NOW)
    assert sorted(job.id for job in batch) == ["a0", "b0", "x0"]  # one job of each group
    # B's one job is in flight: B has left the turns and is found in the processing area.
    assert rows(worker.queries()) == [
        ("A", 2, NOW - 3, 1),
        (None, 1, NOW - 1, 1),
        ("B", 0, None, 1),
    ]


def test_the_default_group_counts_the_shards_without_groups(sharded_worker):
    ids = ids_in_shards(sharded_worker, [0, 1], 2, "job-")
    enqueue(sharded_worker, "A", ids[0][:1], perform_in=NOW - 1)
    enqueue(sharded_worker, None, ids[0][1:], perform_in=NOW - 2)  # a grouped shard
    enqueue(sharded_worker, None, ids[1], perform_in=NOW - 9)  # a shard without groups
    assert rows(sharded_worker.queries()) == [(None, 3, NOW - 9, 0), ("A", 1, NOW - 1, 0)]


def test_a_queue_without_groups_lists_none(worker, queue):
    assert worker.queries().groups() == []
    enqueue(worker, None, ["x0", "x1"])
    pop(queue, 0, 1, now=NOW)
    assert worker.queries().groups() == []


def test_fetch_gives_queued_jobs_their_group(sharded_worker):
    enqueue(sharded_worker, "tenant-7", ["a0", "a1"])
    enqueue(sharded_worker, None, ["x0"])
    queries = sharded_worker.queries()
    jobs = {job["id"]: job for job in queries.fetch(["a0", "x0", "a1", "missing"])}
    assert jobs["a0"]["group"] == jobs["a1"]["group"] == "tenant-7"
    assert "group" not in jobs["x0"] and "missing" not in jobs
    listed = queries.range_by_perform_in("-inf", "+inf", limit=10)
    assert {job["id"]: job.get("group") for job in listed} == {
        "a0": "tenant-7",
        "a1": "tenant-7",
        "x0": None,
    }


def test_morgue_fetch_gives_dead_jobs_their_group(worker, queue):
    enqueue(worker, "tenant-7", ["a0"], perform_in=NOW - 2)
    enqueue(worker, None, ["x0"], perform_in=NOW - 1)
    enqueue(worker, "tenant-8", ["queued"], perform_in=NOW + 3600)
    batch = pop(queue, 0, 10, now=NOW)
    fail(queue, 0, batch, "boom", retry_in, 0, now=NOW)
    queries = worker.queries()
    dead = {job["id"]: job.get("group") for job in queries.morgue_fetch(["a0", "x0", "queued"])}
    assert dead == {"a0": "tenant-7", "x0": None}
    listed = queries.morgue_range_by_id("-", "+")
    assert [(job["id"], job.get("group")) for job in listed] == [("a0", "tenant-7"), ("x0", None)]
    assert [job["group"] for job in queries.fetch(["queued"])] == ["tenant-8"]


def test_a_shard_with_more_groups_than_one_reading_counts_is_counted_over_those(worker, queue):
    from lowkiq.storage.group_rows import group_rows

    later = time.time() + 3600
    for n in range(5):
        enqueue(worker, f"due{n}", [f"d{n}a", f"d{n}b"][: 1 + n % 2], perform_in=NOW)
        enqueue(worker, f"wait{n}", [f"w{n}"], perform_in=later + n)
    every = group_rows(queue, 20, scan=5)
    assert every.complete and len(every) == 10
    some = group_rows(queue, 20, scan=3)
    assert not some.complete
    names = {row["name"] for row in some}
    assert len(names) == 6 and {"wait0", "wait1", "wait2"} <= names  # the 3 due soonest
    assert worker.queries().groups().complete
