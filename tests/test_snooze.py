"""``raise lowkiq.Snooze(seconds)``: the batch's jobs are due again after ``seconds``
(Redis's clock), their retry count and error unchanged, counted as snoozed and not as
failed; inside ``BatchFailed`` only the ids it is given for.  Through the worker's own
settle path (``lowkiq.testing.drain``), on one server and on a Redis Cluster."""

from __future__ import annotations

import time
from typing import Any

import pytest

import lowkiq
from lowkiq.clients.connection import Client
from lowkiq.testing import drain
from tests.both_redis import server_or_cluster_client  # noqa: F401  (redis_client)


class Partner(lowkiq.Worker):
    """Fails the first time, then is told by its partner to come back in 300 s."""

    shards_count = 2
    track = True
    calls: dict[str, int] = {}

    @classmethod
    def retry_in(cls, retry_count: int) -> float:
        return 60.0

    @classmethod
    def perform(cls, payloads_by_id: dict[str, list[Any]]) -> None:
        snoozed: dict[str, Exception] = {}
        for job_id in payloads_by_id:
            cls.calls[job_id] = cls.calls.get(job_id, 0) + 1
            if cls.calls[job_id] == 1:
                raise RuntimeError("partner down")
            if job_id.startswith("later"):
                snoozed[job_id] = lowkiq.Snooze(300)
        if snoozed:
            raise lowkiq.BatchFailed(snoozed)


@pytest.fixture(autouse=True)
def partner(redis_client: Client) -> None:
    lowkiq.settings.workers = [Partner]
    Partner.calls = {}


def test_a_snoozed_job_is_due_again_later_with_its_retry_count_and_error_unchanged() -> None:
    Partner.perform_async([{"id": "later-1", "payload": "p"}])
    assert drain(Partner).failed == 1
    (failed,) = Partner.queries().fetch(["later-1"])
    assert failed["retry_count"] == 0 and failed["error"].startswith("RuntimeError")

    assert drain(Partner, future=True).snoozed == 1  # the retry runs, and snoozes
    (job,) = Partner.queries().fetch(["later-1"])
    assert job["retry_count"] == 0 and job["error"] == failed["error"]
    assert 290 < job["perform_in"] - time.time() <= 300
    assert job["payloads"] == failed["payloads"]
    metrics = Partner.metrics()
    assert (metrics["snoozed"], metrics["failed"], metrics["processed"]) == (1, 1, 0)
    assert [e.event for e in Partner.history("later-1")][-1] == "snoozed"


def test_batch_failed_snoozes_only_the_ids_it_names() -> None:
    Partner.perform_async([{"id": "later-2"}, {"id": "now-1"}])
    drain(Partner)  # both fail once
    drain(Partner, future=True)  # later-2 snoozes, now-1 is done
    assert [job["id"] for job in Partner.queries().fetch(["later-2", "now-1"])] == ["later-2"]
    assert Partner.metrics()["snoozed"] == 1


@pytest.mark.parametrize(
    "seconds", [-1, float("inf"), float("nan"), "60", True, 3_155_760_001, 1e12]
)
def test_snooze_refuses_what_is_not_a_number_of_seconds_up_to_100_years(seconds: Any) -> None:
    with pytest.raises(ValueError, match="number of seconds from 0 to 3155760000"):
        lowkiq.Snooze(seconds)
