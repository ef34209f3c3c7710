"""Many jobs enqueued into a shard at once: the shard's keys take them in the encoding
whose inserts do not scan the key (a skiplist, a hash table), and nothing of how the
push gets there shows: every queued id, its perform_in, its group and its payloads are
as given, and no key holds anything else."""

from __future__ import annotations

import pytest
import redis
from storage_support import NOW

import lowkiq
from lowkiq.storage.queue import Queue

#: The first byte of the member a bulk write adds and takes out again (never UTF-8).
MARK_BYTE = b"\xff"


def enqueue(worker: type[lowkiq.Worker], ids: list[str], group: str | None = None) -> None:
    """Jobs ``ids`` (each its id as payload) of ``group``, due at NOW."""
    jobs = [{"id": job_id, "payload": job_id, "perform_in": NOW} for job_id in ids]
    if group is not None:
        for job in jobs:
            job["group"] = group
    worker.perform_async(jobs)


def encoding(redis_client: redis.Redis, key: str) -> str:
    """OBJECT ENCODING of ``key``."""
    value = redis_client.object("encoding", key)
    return value.decode() if isinstance(value, bytes) else str(value)


def shard_contents(redis_client: redis.Redis, queue: Queue) -> dict[str, list[bytes]]:
    """Every member (field) of shard 0's sorted sets (hashes), by key."""
    contents: dict[str, list[bytes]] = {}
    node_keys = redis_client.keys(f"{queue.keys.prefix(0)}*")
    for raw in node_keys:
        key = raw.decode()
        kind = redis_client.type(key).decode()
        if kind == "zset":
            contents[key] = redis_client.zrange(key, 0, -1)
        elif kind == "hash":
            contents[key] = list(redis_client.hkeys(key))
    return contents


def test_a_bulk_enqueue_makes_the_shards_sorted_sets_skiplists(
    redis_client: redis.Redis, queue: Queue, worker: type[lowkiq.Worker]
) -> None:
    """40 jobs into an empty shard: its lex and schedule sorted sets are skiplists from
    the start (a listpack of 40 would cost each insert a scan of it)."""
    enqueue(worker, [f"job-{n}" for n in range(40)])
    assert encoding(redis_client, queue.keys.fresh_lex_zset(0)) == "skiplist"
    assert encoding(redis_client, queue.keys.perform_in_zset(0)) == "skiplist"
    assert redis_client.zcard(queue.keys.perform_in_zset(0)) == 40


def test_a_bulk_enqueue_of_a_second_group_unpacks_the_group_keys(
    redis_client: redis.Redis, queue: Queue, worker: type[lowkiq.Worker]
) -> None:
    """A shard of group A given 40 jobs of group B: B's index and the hash of the ids'
    groups are a skiplist and a hash table."""
    enqueue(worker, [f"a-{n}" for n in range(3)], group="A")
    enqueue(worker, [f"b-{n}" for n in range(40)], group="B")
    assert encoding(redis_client, queue.keys.group_ids_zset(0, "B")) == "skiplist"
    assert encoding(redis_client, queue.keys.group_of_hash(0)) == "hashtable"
    groups = {job["id"]: job.get("group") for job in worker.queries().fetch(["a-0", "b-39"])}
    assert groups == {"a-0": "A", "b-39": "B"}


def test_a_few_jobs_stay_in_a_packed_key(
    redis_client: redis.Redis, queue: Queue, worker: type[lowkiq.Worker]
) -> None:
    """Fewer jobs than a bulk write leave a small shard's keys packed (less memory)."""
    enqueue(worker, [f"job-{n}" for n in range(5)])
    assert encoding(redis_client, queue.keys.perform_in_zset(0)) in {"listpack", "ziplist"}


def test_jobs_enqueued_one_at_a_time_onto_a_pending_wake_up_unpack_the_sorted_sets(
    redis_client: redis.Redis, queue: Queue, worker: type[lowkiq.Worker]
) -> None:
    """30 jobs enqueued one call each into a shard no process waits on (its wake-up stays
    pending): from the eighth on, its lex and schedule sorted sets are skiplists (a
    listpack would cost each push a scan parsing every score); every job is queued as
    given, and no key holds the mark.  Seven stay packed."""
    for n in range(7):
        enqueue(worker, [f"job-{n}"])
    assert encoding(redis_client, queue.keys.perform_in_zset(0)) in {"listpack", "ziplist"}
    for n in range(7, 30):
        enqueue(worker, [f"job-{n}"])
    assert encoding(redis_client, queue.keys.perform_in_zset(0)) == "skiplist"
    assert encoding(redis_client, queue.keys.fresh_lex_zset(0)) == "skiplist"
    ids = [f"job-{n}" for n in range(30)]
    fetched = worker.queries().fetch(ids)
    assert {job["id"]: [p for p, _ in job["payloads"]] for job in fetched} == {
        job_id: [job_id] for job_id in ids
    }
    assert redis_client.zcard(queue.keys.perform_in_zset(0)) == 30
    for key, members in shard_contents(redis_client, queue).items():
        assert not [m for m in members if m.startswith(MARK_BYTE)], key


