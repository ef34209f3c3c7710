"""The schedule_tick script: a tick is passed once (compare-and-set on Redis's clock) and
its job written in the same step, merged by id like any enqueue (SPEC §3)."""

from __future__ import annotations

import threading
import time

from lowkiq.ownership.resharding import _Resharding, reshard
from lowkiq.storage import schedules as store
from lowkiq.storage.queue import Queue


def redis_ms(queue: Queue) -> int:
    seconds, micros = queue.client.time()
    return seconds * 1000 + micros // 1000


def test_the_first_call_passes_the_ticks_and_enqueues_the_job_with_the_tick_as_score(
    sharded_worker,
):
    queue = sharded_worker.queue()
    tick = redis_ms(queue) // 1000 * 1000 - 5_000
    reply = store.pass_ticks(queue, "digest", None, tick, [(tick, b'{"a":1}')])
    assert reply.status == store.DONE and reply.last == tick
    assert reply.now_ms >= tick + 5_000
    [job] = sharded_worker.queries().fetch(["digest"])
    assert job["payloads"] == [[{"a": 1}, tick / 1000]]
    assert job["perform_in"] == tick / 1000
    state = store.read_state(queue, "digest")
    assert (state.last, state.enqueued, state.runs) == (tick, tick, 1)
    assert state.enqueued_at is not None and state.enqueued_at >= tick + 5_000
    assert [(entry.tick, entry.kind) for entry in state.log] == [(tick, "tick")]


def test_a_caller_that_saw_an_older_last_tick_changes_nothing(sharded_worker):
    queue = sharded_worker.queue()
    first = redis_ms(queue) - 10_000
    assert store.pass_ticks(queue, "digest", None, first, []).status == store.DONE
    second = [(first + 1_000, b"1")]
    assert store.pass_ticks(queue, "digest", first, first + 1_000, second).status == store.DONE
    stale = store.pass_ticks(queue, "digest", first, first + 1_000, second)
    assert (stale.status, stale.last) == (store.MOVED, first + 1_000)
    again = store.pass_ticks(queue, "digest", None, first + 2_000, [(first + 2_000, b"2")])
    assert again.status == store.MOVED
    assert store.read_state(queue, "digest").runs == 1
    [job] = sharded_worker.queries().fetch(["digest"])
    assert [payload for payload, _ in job["payloads"]] == [1]


def test_a_tick_later_than_redis_clock_is_not_passed(sharded_worker):
    queue = sharded_worker.queue()
    future = redis_ms(queue) + 60_000
    reply = store.pass_ticks(queue, "digest", None, future, [(future, b"1")])
    assert reply.status == store.NOT_DUE and reply.now_ms < future
    assert store.read_state(queue, "digest").last is None
    assert sharded_worker.queries().fetch(["digest"]) == []


def test_ticks_merge_onto_the_queued_job_of_their_id(sharded_worker):
    queue = sharded_worker.queue()
    t = redis_ms(queue) // 1000 * 1000 - 10_000
    store.pass_ticks(queue, "digest", None, t, [(t, b"1")])
    store.pass_ticks(queue, "digest", t, t + 2_000, [(t + 1_000, b"1"), (t + 2_000, b"2")])
    [job] = sharded_worker.queries().fetch(["digest"])
    # Equal payloads keep the smallest score; the queued job keeps its perform_in.
    assert job["payloads"] == [[1, t / 1000], [2, (t + 2_000) / 1000]]
    assert job["perform_in"] == t / 1000
    state = store.read_state(queue, "digest")
    assert (state.runs, state.enqueued) == (3, t + 2_000)
    assert [entry.tick for entry in state.log] == [t + 2_000, t + 1_000, t]


def test_run_now_enqueues_a_job_and_leaves_the_ticks_alone(sharded_worker):
    queue = sharded_worker.queue()
    t = redis_ms(queue) - 1_000
    store.pass_ticks(queue, "digest", None, t, [])
    now = time.time()
    assert store.run_now(queue, "digest", b'"x"', now).status == store.DONE
    [job] = sharded_worker.queries().fetch(["digest"])
    assert job["payloads"] == [["x", now]]
    state = store.read_state(queue, "digest")
    assert (state.last, state.runs, state.enqueued) == (t, 0, None)
    assert state.run_now_at is not None and [e.kind for e in state.log] == ["now"]


def test_racing_callers_pass_each_tick_once(sharded_worker):
    queue = sharded_worker.queue()
    start = redis_ms(queue) - 100_000
    store.pass_ticks(queue, "race", None, start, [])
    done: list[int] = []

    def race() -> None:
        mine = sharded_worker.queue()
        last = start
        for tick in range(start + 1_000, start + 51_000, 1_000):
            reply = store.pass_ticks(mine, "race", last, tick, [(tick, str(tick).encode())])
            if reply.status == store.DONE:
                done.append(tick)
            last = tick if reply.status == store.DONE else (reply.last or last)
            assert last >= tick or reply.status != store.DONE

    threads = [threading.Thread(target=race) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(done) == list(range(start + 1_000, start + 51_000, 1_000))
    [job] = sharded_worker.queries().fetch(["race"])
    assert len(job["payloads"]) == 50


def test_a_reshard_carries_each_schedule_on_from_its_last_tick(sharded_worker):
    queue = sharded_worker.queue()
    t = redis_ms(queue) // 1000 * 1000 - 20_000
    ids = [f"s{n}" for n in range(8)]
    for schedule_id in ids:
        store.pass_ticks(queue, schedule_id, None, t, [(t, b"1")])
    reshard(queue, 7)
    moved = sharded_worker.queue()
    for schedule_id in ids:
        state = store.read_state(moved, schedule_id)
        assert (state.last, state.enqueued, state.runs) == (t, t, 1), schedule_id
        stale = store.pass_ticks(moved, schedule_id, None, t + 1_000, [(t + 1_000, b"2")])
        assert (stale.status, stale.last) == (store.MOVED, t)
        reply = store.pass_ticks(moved, schedule_id, t, t + 1_000, [(t + 1_000, b"2")])
        assert reply.status == store.DONE
    jobs = sharded_worker.queries().fetch(ids)
    assert [[payload for payload, _ in job["payloads"]] for job in jobs] == [[1, 2]] * 8


def test_during_a_reshard_a_claim_in_the_new_shard_starts_from_the_retired_one(sharded_worker):
    queue = sharded_worker.queue()
    t = redis_ms(queue) // 1000 * 1000 - 20_000
    store.pass_ticks(queue, "s", None, t, [(t, b"1")])
    old = queue.shard_of("s")
    # A reshard that retired the old shard and has not carried its schedules over yet.
    _Resharding(queue, "test", lambda: None, lambda progress: None).begin(7)
    queue.write("reshard_hold", [queue.keys.prefix(old)], "retired")
    queue.client.sadd(queue.keys.retired_set, old)
    during = sharded_worker.queue()
    during.refresh_layout()
    assert during.locator()("s") != old
    stale = store.pass_ticks(during, "s", None, t + 1_000, [(t + 1_000, b"2")])
    assert (stale.status, stale.last) == (store.MOVED, t)
    assert store.pass_ticks(during, "s", t, t + 1_000, [(t + 1_000, b"2")]).status == store.DONE
    assert store.read_state(during, "s").last == t + 1_000
