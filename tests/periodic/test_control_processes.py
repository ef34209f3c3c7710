"""Schedules changed at run time with three real ``lowkiq worker`` processes, on a Redis
server and on a 3-master Redis Cluster: a pause, a new period, an added and a removed
schedule are obeyed by every process, and each tick is still enqueued once across them
(tests/periodic/runtime_app.py)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta

import pytest
import redis

import lowkiq
from lowkiq.clients.connection import Client
from lowkiq.periodic import control
from lowkiq.storage import schedules as store
from lowkiq.storage.queue import Queue
from tests.apps.runner import WorkerProcess, eventually
from tests.both_redis import server_or_cluster_client  # noqa: F401 - the fixture


class Ticker(lowkiq.Worker):
    """The app's worker, as the test process names it (same class and queue name)."""

    shards_count = 2


@pytest.fixture
def fleet(
    request: pytest.FixtureRequest, redis_client: Client, redis_url: str
) -> Iterator[list[WorkerProcess]]:
    lowkiq.settings.workers = [Ticker]
    lowkiq.settings.schedules = [lowkiq.Schedule(Ticker, id="tick", every=timedelta(seconds=1))]
    if isinstance(redis_client, redis.RedisCluster):
        cluster_url = request.getfixturevalue("redis_cluster").url
        redis_url = cluster_url.replace("redis://", "redis+cluster://")
    processes = [
        WorkerProcess("-r", "tests/periodic/runtime_app.py", env={"REDIS_URL": redis_url})
        for _ in range(3)
    ]
    try:
        for process in processes:
            process.wait_started()
        yield processes
    finally:
        for process in processes:
            process.close()


def redis_ms(client: Client) -> int:
    seconds, micros = client.time()
    return seconds * 1000 + micros // 1000


def log_of(queue: Queue, name: str) -> list[store.Enqueue]:
    """The schedule's enqueues by its ticks, oldest first."""
    return [e for e in reversed(store.read_state(queue, name).log) if e.kind == "tick"]


def assert_once_each(ticks: list[int], period_ms: int) -> None:
    """Every tick of the period between the first and the last, each once."""
    assert ticks == list(range(ticks[0], ticks[-1] + period_ms, period_ms)), ticks


def test_pause_change_add_and_remove_are_obeyed_by_every_process_once_per_tick(fleet, redis_client):
    queue = Queue(redis_client, "Ticker", 2)
    eventually(lambda: len(log_of(queue, "tick")) >= 3)

    # A new period: from the first 2-s tick after the change, on every process, once.
    control.change("tick", every=2)
    changed_at = redis_ms(redis_client)
    eventually(lambda: len([e for e in log_of(queue, "tick") if e.tick > changed_at]) >= 4)
    after = [e.tick for e in log_of(queue, "tick") if e.tick > changed_at]
    assert all(tick % 2000 == 0 for tick in after), after
    assert_once_each(after, 2000)
    assert len({e.by for e in log_of(queue, "tick")}) >= 1

    # Paused: no tick passed once pause() returned, by any process.
    control.pause("tick")
    paused_at = redis_ms(redis_client)
    runs = store.read_state(queue, "tick").runs
    time.sleep(4.5)
    assert store.read_state(queue, "tick").runs == runs
    assert all(e.enqueued_at <= paused_at for e in log_of(queue, "tick"))

    # Resumed: from the first tick after now; the paused ticks are not caught up.
    control.resume("tick")
    resumed_at = redis_ms(redis_client)
    eventually(lambda: len([e for e in log_of(queue, "tick") if e.tick > resumed_at]) >= 2)
    again = [e.tick for e in log_of(queue, "tick") if e.enqueued_at > paused_at]
    assert again[0] > resumed_at, (again, resumed_at)
    assert_once_each(again, 2000)

    # Added at run time: every process runs it, each tick once.
    control.add("added", "Ticker", every=1, payload={"from": "run time"})
    added_at = redis_ms(redis_client)
    eventually(lambda: len(log_of(queue, "added")) >= 4)
    added = [e.tick for e in log_of(queue, "added")]
    assert added[0] > added_at
    assert_once_each(added, 1000)
    assert len({e.by for e in log_of(queue, "added")}) >= 1

    # Removed: no more ticks.
    control.remove("added")
    removed_at = redis_ms(redis_client)
    runs = store.read_state(queue, "added").runs
    time.sleep(3)
    assert store.read_state(queue, "added").runs == runs
    assert all(e.enqueued_at <= removed_at for e in log_of(queue, "added"))

    for process in fleet:
        assert process.process.poll() is None, process.output()


def test_a_schedule_added_at_run_time_runs_on_a_process_whose_app_declares_none(
    request: pytest.FixtureRequest, redis_client: Client, redis_url: str
) -> None:
    lowkiq.settings.workers = [Ticker]
    lowkiq.settings.schedules = []
    if isinstance(redis_client, redis.RedisCluster):
        cluster_url = request.getfixturevalue("redis_cluster").url
        redis_url = cluster_url.replace("redis://", "redis+cluster://")
    process = WorkerProcess(
        "-r",
        "tests/periodic/runtime_app.py",
        env={"REDIS_URL": redis_url, "TEST_NO_SCHEDULES": "1"},
    )
    try:
        process.wait_started()
        control.add("later", Ticker, every=timedelta(seconds=1))
        queue = Ticker.queue(redis_client)
        eventually(lambda: len(log_of(queue, "later")) >= 3, 15)
        ticks = [e.tick for e in log_of(queue, "later")]
        assert_once_each(ticks, 1000)
    finally:
        process.close()
        lowkiq.settings.schedules = []
