"""The default ``score`` and ``perform_in`` of an enqueued job are Redis's time, set by
the push script: a producer whose clock is off neither delays its jobs nor reorders
their payloads.  Values the caller gives are kept as given (SPEC §2, §3)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

import lowkiq
from lowkiq.storage import blob
from lowkiq.testing import drain

#: Redis TIME has microseconds; a float sum of its parts may round below a reading
#: taken just before it.
SLACK = 0.001
_real_time = time.time


@contextmanager
def producer_clock(monkeypatch: pytest.MonkeyPatch, offset: float) -> Iterator[None]:
    """This process's clock ``offset`` seconds off (Redis runs on this host, on the
    real clock)."""
    monkeypatch.setattr(time, "time", lambda: _real_time() + offset)
    try:
        yield
    finally:
        monkeypatch.setattr(time, "time", _real_time)


class Performed(lowkiq.Worker):
    """Records what it performs."""

    shards_count = 3
    seen: list[str] = []

    @classmethod
    def perform(cls, payloads_by_id: dict[str, list[object]]) -> None:
        cls.seen += list(payloads_by_id)


@pytest.fixture
def performed(redis_client: object) -> type[Performed]:
    lowkiq.settings.workers = [Performed]
    Performed.seen = []
    return Performed


@pytest.mark.parametrize("offset", [600.0, -600.0], ids=["fast", "slow"])
def test_a_producer_whose_clock_is_off_enqueues_jobs_due_now_on_redis_clock(
    performed: type[Performed], monkeypatch: pytest.MonkeyPatch, offset: float
) -> None:
    before = _real_time()
    with producer_clock(monkeypatch, offset):
        performed.perform_async([{"id": "a", "payload": {"v": 1}}, {"id": 7}])
    after = _real_time()
    jobs = performed.queries().fetch(["a", "7"])
    assert len(jobs) == 2
    for job in jobs:
        [[_, score]] = job["payloads"]
        assert before - SLACK <= job["perform_in"] <= after + SLACK
        assert before - SLACK <= score <= after + SLACK
    assert performed.metrics()["lag"] < 5
    assert drain(performed).performed == 2  # due at once, not in ten minutes
    assert sorted(performed.seen) == ["7", "a"]


def test_explicit_score_and_perform_in_are_kept_as_given(
    performed: type[Performed], monkeypatch: pytest.MonkeyPatch
) -> None:
    later = _real_time() + 3600
    with producer_clock(monkeypatch, 600.0):
        performed.perform_async(
            [
                {"id": "a", "payload": "x", "score": 5, "perform_in": later},
                {"id": "b", "payload": "y", "score": 1.5e9},
            ]
        )
    a, b = performed.queries().fetch(["a", "b"])
    assert (a["payloads"], a["perform_in"]) == ([["x", 5.0]], later)
    assert b["payloads"] == [["y", 1.5e9]]
    assert drain(performed).performed == 1  # "a" waits for its perform_in


def test_equal_payloads_keep_the_smaller_of_a_default_and_a_given_score(
    performed: type[Performed],
) -> None:
    before = _real_time()
    performed.perform_async(
        [
            {"id": "a", "payload": "p"},
            {"id": "a", "payload": "p", "score": 5},  # smaller than now
            {"id": "b", "payload": "p", "score": 4e9},  # larger than now
            {"id": "b", "payload": "p"},
            {"id": "c", "payload": "q"},
            {"id": "c", "payload": "p"},
            {"id": "c", "payload": "r", "score": 3},
        ]
    )
    after = _real_time()
    a, b, c = performed.queries().fetch(["a", "b", "c"])
    assert a["payloads"] == [["p", 5.0]]
    [[payload, score]] = b["payloads"]
    assert payload == "p" and before - SLACK <= score <= after + SLACK
    # Payloads ascending by score: the two given no score in the order given, at Redis's
    # time and the next double after it.
    assert [payload for payload, _ in c["payloads"]] == ["r", "q", "p"]
    assert 0 < c["payloads"][2][1] - c["payloads"][1][1] < 1e-6


def test_a_payload_enqueued_again_without_score_keeps_its_first_time(
    performed: type[Performed],
) -> None:
    performed.perform_async([{"id": "a", "payload": "p"}])
    [first] = performed.queries().fetch(["a"])
    performed.perform_async([{"id": "a", "payload": "p"}, {"id": "a", "payload": "q"}])
    [job] = performed.queries().fetch(["a"])
    assert job["perform_in"] == first["perform_in"]  # rule 2: the queued job keeps it
    assert job["payloads"][0] == first["payloads"][0]
    assert job["payloads"][1][0] == "q" and job["payloads"][1][1] > first["payloads"][0][1]


def test_a_hot_id_given_no_scores_gets_redis_time_for_each_payload(
    performed: type[Performed],
) -> None:
    count = blob.SPILL_PAYLOADS + 10  # past the limit: the payloads get a sorted set
    before = _real_time()
    performed.perform_async([{"id": "hot", "payload": n} for n in range(count)])
    performed.perform_async([{"id": "hot", "payload": "late"}])
    after = _real_time()
    [job] = performed.queries().fetch(["hot"])
    assert len(job["payloads"]) == count + 1
    assert all(before - SLACK <= score <= after + SLACK for _, score in job["payloads"])
    assert job["payloads"][-1][0] == "late"
