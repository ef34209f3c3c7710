"""The reads behind the dashboard's Retries and Scheduled lists."""

from __future__ import annotations

import time

from storage_support import NOW, retry_in

from tests.leasing import fail, pop


def ids(jobs):
    return [job["id"] for job in jobs]


def test_retries_by_id_leave_fresh_jobs_out(sharded_worker):
    queue = sharded_worker.queue()
    sharded_worker.perform_async([{"id": f"r{n}", "perform_in": NOW} for n in range(8)])
    for shard in queue.shards:
        batch = pop(queue, shard, 100, now=NOW)
        if batch:
            fail(queue, shard, batch, "boom", retry_in, 5, now=NOW)
    sharded_worker.perform_async([{"id": f"f{n}"} for n in range(8)])
    queries = sharded_worker.queries()
    assert ids(queries.retries_range_by_id("-", "+", limit=100)) == [f"r{n}" for n in range(8)]
    assert ids(queries.retries_rev_range_by_id("(r6", "[r2", limit=3)) == ["r5", "r4", "r3"]
    assert ids(queries.retries_range_by_id("[r", "[r\U0010ffff", limit=2)) == ["r0", "r1"]


def test_scheduled_count_on_redis_clock(sharded_worker):
    now = time.time()
    sharded_worker.perform_async([{"id": n, "perform_in": now + 3600} for n in range(7)])
    sharded_worker.perform_async([{"id": f"due{n}", "perform_in": now - 60} for n in range(3)])
    queries = sharded_worker.queries()
    assert abs(queries.redis_time() - time.time()) < 5
    assert queries.scheduled_count() == 7
    assert queries.scheduled_count(now=now + 7200) == 0
