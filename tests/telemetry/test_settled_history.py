"""The metrics history counts each job as the worker settled it, as Redis's counters do
(``Worker.metrics()``, Prometheus): a ``BatchFailed`` batch fails only the jobs it
names, a ``Discard`` is discarded (not processed), a job that yields is neither."""

from __future__ import annotations

from typing import Any

import redis

import lowkiq
from lowkiq.runtime.server import Server
from tests.apps.runner import eventually


class PartlyFailing(lowkiq.Worker):
    """Fails the first job of each batch of ten through ``BatchFailed``."""

    shards_count = 1
    batch_size = 10

    @classmethod
    def perform(cls, payloads_by_id: dict[str, list[Any]]) -> None:
        first = min(payloads_by_id)
        raise lowkiq.BatchFailed({first: ValueError("declined")})

    @classmethod
    def retry_in(cls, retry_count: int) -> float:
        return 3600.0


class Dropping(lowkiq.Worker):
    """Discards every batch."""

    shards_count = 1
    batch_size = 10

    @classmethod
    def perform(cls, payloads_by_id: dict[str, list[Any]]) -> None:
        raise lowkiq.Discard("stale")


class Mixed(lowkiq.Worker):
    """One batch of ten: a job discarded, two killed, one failed, the rest processed."""

    shards_count = 1
    batch_size = 10

    @classmethod
    def perform(cls, payloads_by_id: dict[str, list[Any]]) -> None:
        raise lowkiq.BatchFailed(
            {
                "m0": lowkiq.Discard("gone"),
                "m1": lowkiq.Kill("bad"),
                "m2": lowkiq.Kill("bad"),
                "m3": RuntimeError("later"),
            }
        )

    @classmethod
    def retry_in(cls, retry_count: int) -> float:
        return 3600.0


class Yielding(lowkiq.Worker):
    """Gives back the payloads after the first of job ``y0``; the others succeed."""

    shards_count = 1
    batch_size = 10

    @classmethod
    def perform(cls, payloads_by_id: dict[str, list[Any]]) -> None:
        batch = lowkiq.current_batch()
        assert batch is not None
        payloads = payloads_by_id.get("y0")
        if payloads and len(payloads) > 1:
            batch.yield_rest("y0", payloads[1:])


def counters(worker: type[lowkiq.Worker]) -> tuple[int, int, int]:
    """Processed, failed and discarded jobs by Redis's counters."""
    metrics = worker.metrics()
    return int(metrics["processed"]), int(metrics["failed"]), int(metrics["discarded"])


def test_the_history_counts_jobs_as_redis_counters_do(redis_client: redis.Redis) -> None:
    workers: list[type[lowkiq.Worker]] = [PartlyFailing, Dropping, Mixed, Yielding]
    lowkiq.settings.workers = workers
    lowkiq.settings.poll_interval = 0.05
    PartlyFailing.perform_async([{"id": f"a{n}", "payload": n} for n in range(10)])
    Dropping.perform_async([{"id": f"d{n}", "payload": n} for n in range(10)])
    Mixed.perform_async([{"id": f"m{n}", "payload": n} for n in range(10)])
    Yielding.perform_async([{"id": f"y{n}", "payload": n} for n in range(10)])
    Yielding.perform_async([{"id": "y0", "payload": "more"}])
    server = Server(lowkiq.settings)
    server.start()
    try:
        eventually(lambda: counters(PartlyFailing) == (9, 1, 0), timeout=10)
        eventually(lambda: counters(Dropping) == (0, 0, 10), timeout=10)
        eventually(lambda: counters(Mixed) == (6, 3, 1), timeout=10)
        # y0 yields once, then its last payload runs and it is processed
        eventually(lambda: counters(Yielding) == (10, 0, 0), timeout=10)
    finally:
        server.request_stop()
        server.stop()  # the last counts are written on the way out
    history = {name: stored.total for name, stored in lowkiq.history(5).items()}
    for worker in workers:
        total = history[worker.__name__]
        processed, failed, discarded = counters(worker)
        assert (total.processed_jobs, total.failed_jobs) == (processed, failed), worker.__name__
        assert total.discarded_jobs == discarded, worker.__name__
    assert history["Yielding"].yielded_jobs == 1 and history["Yielding"].jobs == 11
    assert history["PartlyFailing"].failures == 1 and history["PartlyFailing"].jobs == 10
    assert history["Dropping"].failures == 0 and history["Dropping"].jobs == 10
