"""Periodic jobs with real ``lowkiq worker`` processes: every tick enqueued exactly once
across processes that are stopped, killed and resumed; missed ticks caught up by policy."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator

import pytest
import redis

from lowkiq.storage import schedules as store
from lowkiq.storage.queue import Queue
from tests.apps.runner import WorkerProcess, eventually

HOUR = 3_600_000


@pytest.fixture
def start(redis_client: redis.Redis, redis_url: str) -> Iterator:
    started: list[WorkerProcess] = []

    def start_one() -> WorkerProcess:
        process = WorkerProcess("-r", "tests/apps/periodic_app.py", env={"REDIS_URL": redis_url})
        started.append(process)
        return process

    yield start_one
    for process in started:
        if process.process.poll() is None:
            process.signal(signal.SIGCONT)
        process.close()


def performed(client: redis.Redis, schedule_id: str) -> list[int]:
    return [int(item) for item in client.lrange(f"test:performed:{schedule_id}", 0, -1)]


def test_every_tick_is_enqueued_once_while_processes_are_stopped_and_killed(start, redis_client):
    processes = [start() for _ in range(3)]
    for process in processes:
        process.wait_started()
    by_pid = {process.process.pid: process for process in processes}
    queue = Queue(redis_client, "Ticker", 2)

    def claimer() -> WorkerProcess:
        """The process that passed the latest tick."""
        latest = store.read_state(queue, "tick").log[0]
        return by_pid[int(latest.by.rsplit(":", 1)[1])]

    eventually(lambda: store.read_state(queue, "tick").runs >= 2)
    # Every process stopped for 3 s, past its 2-s lease; they resume together.
    for process in processes:
        process.signal(signal.SIGSTOP)
    time.sleep(3)
    for process in processes:
        process.signal(signal.SIGCONT)
    time.sleep(2)
    killed = claimer()
    killed.kill()
    killed_at = store.read_state(queue, "tick").log[0].tick
    time.sleep(2)
    stopped = claimer()
    assert stopped is not killed
    stopped.signal(signal.SIGSTOP)  # stays stopped: its lease runs out
    stopped_at = store.read_state(queue, "tick").log[0].tick
    time.sleep(4)
    state = store.read_state(queue, "tick")
    ticks = sorted(entry.tick for entry in state.log)
    assert len(ticks) == len(set(ticks)) == state.runs, "a tick was enqueued twice"
    assert ticks == list(range(ticks[0], ticks[-1] + 1000, 1000)), "a tick was missed"
    assert len(ticks) >= 12
    seconds, _ = redis_client.time()
    assert ticks[-1] >= seconds * 1000 - 2000, "ticks stopped coming"
    killed_name = f":{killed.process.pid}"
    stopped_name = f":{stopped.process.pid}"
    for entry in state.log:
        assert not (entry.tick > killed_at and entry.by.endswith(killed_name))
        assert not (entry.tick > stopped_at + 1000 and entry.by.endswith(stopped_name))
    eventually(lambda: set(ticks) <= set(performed(redis_client, "tick")), timeout=15)


def test_missed_ticks_are_caught_up_by_each_policy(start, redis_client):
    queue = Queue(redis_client, "Ticker", 2)
    seconds, _ = redis_client.time()
    if seconds % 3600 < 65:  # the latest hour mark must be a missed tick, not an on-time one
        time.sleep(66 - seconds % 3600)
        seconds, _ = redis_client.time()
    newest = seconds * 1000 // HOUR * HOUR
    for policy in ("none", "last", "all"):
        # The last tick passed 5 hours before the newest: 5 hourly ticks were missed.
        store.pass_ticks(queue, f"catch-{policy}", None, newest - 5 * HOUR, [])
    process = start()
    process.wait_started()
    missed = [newest - hours * HOUR for hours in (4, 3, 2, 1, 0)]
    eventually(lambda: sorted(performed(redis_client, "catch-all")) == missed, timeout=15)
    eventually(lambda: performed(redis_client, "catch-last") == [newest])
    assert performed(redis_client, "catch-none") == []
    for policy in ("none", "last", "all"):
        assert store.read_state(queue, f"catch-{policy}").last == newest
