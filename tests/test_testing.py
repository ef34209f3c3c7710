"""lowkiq.testing: drain() on the real storage, and the testing guide's example test."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest
import redis

import lowkiq
from lowkiq.ownership import leases
from lowkiq.testing import DrainError, drain

pytest_plugins = ["pytester"]

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "guides" / "testing.md"


class Orders(lowkiq.Worker):
    shards_count = 3
    batch_size = 2
    max_retry_count = 2
    seen: list[dict[str, list[Any]]] = []
    exhausted: list[dict[str, Any]] = []
    again: int = 0

    @classmethod
    def retry_in(cls, retry_count: int) -> float:
        return 30.0

    @classmethod
    def retries_exhausted(cls, jobs: list[dict[str, Any]]) -> None:
        cls.exhausted.extend(jobs)

    @classmethod
    def perform(cls, payloads_by_id: dict[str, list[Any]]) -> None:
        cls.seen.append(dict(payloads_by_id))
        for payloads in payloads_by_id.values():
            if "fail" in payloads:
                raise RuntimeError("no")
        if cls.again:
            cls.again -= 1
            cls.perform_async([{"id": "loop", "payload": cls.again}])


@pytest.fixture(autouse=True)
def clean_orders(redis_client: redis.Redis) -> None:
    Orders.seen, Orders.exhausted, Orders.again = [], [], 0


def performed_ids() -> list[str]:
    return sorted(job_id for batch in Orders.seen for job_id in batch)


def test_drain_performs_due_jobs_merged_and_leaves_scheduled_ones() -> None:
    later = time.time() + 3600
    Orders.perform_async(
        [
            {"id": "a", "payload": "x", "score": 2},
            {"id": "a", "payload": "w", "score": 1},
            {"id": "a", "payload": "x", "score": 3},
            {"id": "b", "payload": "y"},
            {"id": "c", "payload": "z", "perform_in": later},
        ]
    )
    drained = drain(Orders)
    assert (drained.performed, drained.failed, drained.errors) == (2, 0, [])
    assert performed_ids() == ["a", "b"]
    merged = {job_id: payloads for batch in Orders.seen for job_id, payloads in batch.items()}
    assert merged["a"] == ["w", "x"]
    assert Orders.metrics()["length"] == 1
    assert Orders.metrics()["processed"] == 2

    assert drain(Orders, future=True).performed == 1
    assert performed_ids() == ["a", "b", "c"]
    assert Orders.metrics()["length"] == 0


def test_a_failed_batch_follows_the_retry_rules() -> None:
    Orders.perform_async([{"id": "f", "payload": "fail"}])
    drained = drain(Orders)
    assert drained.failed == 1 and [str(e) for e in drained.errors] == ["no"]
    (job,) = Orders.queries().fetch(["f"])
    assert job["retry_count"] == 0 and job["error"].startswith("RuntimeError: no\n")
    assert job["perform_in"] > time.time() + 20  # retry_in: not due, not run again
    assert len(Orders.seen) == 1

    drain(Orders, future=True)
    assert Orders.queries().fetch(["f"])[0]["retry_count"] == 1
    drain(Orders, future=True)
    assert Orders.metrics()["morgue_length"] == 1
    assert [job["id"] for job in Orders.exhausted] == ["f"]
    assert Orders.metrics()["failed"] == 3


def test_raise_errors_raises_after_recording_the_failure() -> None:
    Orders.perform_async([{"id": "f", "payload": "fail"}])
    with pytest.raises(RuntimeError, match="no"):
        drain(Orders, raise_errors=True)
    assert Orders.queries().fetch(["f"])[0]["retry_count"] == 0


def test_jobs_enqueued_by_perform_are_drained_too_within_the_bound() -> None:
    Orders.again = 3
    Orders.perform_async([{"id": "start"}])
    assert drain(Orders).batches == 4
    Orders.again = 50
    Orders.perform_async([{"id": "start"}])
    with pytest.raises(DrainError, match="still due after 10 batches"):
        drain(Orders, max_batches=10)


def test_drain_refuses_a_queue_a_worker_process_serves() -> None:
    queue = Orders.queue()
    lease, _, _ = leases.acquire(queue, 1, "some-process", 10)
    assert lease is not None
    Orders.perform_async([{"id": n} for n in range(10)])
    with pytest.raises(DrainError, match="shard 1 is leased by another process"):
        drain(Orders)
    assert Orders.seen == []
    assert leases.tokens(queue)[0] is None  # the shards drain took are given back


def guide_example() -> str:
    text = GUIDE.read_text()
    match = re.search(r"<!-- testing-example:[^>]*-->\n```python\n(.*?)```", text, re.S)
    assert match, "the testing guide's example is missing"
    return match.group(1)


def test_the_guide_example_passes_with_the_installed_plugin(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_orders=guide_example())
    result = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)


class Outcomes(lowkiq.Worker):
    shards_count = 1
    batch_size = 3

    @classmethod
    def perform(cls, payloads_by_id: dict[str, list[Any]]) -> None:
        kind = next(iter(payloads_by_id.values()))[0]
        if kind == "discard":
            raise lowkiq.Discard("not ours")
        if kind == "partial":
            raise lowkiq.BatchFailed({"p1": ValueError("bad p1")})


def test_drain_counts_discarded_and_partly_failed_batches_as_the_worker_does(
    redis_client: redis.Redis,
) -> None:
    lowkiq.settings.workers = [Outcomes]
    Outcomes.perform_async([{"id": "d1", "payload": "discard"}])
    drained = drain(Outcomes)
    assert (drained.performed, drained.failed, drained.discarded, drained.errors) == (0, 0, 1, [])
    Outcomes.perform_async([{"id": f"p{n}", "payload": "partial"} for n in range(3)])
    drained = drain(Outcomes)
    assert (drained.performed, drained.failed, drained.discarded) == (2, 1, 0)
    assert [str(exc) for exc in drained.errors] == ["bad p1"]
    assert [job["id"] for job in Outcomes.queries().fetch(["p1"])] == ["p1"]  # a retry


def test_drain_leaves_a_paused_groups_jobs_queued_until_it_is_resumed() -> None:
    Orders.perform_async(
        [
            {"id": "a1", "group": "acme", "payload": 1},
            {"id": "b1", "group": "beta", "payload": 1},
            {"id": "b2", "group": "beta", "payload": 2},
        ]
    )
    Orders.actions().pause_group("beta")
    assert drain(Orders).performed == 1
    assert performed_ids() == ["a1"]
    assert Orders.metrics()["length"] == 2  # beta's jobs wait, untouched
    Orders.actions().resume_group("beta")
    assert drain(Orders).performed == 2
    assert performed_ids() == ["a1", "b1", "b2"]


class CappedOrders(Orders):
    group_concurrency = 1


def test_drain_of_a_worker_with_group_concurrency_performs_every_group() -> None:
    CappedOrders.perform_async(
        [{"id": f"{group}{n}", "group": group, "payload": n} for group in "ab" for n in range(4)]
    )
    assert drain(CappedOrders).performed == 8
    assert CappedOrders.metrics()["length"] == 0
