"""``delay`` (seconds from now on Redis's clock) and ``Worker.merge_perform_in``: how an
enqueue onto a queued id sets its perform_in (``keep``, SPEC §3 rule 2; ``latest``, a
trailing-edge debounce; ``max``, the later of the two)."""

from __future__ import annotations

import time
from typing import Any

import pytest

import lowkiq
from lowkiq.errors import ConfigurationError, InvalidJob
from lowkiq.testing import drain

#: Redis TIME has microseconds; a float sum of its parts may round below a reading
#: taken just before it.
SLACK = 0.001
T = 2_000_000_000.0


def make_worker(mode: str) -> type[lowkiq.Worker]:
    """A one-shard worker with ``merge_perform_in = mode``, registered."""

    class Debounced(lowkiq.Worker):
        shards_count = 1
        merge_perform_in = mode  # type: ignore[assignment]
        performed: list[str] = []

        @classmethod
        def perform(cls, payloads_by_id: dict[str, list[Any]]) -> None:
            cls.performed += list(payloads_by_id)

    lowkiq.settings.workers = [Debounced]
    return Debounced


def perform_in(worker: type[lowkiq.Worker], job_id: str = "a") -> float:
    [job] = worker.queries().fetch([job_id])
    return float(job["perform_in"])


def test_a_delay_is_counted_from_redis_clock_not_the_producers(
    redis_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    worker = make_worker("keep")
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + 600)
    before = real()
    worker.perform_async([{"id": "a", "delay": 30}, {"id": "b", "delay": 0}])
    after = real()
    monkeypatch.setattr(time, "time", real)
    assert before + 30 - SLACK <= perform_in(worker, "a") <= after + 30 + SLACK
    assert before - SLACK <= perform_in(worker, "b") <= after + SLACK
    assert drain(worker).performed == 1  # "b" is due, "a" waits
    assert worker.performed == ["b"]


@pytest.mark.parametrize(
    ("job", "says"),
    [
        ({"id": 1, "delay": 5, "perform_in": T}, "cannot go with perform_in"),
        ({"id": 1, "delay": -1}, "from 0 to"),
        ({"id": 1, "delay": "5"}, "must be a number"),
    ],
)
def test_a_bad_delay_is_refused_and_nothing_is_enqueued(
    redis_client: Any, job: dict[str, Any], says: str
) -> None:
    worker = make_worker("keep")
    with pytest.raises(InvalidJob) as caught:
        worker.perform_async([{"id": "good"}, job])
    assert (caught.value.index, caught.value.field) == (1, "delay")
    assert says in str(caught.value)
    assert worker.metrics()["length"] == 0


def test_a_perform_in_that_is_a_number_of_seconds_names_both_ways(redis_client: Any) -> None:
    worker = make_worker("keep")
    with pytest.raises(InvalidJob, match=r'time\.time\(\) \+ 60 \(or "delay": 60'):
        worker.perform_async([{"id": 1, "perform_in": 60}])


@pytest.mark.parametrize(
    ("mode", "after_earlier", "after_later"),
    [("keep", T + 100, T + 100), ("latest", T + 10, T + 200), ("max", T + 100, T + 200)],
)
def test_merge_perform_in_sets_the_perform_in_of_a_queued_id(
    redis_client: Any, mode: str, after_earlier: float, after_later: float
) -> None:
    worker = make_worker(mode)
    worker.perform_async([{"id": "a", "payload": 1, "perform_in": T + 100}])
    worker.perform_async([{"id": "a", "payload": 2, "perform_in": T + 10}])
    assert perform_in(worker) == after_earlier
    worker.perform_async([{"id": "a", "payload": 3, "perform_in": T + 200}])
    assert perform_in(worker) == after_later
    [job] = worker.queries().fetch(["a"])
    assert [payload for payload, _ in job["payloads"]] == [1, 2, 3]  # payloads always merge
    assert job["retry_count"] == -1


def test_latest_moves_a_waiting_job_to_now_and_it_runs(redis_client: Any) -> None:
    worker = make_worker("latest")
    worker.perform_async([{"id": "a", "delay": 3600}])
    assert drain(worker).performed == 0
    worker.perform_async([{"id": "a", "payload": "again"}])
    assert drain(worker).performed == 1
    assert worker.performed == ["a"]


def test_latest_with_a_delay_debounces_on_redis_clock(redis_client: Any) -> None:
    worker = make_worker("latest")
    worker.perform_async([{"id": "a", "delay": 5}])
    first = perform_in(worker)
    time.sleep(0.05)
    worker.perform_async([{"id": "a", "delay": 5}, {"id": "b", "delay": 5}])
    assert perform_in(worker) >= first + 0.04  # moved on with the clock
    assert perform_in(worker, "b") - perform_in(worker) < 0.01


def test_a_bad_merge_perform_in_is_refused_at_class_definition() -> None:
    with pytest.raises(ConfigurationError, match=r"Bad\.merge_perform_in must be one of"):

        class Bad(lowkiq.Worker):
            merge_perform_in = "newest"  # type: ignore[assignment]
