"""``Worker.retry_in(retry_count, exception)``: the delay of a retry may depend on the
error the job failed with (a partner's ``Retry-After``, a timeout against a bug); the
one-argument form keeps working.  Through the worker's own settle path
(``lowkiq.testing.drain``) against a real Redis."""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis

import lowkiq
from lowkiq.testing import drain


class RateLimited(Exception):
    """A partner API said when to come back."""

    def __init__(self, retry_after: float) -> None:
        super().__init__(f"retry after {retry_after} s")
        self.retry_after = retry_after


class PerError(lowkiq.Worker):
    shards_count = 1
    #: (retry_count, exception) of every retry_in call.
    asked: list[tuple[int, BaseException | None]] = []

    @classmethod
    def retry_in(cls, retry_count: int, exception: BaseException | None) -> float:
        cls.asked.append((retry_count, exception))
        if isinstance(exception, RateLimited):
            return exception.retry_after
        return 3600.0

    @classmethod
    def perform(cls, payloads_by_id: dict[str, list[Any]]) -> None:
        failures: dict[str, Exception] = {}
        for job_id, payloads in payloads_by_id.items():
            if payloads[-1] == "limited":
                failures[job_id] = RateLimited(120.0)
            elif payloads[-1] == "broken":
                failures[job_id] = ValueError("bad data")
        if failures:
            raise lowkiq.BatchFailed(failures)


class CountOnly(lowkiq.Worker):
    shards_count = 1

    @classmethod
    def retry_in(cls, retry_count: int) -> float:
        return 900.0

    @classmethod
    def perform(cls, payloads_by_id: dict[str, list[Any]]) -> None:
        raise RuntimeError("down")


@pytest.fixture(autouse=True)
def workers(redis_client: redis.Redis) -> None:
    lowkiq.settings.workers = [PerError, CountOnly]
    PerError.asked = []


def due_in(worker: type[lowkiq.Worker], job_id: str) -> float:
    """Seconds until ``job_id``'s retry is due."""
    (job,) = worker.queries().fetch([job_id])
    return float(job["perform_in"]) - time.time()


def test_each_job_is_retried_after_the_delay_its_own_exception_asks() -> None:
    PerError.perform_async([{"id": "a", "payload": "limited"}, {"id": "b", "payload": "broken"}])
    drained = drain(PerError)
    assert drained.failed == 2
    assert 100 < due_in(PerError, "a") <= 120  # the partner's Retry-After
    assert 3500 < due_in(PerError, "b") <= 3600
    by_type = {type(exc).__name__: count for count, exc in PerError.asked}
    assert by_type == {"RateLimited": 0, "ValueError": 0}  # the first failure: count 0


def test_a_retry_in_that_takes_only_the_count_keeps_working() -> None:
    CountOnly.perform_async([{"id": "c"}])
    assert drain(CountOnly).failed == 1
    assert 800 < due_in(CountOnly, "c") <= 900
