"""Queue metrics and the ``lowkiq.stats()`` document of SPEC §5."""

from __future__ import annotations

import time

import pytest
import redis
from storage_support import NOW, retry_in

import lowkiq
from tests.leasing import ack, fail, pop

ZERO = {
    "length": 0,
    "fresh": 0,
    "retries": 0,
    "morgue_length": 0,
    "lag": 0,
    "processed": 0,
    "failed": 0,
    "busy": 0,
    "discarded": 0,
    "stale_calls": 0,
    "snoozed": 0,
    "cancelled": 0,
}


def test_metrics_of_an_empty_queue(sharded_worker):
    assert sharded_worker.metrics() == ZERO


def test_metrics_count_every_state(worker, queue):
    future = time.time() + 3600
    # Two jobs die, one fails into a retry, one succeeds, one runs, three wait.
    worker.perform_async([{"id": n, "perform_in": NOW + n} for n in range(2)])
    fail(queue, 0, pop(queue, 0, 10, now=NOW + 10), "dead", retry_in, 0, now=NOW + 10)
    worker.perform_async([{"id": "retry", "perform_in": NOW}])
    fail(queue, 0, pop(queue, 0, 10, now=NOW + 20), "once", retry_in, 5, now=NOW + 20)
    worker.perform_async([{"id": "ok", "perform_in": NOW}])
    pop(queue, 0, 1, now=NOW + 25)
    ack(queue, 0)
    worker.perform_async([{"id": "running", "perform_in": NOW}])
    pop(queue, 0, 1, now=NOW + 26)
    worker.perform_async([{"id": f"waiting{n}", "perform_in": future} for n in range(3)])

    metrics = worker.metrics()
    assert {key: value for key, value in metrics.items() if key != "lag"} == {
        "length": 4,
        "fresh": 3,
        "retries": 1,
        "morgue_length": 2,
        "processed": 1,
        "failed": 3,
        "busy": 1,
        "discarded": 0,
        "stale_calls": 0,
        "snoozed": 0,
        "cancelled": 0,
    }


def test_length_is_fresh_plus_retries(worker, queue):
    worker.perform_async([{"id": n, "perform_in": NOW} for n in range(5)])
    fail(queue, 0, pop(queue, 0, 2, now=NOW), "e", retry_in, 5, now=NOW)
    metrics = worker.metrics()
    assert (metrics["fresh"], metrics["retries"], metrics["length"]) == (3, 2, 5)


def test_busy_counts_jobs_in_every_processing_area(sharded_worker):
    queue = sharded_worker.queue()
    sharded_worker.perform_async([{"id": n, "perform_in": NOW} for n in range(12)])
    for shard in range(5):
        pop(queue, shard, 100, now=NOW)
    assert sharded_worker.metrics()["busy"] == 12
    ack(queue, queue.shard_of("0"))
    expected = 12 - sum(1 for n in range(12) if queue.shard_of(str(n)) == queue.shard_of("0"))
    assert sharded_worker.metrics()["busy"] == expected


def test_lag_is_the_age_of_the_earliest_due_job(sharded_worker):
    now = time.time()
    sharded_worker.perform_async(
        [
            {"id": "a", "perform_in": now - 100},
            {"id": "b", "perform_in": now - 250},
            {"id": "c", "perform_in": now - 10},
            {"id": "later", "perform_in": now + 3600},
        ]
    )
    lag = sharded_worker.metrics()["lag"]
    assert 250 <= lag < 250 + (time.time() - now) + 1


def test_lag_is_zero_when_nothing_is_due(sharded_worker):
    sharded_worker.perform_async([{"id": n, "perform_in": time.time() + 60} for n in range(5)])
    assert sharded_worker.metrics()["lag"] == 0


def test_lag_ignores_jobs_being_processed(worker, queue):
    worker.perform_async([{"id": "old", "perform_in": time.time() - 500}])
    pop(queue, 0, 1)
    assert worker.metrics()["lag"] == 0


def test_failed_counts_every_job_of_a_failed_batch(worker, queue):
    worker.perform_async([{"id": n, "perform_in": NOW} for n in range(3)])
    fail(queue, 0, pop(queue, 0, 10, now=NOW), "e", retry_in, 5, now=NOW)
    assert worker.metrics()["failed"] == 3


@pytest.fixture
def two_workers(redis_client):
    class OrderWorker(lowkiq.Worker):
        shards_count = 2

    class MailWorker(lowkiq.Worker):
        shards_count = 3
        queue_name = "mail"

    lowkiq.settings.workers = [OrderWorker, MailWorker]
    return OrderWorker, MailWorker


def test_stats_document_with_two_workers(two_workers):
    orders, mail = two_workers
    now = time.time()
    orders.perform_async([{"id": 1, "perform_in": now - 30}, {"id": 2, "perform_in": now + 3600}])
    mail.perform_async([{"id": n, "perform_in": now - 90} for n in range(3)])
    mail_queue = mail.queue()
    shard = mail_queue.shard_of("0")
    batch = pop(mail_queue, shard, 1, now=now)
    fail(mail_queue, shard, batch, "dead", retry_in, 0, now=now)

    stats = lowkiq.stats()
    elapsed = time.time() - now + 1

    assert set(stats) == {"total", "by_worker"}
    assert set(stats["by_worker"]) == {"OrderWorker", "MailWorker"}
    for part in [stats["total"], *stats["by_worker"].values()]:
        assert set(part) == {"length", "morgue_length", "lag"}
    by_worker = stats["by_worker"]
    assert (by_worker["OrderWorker"]["length"], by_worker["OrderWorker"]["morgue_length"]) == (2, 0)
    assert (by_worker["MailWorker"]["length"], by_worker["MailWorker"]["morgue_length"]) == (2, 1)
    assert 30 <= by_worker["OrderWorker"]["lag"] < 30 + elapsed
    assert 90 <= by_worker["MailWorker"]["lag"] < 90 + elapsed
    assert (stats["total"]["length"], stats["total"]["morgue_length"]) == (4, 1)
    assert stats["total"]["lag"] == max(w["lag"] for w in by_worker.values())


def test_stats_with_no_workers(redis_client):
    assert lowkiq.stats() == {
        "total": {"length": 0, "morgue_length": 0, "lag": 0},
        "by_worker": {},
    }


def test_stats_agree_with_metrics(two_workers):
    orders, mail = two_workers
    orders.perform_async([{"id": n, "perform_in": time.time() - 5} for n in range(7)])
    by_worker = lowkiq.stats()["by_worker"]
    for worker in two_workers:
        metrics = worker.metrics()
        assert by_worker[worker.__name__]["length"] == metrics["length"]
        assert by_worker[worker.__name__]["morgue_length"] == metrics["morgue_length"]


def test_lag_is_measured_on_redis_clock_not_the_readers(sharded_worker, redis_client, monkeypatch):
    if isinstance(redis_client, redis.RedisCluster):
        seconds, micros = redis_client.get_primaries()[0].redis_connection.time()
    else:
        seconds, micros = redis_client.time()
    redis_now = seconds + micros / 1e6
    sharded_worker.perform_async([{"id": 1, "perform_in": redis_now - 30}])
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + 100)  # the dashboard's clock is off
    assert 29 < sharded_worker.metrics()["lag"] < 40
