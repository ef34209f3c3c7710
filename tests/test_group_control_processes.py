"""Operating groups at run time with real worker processes: a paused group's jobs stop
starting within a second on every process while the other groups go on, and start again
once resumed; a group's own concurrency cap holds fleet-wide, sampled every 10 ms while
processes are SIGKILLed, and the other groups keep the worker's cap."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator

import pytest
import redis

import lowkiq
from tests.apps.runner import WorkerProcess, eventually


class Tenants(lowkiq.Worker):
    """The app's worker, to enqueue and act from the test."""

    shards_count = 8


@pytest.fixture
def start(redis_url: str, redis_client: redis.Redis) -> Iterator[Callable[..., WorkerProcess]]:
    lowkiq.settings.workers = [Tenants]
    started: list[WorkerProcess] = []

    def start_process(wait: bool = True, **env: str) -> WorkerProcess:
        process = WorkerProcess(
            "-r", "tests/apps/group_control.py", "--threads", "4",
            env={"REDIS_URL": redis_url, **env},
        )  # fmt: skip
        started.append(process)
        if wait:
            process.wait_started()
        return process

    yield start_process
    for process in started:
        process.close()


def enqueue(groups: dict[str, int], sleep: float) -> None:
    Tenants.perform_async(
        [
            {"id": f"{g}{n}", "group": g, "payload": {"g": g, "sleep": sleep}}
            for g, count in groups.items()
            for n in range(count)
        ]
    )


def redis_now(client: redis.Redis) -> float:
    seconds, micros = client.time()
    return seconds + micros / 1e6


def starts(client: redis.Redis, group: str) -> list[float]:
    return [float(s) for s in client.lrange(f"test:starts:{group}", 0, -1)]


def test_a_paused_group_stops_starting_within_a_second_and_the_others_go_on(
    redis_client: redis.Redis, start: Callable[..., WorkerProcess]
) -> None:
    start()
    start()
    enqueue({"A": 3000, "B": 3000}, sleep=0.01)
    eventually(lambda: len(starts(redis_client, "A")) >= 20)
    paused_at = redis_now(redis_client)
    assert Tenants.actions().pause_group("A") is True
    time.sleep(2.5)
    late = [s for s in starts(redis_client, "A") if s > paused_at + 1.0]
    assert late == [], f"{len(late)} job(s) of A started more than 1 s after the pause"
    b_after = [s for s in starts(redis_client, "B") if s > paused_at + 1.0]
    assert len(b_after) > 20  # B went on meanwhile
    assert Tenants.actions().group_state("A").queued > 0  # A's jobs wait, queued
    resumed_at = redis_now(redis_client)
    assert Tenants.actions().resume_group("A") is True
    first = eventually(lambda: [s for s in starts(redis_client, "A") if s > resumed_at], timeout=10)
    assert min(first) - resumed_at < 1.5


def test_a_groups_own_cap_holds_fleet_wide_under_kill_9_and_others_keep_the_default(
    redis_client: redis.Redis, start: Callable[..., WorkerProcess]
) -> None:
    enqueue({"A": 4000, "B": 4000}, sleep=0.03)
    Tenants.actions().group_limits("A", concurrency=1)
    processes = [start(TEST_GROUP_CAP="3") for _ in range(3)]
    peaks = {"A": 0, "B": 0}
    rng = random.Random(7)
    began = time.monotonic()
    next_kill = began + 2.0
    killed = 0
    while time.monotonic() - began < 9.0:
        if time.monotonic() >= next_kill:
            victim = rng.randrange(len(processes))
            processes[victim].kill()
            killed += 1
            processes[victim] = start(wait=False, TEST_GROUP_CAP="3")
            next_kill = time.monotonic() + 2.0
        live = {p.process.pid for p in processes if p.process.poll() is None}
        pipe = redis_client.pipeline(transaction=False)
        for group in peaks:
            pipe.smembers(f"test:running:{group}")
        for group, members in zip(peaks, pipe.execute(), strict=True):
            running = sum(1 for m in members if int(m.split(b":")[0]) in live)
            peaks[group] = max(peaks[group], running)
        time.sleep(0.01)
    assert killed >= 3
    assert peaks["A"] == 1, peaks  # its own cap, reached and never exceeded
    assert peaks["B"] == 3, peaks  # the worker's cap, reached and never exceeded
