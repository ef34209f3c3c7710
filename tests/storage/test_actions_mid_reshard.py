"""An action on queued ids changes every one of them while a reshard runs: ids still in
their old shard, in an old shard the reshard retired (not read yet, or read and being
moved), already moved, and ids with jobs in both their old and their new shard; on a
server and a cluster.  The reshard is driven step by step: the action starts while the
second chunk of old shard 0 is read and not yet moved."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from storage_support import NOW

import lowkiq
from lowkiq.ownership import resharding
from lowkiq.storage.layout import Layout
from lowkiq.storage.queue import Queue

IDS = [f"job{n:03d}" for n in range(200)]
#: Ids enqueued again once the reshard began: a job in their new shard too.
LATE = IDS[1::10]
LATER = NOW + 3600  # not due: no job of these runs meanwhile, and perform_now has work


class Resharded(lowkiq.Worker):
    """Four shards, resharded to seven."""

    shards_count = 4


class Target(lowkiq.Worker):
    """Where moved jobs go."""

    shards_count = 2


@pytest.fixture
def workers(redis_client: Any) -> type[lowkiq.Worker]:
    lowkiq.settings.workers = [Resharded, Target]
    Resharded.perform_async([{"id": i, "payload": 1, "perform_in": LATER} for i in IDS])
    return Resharded


@contextmanager
def acting_mid_move(action: Callable[[], int]) -> Iterator[list[Any]]:
    """Reshard 4 -> 7 shards, 10 jobs a chunk; while the second chunk of old shard 0 is
    read and not yet moved (its ids marked moving), enqueue LATE again and run ``action``
    in a thread; yields ``[its result]`` once the reshard is done."""
    result: list[Any] = []
    calls: list[int] = []
    threads: list[threading.Thread] = []
    original = resharding._Resharding._move

    def move(self: Any, old: int, records: list[Any]) -> None:
        calls.append(old)
        if old == 0 and calls.count(0) == 2:
            Resharded.queue().refresh_layout()
            Resharded.perform_async([{"id": i, "payload": 2, "perform_in": LATER} for i in LATE])

            def act() -> None:
                try:
                    result.append(action())
                except Exception as exc:  # noqa: BLE001 - reported by the test
                    result.append(exc)

            thread = threading.Thread(target=act)
            thread.start()
            threads.append(thread)
            time.sleep(0.5)  # it acts on the rest and waits for the marked ids
        original(self, old, records)

    resharding_chunk = resharding.CHUNK
    resharding.CHUNK = 10
    resharding._Resharding._move = move  # type: ignore[method-assign]
    try:
        resharding.reshard(Resharded.queue(), 7)
        assert len(threads) == 1, calls
        threads[0].join(60)
        yield result
    finally:
        resharding.CHUNK = resharding_chunk
        resharding._Resharding._move = original  # type: ignore[method-assign]


def queued(queue: Queue) -> list[Any]:
    return Resharded.queries().fetch(IDS)


def test_kill_mid_reshard_kills_every_queued_id(workers: type[lowkiq.Worker]) -> None:
    with acting_mid_move(lambda: workers.actions().kill(IDS)) as result:
        pass
    assert result == [len(IDS)]
    assert workers.queue().refresh_layout() == Layout(4, 7)
    assert queued(workers.queue()) == []
    dead = workers.queries().morgue_fetch(IDS)
    assert sorted(job["id"] for job in dead) == IDS
    late = {job["id"]: job for job in dead if job["id"] in LATE}
    assert all(sorted(p for p, _ in job["payloads"]) == [1, 2] for job in late.values())


def test_delete_mid_reshard_deletes_every_queued_id(workers: type[lowkiq.Worker]) -> None:
    with acting_mid_move(lambda: workers.actions().delete(IDS)) as result:
        pass
    assert result == [len(IDS)]
    assert queued(workers.queue()) == []
    assert workers.metrics()["length"] == 0


def test_perform_now_mid_reshard_makes_every_queued_id_due(
    workers: type[lowkiq.Worker], redis_client: Any
) -> None:
    with acting_mid_move(lambda: workers.actions().perform_now(IDS)) as result:
        pass
    assert result == [len(IDS)]
    seconds, micros = redis_client.time()
    jobs = queued(workers.queue())
    assert sorted(job["id"] for job in jobs) == IDS
    assert all(job["perform_in"] <= seconds + micros / 1e6 for job in jobs)


def test_move_mid_reshard_moves_every_queued_id(workers: type[lowkiq.Worker]) -> None:
    with acting_mid_move(lambda: workers.actions().move(IDS, to=Target)) as result:
        pass
    assert result == [len(IDS)]
    assert queued(workers.queue()) == []
    moved = Target.queries().fetch(IDS)
    assert sorted(job["id"] for job in moved) == IDS
    late = [job for job in moved if job["id"] in LATE]
    assert all(sorted(p for p, _ in job["payloads"]) == [1, 2] for job in late)
