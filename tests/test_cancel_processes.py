"""Cancelling running work, and telling a perform that a newer payload arrived, with real
``lowkiq worker`` processes on the app of ``tests/apps/cancellable.py``.

``Worker.actions().cancel(ids)``: the queued payloads go, the running perform (in
another process) sees ``should_stop()``, its cancelled jobs end as cancelled (counted,
tracked, never retried, yielded back or buried), and the id's payloads enqueued after
the cancel run.  ``current_batch().superseded(id)``: true once a newer payload was
enqueued after the pop; the payloads a hot id's batch left queued are not newer."""

from __future__ import annotations

import json
import signal
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

import lowkiq
from lowkiq.ownership.status import RunningBatchInfo
from tests.apps.runner import WorkerProcess, eventually

APP = "tests/apps/cancellable.py"

Start = Callable[..., WorkerProcess]


@pytest.fixture
def start(
    redis_client: redis.Redis, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Start]:
    """``start(*args, **env)`` starts a worker process on the app; all are killed after the
    test."""
    monkeypatch.setenv("REDIS_URL", redis_url)
    from tests.apps.cancellable import Long, Steps, Watch

    lowkiq.settings.workers = [Long, Steps, Watch]
    started: list[WorkerProcess] = []

    def run(*args: str, **env: str) -> WorkerProcess:
        process = WorkerProcess("-r", APP, *args, env={"REDIS_URL": redis_url, **env})
        started.append(process)
        process.wait_started()
        return process

    yield run
    for process in started:
        process.close()


def stopped(record: redis.Redis) -> list[dict[str, Any]]:
    return [json.loads(entry) for entry in record.lrange("test:stopped", 0, -1)]


def started_ids(record: redis.Redis) -> list[str]:
    return [i.decode() for i in record.lrange("test:started", 0, -1)]


def test_cancel_stops_the_running_perform_and_settles_its_jobs_as_cancelled(
    start: Start, redis_client: redis.Redis
) -> None:
    from tests.apps.cancellable import Long

    start()
    Long.perform_async([{"id": "a", "payload": {"n": 1}}, {"id": "b", "payload": {"n": 1}}])
    eventually(lambda: sorted(started_ids(redis_client)) == ["a", "b"])
    # A payload of "a" queued behind its running batch: a cancel deletes it too.
    Long.perform_async([{"id": "a", "payload": {"n": 2}}])
    assert Long.metrics()["length"] == 1

    assert Long.actions().cancel(["a", "nobody"]) == 1

    seen = eventually(lambda: stopped(redis_client))
    assert seen == [{"ids": ["a"], "cancelled": ["a"], "at": seen[0]["at"]}]
    eventually(lambda: Long.metrics()["busy"] == 1)  # "b" runs on, in its own batch
    metrics = Long.metrics()
    assert metrics["cancelled"] == 1
    assert metrics["length"] == 0  # its queued payload went, its yield did not come back
    assert (metrics["failed"], metrics["morgue_length"], metrics["processed"]) == (0, 0, 0)
    events = [e.event for e in Long.history("a")]
    assert events[-2:] == ["deleted", "cancelled"]
    assert Long.queries().fetch(["a"]) == []

    # Payloads enqueued after the cancel are new work: they run, and their batch is not
    # taken for the cancelled one.
    Long.perform_async([{"id": "a", "payload": {"quick": True}}])
    eventually(lambda: redis_client.lrange("test:quick", 0, -1) == [b"a"])
    Long.perform_async([{"id": "a", "payload": {"n": 3}}])
    eventually(lambda: started_ids(redis_client).count("a") == 2)
    at_start = [json.loads(e) for e in redis_client.lrange("test:cancelled_at_start", 0, -1)]
    assert at_start[-1] == []
    assert Long.metrics()["cancelled"] == 1
    assert Long.actions().cancel(["a"]) == 1  # and it can be cancelled in turn
    eventually(lambda: Long.metrics()["cancelled"] == 2)


