"""The works waiting for an executor thread: who is taken first (no Redis)."""

from __future__ import annotations

import queue
from dataclasses import dataclass

import pytest

from lowkiq.runtime.waiting import HALF_LIFE, Waiting


@dataclass
class W:
    queue_name: str
    weight: float = 1.0
    size: int = 1


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_worker_that_started_nothing_lately_goes_before_a_flood_s_queued_works() -> None:
    waiting: Waiting[W] = Waiting(Clock())
    flood = [W("Flood", size=10) for _ in range(3)]
    for work in flood:
        waiting.put_work(work)
    assert waiting.take(0) is flood[0]
    urgent = W("Urgent")
    waiting.put_work(urgent)
    assert waiting.take(0) is urgent  # Flood started 10 batches just now, Urgent none


def test_backlogged_workers_are_taken_in_proportion_to_their_weights() -> None:
    clock = Clock()
    waiting: Waiting[W] = Waiting(clock)
    weights = {"A": 3.0, "B": 1.0}
    taken = {"A": 0, "B": 0}
    for name, weight in weights.items():
        waiting.put_work(W(name, weight))
    for _ in range(400):
        work = waiting.take(0)
        assert isinstance(work, W)
        taken[work.queue_name] += 1
        waiting.put_work(W(work.queue_name, weights[work.queue_name]))  # its backlog goes on
        clock.now += 0.005
    assert 295 <= taken["A"] <= 305 and taken["A"] + taken["B"] == 400, taken


def test_batches_started_fade_by_half_every_half_life() -> None:
    clock = Clock()
    waiting: Waiting[W] = Waiting(clock)
    waiting.put_work(W("A", size=8))
    waiting.take(0)
    clock.now += HALF_LIFE
    assert waiting.lately("A", clock.now) == pytest.approx(4.0)
    clock.now += 2 * HALF_LIFE
    assert waiting.lately("A", clock.now) == pytest.approx(1.0)


def test_calls_go_first_and_a_stop_waits_until_no_work_is_left() -> None:
    waiting: Waiting[W] = Waiting(Clock())
    work = W("A")
    waiting.put_work(work)
    waiting.put_stop()
    calls: list[int] = []
    waiting.put_call(lambda: calls.append(1))
    assert callable(waiting.take(0))
    assert waiting.take(0) is work
    assert waiting.take(0) is None
    with pytest.raises(queue.Empty):
        waiting.take(0.01)