@pytest.mark.parametrize("sizes", [[15, 16, 300], [1, 120, 10, 600], [700]])
def test_bulk_enqueues_keep_every_job_and_nothing_else(
    redis_client: redis.Redis, queue: Queue, worker: type[lowkiq.Worker], sizes: list[int]
) -> None:
    """Pushes of many sizes, alternating groups, some ids merged onto queued ones: every
    id is queued once, in its first group, with its payloads; no key holds the mark."""
    expected_groups: dict[str, str] = {}
    payloads: dict[str, set[str]] = {}
    start = 0
    for number, size in enumerate(sizes):
        group = "AB"[number % 2]
        ids = [f"job-{n}" for n in range(start, start + size)]
        # Half of the previous push again (merged onto the queued jobs).
        again = [f"job-{n}" for n in range(max(0, start - size // 2), start)]
        enqueue(worker, ids, group=group)
        for job_id in ids:
            expected_groups.setdefault(job_id, group)
            payloads.setdefault(job_id, set()).add(job_id)
        jobs = [{"id": job_id, "payload": f"{job_id}+", "perform_in": NOW} for job_id in again]
        if jobs:
            worker.perform_async(jobs)
        for job_id in again:
            payloads[job_id].add(f"{job_id}+")
        start += size
    fetched = worker.queries().fetch(list(expected_groups))
    assert {job["id"]: job.get("group") for job in fetched} == expected_groups
    assert {job["id"]: {p for p, _ in job["payloads"]} for job in fetched} == payloads
    assert redis_client.zcard(queue.keys.perform_in_zset(0)) == len(expected_groups)
    for key, members in shard_contents(redis_client, queue).items():
        assert not [m for m in members if m.startswith(MARK_BYTE)], key


def test_one_call_mixing_scores_given_and_not_keeps_each_jobs_payloads(
    redis_client: redis.Redis, worker: type[lowkiq.Worker]
) -> None:
    """Jobs given a score, jobs given none (Redis's time) and an id given twice, in one
    call and then merged by a second: each payload keeps the score it was given, the
    others get the time of their call, in the order given."""
    before = float(redis_client.time()[0])
    jobs: list[dict[str, object]] = []
    for n in range(40):
        job: dict[str, object] = {"id": f"job-{n}", "payload": f"p{n}", "perform_in": NOW}
        if n % 2:
            job["score"] = float(n)
        jobs.append(job)
    jobs += [{"id": "twice", "payload": "first"}, {"id": "twice", "payload": "second"}]
    worker.perform_async(jobs)
    worker.perform_async([{"id": "job-0", "payload": "again", "score": 1.0}])
    after = float(redis_client.time()[0]) + 1
    fetched = {
        job["id"]: job["payloads"]
        for job in worker.queries().fetch([f"job-{n}" for n in range(40)] + ["twice"])
    }
    for n in range(1, 40, 2):
        assert fetched[f"job-{n}"] == [[f"p{n}", float(n)]]
    for n in range(2, 40, 2):
        [[payload, score]] = fetched[f"job-{n}"]
        assert payload == f"p{n}" and before <= score <= after
    assert [payload for payload, _ in fetched["job-0"]] == ["again", "p0"]
    [first, second] = fetched["twice"]
    assert [first[0], second[0]] == ["first", "second"]
    assert before <= first[1] < second[1] <= after


@pytest.mark.parametrize("queued_at", [NOW, NOW - 10, NOW + 10])
def test_a_bulk_enqueue_merges_onto_ids_queued_at_its_own_perform_in_or_another(
    redis_client: redis.Redis, queue: Queue, worker: type[lowkiq.Worker], queued_at: float
) -> None:
    """40 jobs due at NOW, five of whose ids are queued (at NOW itself, earlier or later):
    the five merge (one job each, both payloads, their own perform_in kept), the others
    are queued anew; however the push tells them apart, nothing is queued twice."""
    queued = [f"job-{n}" for n in range(0, 40, 8)]
    worker.perform_async(
        [{"id": job_id, "payload": "first", "perform_in": queued_at} for job_id in queued]
    )
    enqueue(worker, [f"job-{n}" for n in range(40)])
    fetched = {job["id"]: job for job in worker.queries().fetch([f"job-{n}" for n in range(40)])}
    for job_id, job in fetched.items():
        payloads = sorted(payload for payload, _ in job["payloads"])
        if job_id in queued:
            assert payloads == sorted(["first", job_id])
            assert job["perform_in"] == queued_at
        else:
            assert payloads == [job_id]
            assert job["perform_in"] == NOW
    assert redis_client.zcard(queue.keys.perform_in_zset(0)) == 40
    assert redis_client.zcard(queue.keys.fresh_lex_zset(0)) == 40