def test_a_cancelled_batch_whose_process_dies_is_not_run_again(
    start: Start, redis_client: redis.Redis
) -> None:
    from tests.apps.cancellable import Long

    first = start(TEST_LEASE_TTL="2")
    Long.perform_async([{"id": "deaf", "payload": {"deaf": True}}])
    eventually(lambda: started_ids(redis_client) == ["deaf"])
    assert Long.actions().cancel(["deaf"]) == 1
    first.kill()  # before the perform ended: the batch stays in processing
    start(TEST_LEASE_TTL="2")  # takes the shard over once the lease lapsed
    eventually(lambda: Long.metrics()["cancelled"] == 1)
    metrics = Long.metrics()
    assert (metrics["busy"], metrics["length"], metrics["morgue_length"]) == (0, 0, 0)
    assert started_ids(redis_client) == ["deaf"]  # not run again


def test_a_batch_cancelled_before_its_perform_began_is_not_performed(
    start: Start, redis_client: redis.Redis
) -> None:
    from tests.apps.cancellable import Long

    start("--threads", "1")  # one batch performing, the next one waiting for the thread
    first = "first"
    shard = Long.queue().shard_of(first)
    second = next(f"second{n}" for n in range(100) if Long.queue().shard_of(f"second{n}") != shard)
    Long.perform_async([{"id": first, "payload": {"n": 1}}])
    eventually(lambda: started_ids(redis_client) == [first])
    Long.perform_async([{"id": second, "payload": {"n": 1}}])
    eventually(lambda: Long.metrics()["busy"] == 2)  # popped, waiting for the thread
    assert Long.actions().cancel([second]) == 1
    assert Long.actions().cancel([first]) == 1  # read after the first cancel
    eventually(lambda: Long.metrics()["cancelled"] == 2)
    eventually(lambda: Long.metrics()["busy"] == 0)
    assert started_ids(redis_client) == [first]  # the second never began
    assert Long.metrics()["processed"] == 0


def test_a_cancelled_batch_that_raises_is_neither_retried_nor_counted_failed(
    start: Start, redis_client: redis.Redis
) -> None:
    from tests.apps.cancellable import Long

    start()
    Long.perform_async([{"id": "r", "payload": {"raise": True}}])
    eventually(lambda: started_ids(redis_client) == ["r"])
    assert Long.actions().cancel(["r"]) == 1
    eventually(lambda: Long.metrics()["cancelled"] == 1)
    eventually(lambda: Long.metrics()["busy"] == 0)
    metrics = Long.metrics()
    assert (metrics["length"], metrics["failed"], metrics["morgue_length"]) == (0, 0, 0)


def test_an_iterating_perform_cancelled_gives_nothing_back(
    start: Start, redis_client: redis.Redis
) -> None:
    from tests.apps.cancellable import Steps

    start()
    Steps.perform_async([{"id": "it", "payload": {"v": n}, "score": n} for n in range(200)])
    eventually(lambda: redis_client.llen("test:steps:it") >= 5)
    assert Steps.actions().cancel(["it"]) == 1
    eventually(lambda: Steps.metrics()["cancelled"] == 1)
    eventually(lambda: Steps.metrics()["busy"] == 0)
    done = redis_client.llen("test:steps:it")
    assert done < 200
    assert Steps.metrics()["length"] == 0  # the rest was not yielded back
    assert Steps.metrics()["processed"] == 0


def test_cancel_reaches_the_perform_of_another_process_among_several(
    start: Start, redis_client: redis.Redis
) -> None:
    from tests.apps.cancellable import Long

    start()
    start()
    ids = [f"o{n}" for n in range(6)]
    Long.perform_async([{"id": i, "payload": {"n": 1}} for i in ids])
    cancelled: set[str] = set()
    # Each shard runs one id at a time, whichever process holds it: cancel the running
    # ones; the ids queued behind them then run (their payloads were not cancelled).
    while len(cancelled) < len(ids):
        done = frozenset(cancelled)
        running = eventually(lambda done=done: set(started_ids(redis_client)) - done)
        assert Long.actions().cancel(sorted(running)) == len(running)
        cancelled |= running
    eventually(lambda: len(stopped(redis_client)) == len(ids))
    seen = sorted(i for entry in stopped(redis_client) for i in entry["cancelled"])
    assert seen == sorted(ids)
    eventually(lambda: Long.metrics()["cancelled"] == len(ids))
    assert sorted(started_ids(redis_client)) == sorted(ids)  # each ran once


