"""How a batch ends when ``perform`` raises ``Discard``, ``Kill`` or ``BatchFailed``
(SPEC §11 Job control): the fail script's fates, and a worker's batch run to its end
through a shard handler, on one server and on the 3-master cluster."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from storage_support import NOW

import lowkiq
from lowkiq.errors import LeaseLost
from lowkiq.outcomes import Fate
from lowkiq.runtime.shard_handler import ShardHandler
from lowkiq.serializers import split_error
from lowkiq.storage.processing import JobEnd
from lowkiq.testing import drain
from tests.leasing import batch as batch_number
from tests.leasing import pop, token
from tests.runtime.serving import process

IDS = [f"o{n}" for n in range(10)]


def enqueue_ten(worker: type[lowkiq.Worker]) -> None:
    worker.perform_async([{"id": job_id, "payload": {"n": job_id}} for job_id in IDS])


def run_once(worker: type[lowkiq.Worker]) -> None:
    """Pop and perform one batch of shard 0, settled at once, as a worker process does."""
    queue = worker.queue()
    handler = ShardHandler(
        worker, 0, queue, token(queue, 0), format_error=lowkiq.settings.format_error
    )
    assert process(handler) is True
    if handler.unacked:
        handler.ack_now()


def test_batch_failed_fails_only_its_ids_and_acks_the_rest(worker):
    exhausted: list[dict[str, Any]] = []

    def perform(cls, payloads_by_id):
        raise lowkiq.BatchFailed({"o3": ValueError("card declined")})

    worker.perform = classmethod(perform)
    worker.retries_exhausted = classmethod(lambda cls, jobs: exhausted.extend(jobs))
    enqueue_ten(worker)
    run_once(worker)

    metrics = worker.metrics()
    counts = ("processed", "failed", "retries", "fresh", "busy", "morgue_length")
    assert tuple(metrics[k] for k in counts) == (9, 1, 1, 0, 0, 0)
    [job] = worker.queries().fetch(["o3"])
    assert job["retry_count"] == 0
    assert split_error(job["error"]).summary == "ValueError: card declined"
    assert worker.queries().fetch([i for i in IDS if i != "o3"]) == []

    # The retries run out (max_retry_count 3): the fourth failure buries it.
    for _ in range(3):
        assert exhausted == []
        worker.actions().perform_all_jobs_now()
        run_once(worker)
    metrics = worker.metrics()
    assert tuple(metrics[k] for k in counts) == (9, 4, 0, 0, 0, 1)
    [dead] = worker.queries().morgue_fetch(["o3"])
    assert split_error(dead["error"]).summary == "ValueError: card declined"
    assert [(j["id"], j["payloads"][0][0], j["error"]) for j in exhausted] == [
        ("o3", {"n": "o3"}, dead["error"])
    ]


def test_each_id_of_batch_failed_keeps_its_own_error(worker):
    def perform(cls, payloads_by_id):
        failures: dict[str, Exception] = {}
        for job_id in payloads_by_id:
            try:
                if job_id in ("o1", "o2"):
                    {}[f"status of {job_id}"]
            except KeyError as exc:
                failures[job_id] = exc
        raise lowkiq.BatchFailed(failures)

    worker.perform = classmethod(perform)
    enqueue_ten(worker)
    run_once(worker)
    jobs = {job["id"]: split_error(job["error"]) for job in worker.queries().fetch(["o1", "o2"])}
    assert jobs["o1"].summary == "KeyError: 'status of o1'"
    assert jobs["o2"].summary == "KeyError: 'status of o2'"
    assert "in perform" in (jobs["o1"].traceback or "")
    assert worker.metrics()["processed"] == 8


def test_kill_sends_the_batch_to_the_morgue_on_its_first_failure(worker):
    exhausted: list[dict[str, Any]] = []

    def perform(cls, payloads_by_id):
        raise lowkiq.Kill("no such customer")

    worker.perform = classmethod(perform)
    worker.retries_exhausted = classmethod(lambda cls, jobs: exhausted.extend(jobs))
    worker.perform_async([{"id": "k", "payload": p, "score": s} for s, p in enumerate("abc")])
    worker.perform_async([{"id": "other", "payload": "x"}])
    run_once(worker)

    metrics = worker.metrics()
    assert (metrics["morgue_length"], metrics["length"], metrics["failed"]) == (2, 0, 2)
    [dead] = worker.queries().morgue_fetch(["k"])
    # Whole: every payload perform got, not only the oldest as when retries run out.
    assert [payload for payload, _ in dead["payloads"]] == ["a", "b", "c"]
    assert split_error(dead["error"]).summary == "lowkiq.Kill: no such customer"
    assert sorted(job["id"] for job in exhausted) == ["k", "other"]
    assert all(job["error"] == dead["error"] for job in exhausted)


def test_discard_leaves_nothing_queued_and_counts(worker, caplog):
    def perform(cls, payloads_by_id):
        raise lowkiq.Discard("order was cancelled")

    worker.perform = classmethod(perform)
    enqueue_ten(worker)
    with caplog.at_level(logging.INFO, logger="lowkiq.shard_handler"):
        run_once(worker)
    metrics = worker.metrics()
    counts = ("discarded", "processed", "failed", "length", "busy", "morgue_length")
    assert tuple(metrics[k] for k in counts) == (10, 0, 0, 0, 0, 0)
    [record] = [r for r in caplog.records if "discarded" in r.getMessage()]
    assert record.levelno == logging.INFO
    assert "batch of 10 job(s) discarded: order was cancelled" in record.getMessage()
    assert lowkiq.overview().totals["discarded"] == 10


def test_batch_failed_may_kill_or_discard_one_id_and_ignores_unknown_ids(worker, caplog):
    def perform(cls, payloads_by_id):
        raise lowkiq.BatchFailed(
            {
                "o0": lowkiq.Kill("gone"),
                "o1": lowkiq.Discard("stale"),
                "o2": RuntimeError(),
                "nope": ValueError("not in the batch"),
            }
        )

    worker.perform = classmethod(perform)
    enqueue_ten(worker)
    with caplog.at_level(logging.INFO, logger="lowkiq.shard_handler"):
        run_once(worker)
    metrics = worker.metrics()
    counts = ("processed", "failed", "discarded", "morgue_length", "retries")
    assert tuple(metrics[k] for k in counts) == (7, 2, 1, 1, 1)
    [job] = worker.queries().fetch(["o2"])
    assert split_error(job["error"]).summary == "RuntimeError"  # no message: its class
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("does not hold, ignored: 'nope'" in message for message in warnings)


def test_a_drain_runs_batch_failed_like_a_worker(worker):
    def perform(cls, payloads_by_id):
        raise lowkiq.BatchFailed({"o5": ValueError("bad")})

    worker.perform = classmethod(perform)
    enqueue_ten(worker)
    drain(worker)
    metrics = worker.metrics()
    assert (metrics["processed"], metrics["failed"], metrics["retries"]) == (9, 1, 1)


def test_the_fail_script_ends_each_job_as_its_fate_says(worker, queue):
    worker.perform_async([{"id": i, "payload": i, "perform_in": NOW - 1} for i in "rkdaz"])
    batch = pop(queue, 0, 10, now=NOW)
    assert sorted(job.id for job in batch) == sorted("rkdaz")
    ends = [
        JobEnd("r", Fate.RETRY, "retry me", 30.0),
        JobEnd("k", Fate.KILL, "kill me"),
        JobEnd("d", Fate.DISCARD),
        JobEnd("a", Fate.DONE),
    ]
    dead = queue.settle_failed(
        0, token(queue, 0), batch_number(queue, 0), ends, max_retry_count=3, now=NOW
    )
    assert [(job["id"], job["error"]) for job in dead] == [("k", "kill me")]
    [retried] = worker.queries().fetch(["r"])
    assert (retried["retry_count"], retried["perform_in"], retried["error"]) == (
        0,
        NOW + 30,
        "retry me",
    )
    # A job the call does not name ("z": another batch of the same pop) stays in processing.
    assert [job["id"] for job in worker.queries().processing_data()] == ["z"]
    metrics = worker.metrics()
    counts = ("processed", "failed", "discarded", "morgue_length", "length")
    assert tuple(metrics[k] for k in counts) == (1, 2, 1, 1, 1)


def test_a_stale_lease_settles_nothing(worker, queue):
    worker.perform_async([{"id": i, "perform_in": NOW - 1} for i in "ab"])
    pop(queue, 0, 10, now=NOW)
    ends = [JobEnd("a", Fate.KILL, "x"), JobEnd("b", Fate.DONE)]
    with pytest.raises(LeaseLost):
        queue.settle_failed(
            0, "1 someone-else", batch_number(queue, 0), ends, max_retry_count=3, now=NOW
        )
    assert len(worker.queries().processing_data()) == 2
    assert worker.metrics()["processed"] == 0
