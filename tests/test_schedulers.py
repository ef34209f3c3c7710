"""Schedulers with fake shards, clock and wait: which shard runs next, and when a thread idles."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from lowkiq.schedulers import build_lag_scheduler, build_seq_scheduler


@dataclass
class FakeHandler:
    name: str
    due: int = 0  # batches left to process
    calls: list[str] = field(default_factory=list)

    def process(self) -> bool:
        self.calls.append(self.name)
        if self.due:
            self.due -= 1
            return True
        return False


@dataclass
class FakeLane:
    handlers: list[FakeHandler]
    heads: list[float | None]
    waits: int = 0
    stop: bool = False
    reads: int = 0
    settled: list[list[str]] = field(default_factory=list)
    rounds: list[list[str]] = field(default_factory=list)

    def due_in(self) -> list[float | None]:
        """Seconds until each head is due, Redis's clock reading 100.0."""
        self.reads += 1
        return [None if head is None else head - 100.0 for head in self.heads]

    def wait(self) -> None:
        self.waits += 1

    def stopping(self) -> bool:
        return self.stop

    def process(self, handlers: list[FakeHandler]) -> int:
        self.rounds.append([h.name for h in handlers])
        return sum(handler.process() for handler in handlers)

    def throttled(self, handlers: list[FakeHandler]) -> int:
        return 0

    def flush_acks(self, keep: list[FakeHandler]) -> None:
        self.settled.append([h.name for h in keep])


def test_lag_gives_each_due_shard_a_batch_oldest_first() -> None:
    calls: list[str] = []
    handlers = [FakeHandler(n, due=1, calls=calls) for n in "abcd"]
    lane = FakeLane(handlers, heads=[95.0, 80.0, 90.0, 101.0])
    step = build_lag_scheduler()(lane)
    step()
    assert calls == ["b", "c", "a"]  # d is not due yet
    assert lane.rounds == [["b", "c", "a"]]  # one round: their pops go out together
    assert lane.waits == 0


def test_lag_reads_once_while_every_shard_gives_a_batch_then_reads_again() -> None:
    calls: list[str] = []
    handlers = [FakeHandler(n, due=2, calls=calls) for n in "abc"]
    lane = FakeLane(handlers, heads=[95.0, 80.0, 90.0])
    step = build_lag_scheduler()(lane)
    step()
    step()  # a backlog: the same order, no read
    assert (calls, lane.reads) == (["b", "c", "a"] * 2, 1)
    assert lane.settled == [["b", "c", "a"]]  # every shard due: every ack rides on its pop
    step()  # nothing left: the round found nothing, the next reads again
    assert (lane.reads, lane.waits) == (1, 1)
    step()
    assert (lane.reads, lane.waits) == (2, 2)


def test_lag_reads_again_after_a_round_where_a_shard_was_not_due() -> None:
    handlers = [FakeHandler(n, due=5) for n in "ab"]
    lane = FakeLane(handlers, heads=[95.0, 101.0])
    step = build_lag_scheduler()(lane)
    step()
    step()
    assert (handlers[0].calls, handlers[1].calls, lane.reads) == (["a", "a"], [], 2)
    assert lane.settled == [["a"], ["a"]]  # b is not due: its waiting ack is settled


def test_lag_waits_after_a_round_that_found_nothing() -> None:
    handlers = [FakeHandler("a"), FakeHandler("b")]
    lane = FakeLane(handlers, heads=[95.0, 90.0])  # stale heads: both pops find nothing
    build_lag_scheduler()(lane)()
    assert (handlers[0].calls, handlers[1].calls, lane.waits) == (["a"], ["b"], 1)


def test_lag_ignores_jobs_scheduled_for_later_and_waits() -> None:
    handlers = [FakeHandler("a"), FakeHandler("b")]
    lane = FakeLane(handlers, heads=[101.0, None])
    build_lag_scheduler()(lane)()
    assert handlers[0].calls == [] and handlers[1].calls == []
    assert lane.waits == 1


def test_lag_with_one_shard_pops_directly_and_waits_when_empty() -> None:
    handler = FakeHandler("a", due=1)
    lane = FakeLane([handler], heads=[None])
    step = build_lag_scheduler()(lane)
    step()
    assert (handler.calls, lane.waits) == (["a"], 0)
    step()
    assert (handler.calls, lane.waits) == (["a", "a"], 1)


def test_seq_cycles_and_waits_only_after_a_whole_idle_cycle() -> None:
    calls: list[str] = []
    handlers = [FakeHandler("a", due=2, calls=calls), FakeHandler("b", calls=calls)]
    lane = FakeLane(handlers, heads=[])
    step = build_seq_scheduler()(lane)
    for _ in range(4):
        step()
    assert calls == ["a", "b", "a", "b"]
    assert lane.waits == 0
    step()  # a: nothing left; with b's miss before it, that is a whole idle cycle
    assert lane.waits == 1


@pytest.mark.parametrize("build", [build_lag_scheduler, build_seq_scheduler])
def test_a_thread_without_shards_only_waits(build: Callable[[], Any]) -> None:
    lane = FakeLane([], heads=[])
    step = build()(lane)
    step()
    step()
    assert lane.waits == 2