def test_superseded_turns_true_once_a_newer_payload_is_enqueued(
    start: Start, redis_client: redis.Redis
) -> None:
    from tests.apps.cancellable import Watch

    start()
    # A payload with a score in the future, queued before the pop: taken with the batch.
    Watch.perform_async(
        [{"id": "w", "payload": {"v": 1}}, {"id": "w", "payload": {"v": 2}, "score": 4e9}]
    )
    eventually(lambda: redis_client.lrange("test:superseded_first:w", 0, -1) == [b"0"])
    assert not redis_client.exists("test:superseded_at:w")
    # A payload equal to none queued, with an older score: enqueued after the pop, newer.
    Watch.perform_async([{"id": "w", "payload": {"v": 3}, "score": 1.0}])
    eventually(lambda: redis_client.exists("test:superseded_at:w"))


def test_a_hot_ids_payloads_left_queued_by_its_batch_are_not_newer(
    start: Start, redis_client: redis.Redis
) -> None:
    from tests.apps.cancellable import Watch

    # 300 payloads merged onto a queued job: a hot id; its batch takes 250, the other
    # 50 stay queued.
    Watch.perform_async([{"id": "h", "payload": {"v": 0}, "score": 0}])
    Watch.perform_async([{"id": "h", "payload": {"v": n}, "score": n} for n in range(1, 300)])
    start()
    eventually(lambda: redis_client.lrange("test:superseded_first:h", 0, -1) == [b"0"])
    assert redis_client.lrange("test:watch_sizes:h", 0, -1) == [b"250"]
    assert Watch.metrics()["length"] == 1  # the 50 left behind, queued
    # A payload equal to one left queued merges into it: nothing newer.
    Watch.perform_async([{"id": "h", "payload": {"v": 299}, "score": 299}])
    assert not redis_client.exists("test:superseded_at:h")
    Watch.perform_async([{"id": "h", "payload": {"v": 300}, "score": 300}])
    eventually(lambda: redis_client.exists("test:superseded_at:h"))


def test_superseded_and_cancelled_outside_a_worker_process() -> None:
    batch = lowkiq.RunningBatch(lowkiq.Worker, 0, ["x"])
    assert batch.superseded("x") is False
    assert batch.cancelled() == frozenset()


def test_a_cancelled_perform_that_goes_on_is_shown_asked_to_stop(
    start: Start, redis_client: redis.Redis
) -> None:
    from tests.apps.cancellable import Long

    start()
    Long.perform_async([{"id": "deaf", "payload": {"deaf": True}}])
    eventually(lambda: started_ids(redis_client) == ["deaf"])

    def running() -> list[RunningBatchInfo]:
        return [batch for process in lowkiq.processes().processes for batch in process.running]

    eventually(lambda: len(running()) == 1 and not running()[0].stopping)
    assert Long.actions().cancel(["deaf"]) == 1
    # Its perform does not look at should_stop(): the Busy row says it was asked to.
    eventually(lambda: len(running()) == 1 and running()[0].stopping, 10)


def test_the_history_counts_a_cancelled_job_neither_processed_nor_failed(
    start: Start, redis_client: redis.Redis
) -> None:
    from tests.apps.cancellable import Long

    process = start()
    Long.perform_async(
        [{"id": "r", "payload": {"raise": True}}, {"id": "ok", "payload": {"quick": True}}]
    )
    eventually(lambda: "r" in started_ids(redis_client))
    assert Long.actions().cancel(["r"]) == 1
    eventually(lambda: Long.metrics()["cancelled"] == 1 and Long.metrics()["busy"] == 0)
    eventually(lambda: Long.metrics()["processed"] == 1)  # "ok", a quick job
    process.signal(signal.SIGTERM)
    assert process.wait() == 0  # the last counts are written on the way out
    total = lowkiq.history(5, ["Long"])["Long"].total
    assert (total.processed_jobs, total.failed_jobs) == (1, 0)
