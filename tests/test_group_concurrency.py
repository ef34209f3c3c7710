"""``Worker.group_concurrency`` with real worker processes: at most N batches of one group
run at once across the processes, and every job runs; without the cap the same jobs
run more of a group at once."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import redis

import lowkiq
from tests.apps.runner import WorkerProcess, eventually

GROUPS = ("A", "B", "C")
JOBS = 24  # per group


class Capped(lowkiq.Worker):
    """The app's worker, to enqueue from the test."""

    shards_count = 6


@pytest.fixture
def start(
    redis_url: str, redis_client: redis.Redis
) -> Iterator[Callable[..., list[WorkerProcess]]]:
    lowkiq.settings.workers = [Capped]
    started: list[WorkerProcess] = []

    def start_processes(count: int, **env: str) -> list[WorkerProcess]:
        for _ in range(count):
            process = WorkerProcess(
                "-r", "tests/apps/capped.py", "--threads", "4",
                env={"REDIS_URL": redis_url, **env},
            )  # fmt: skip
            started.append(process)
        for process in started:
            process.wait_started()
        return started

    yield start_processes
    for process in started:
        process.close()


def enqueue_groups() -> None:
    """:data:`JOBS` jobs of each group, each sleeping 50 ms."""
    Capped.perform_async(
        [
            {"id": f"{g}{n}", "group": g, "payload": {"g": g, "sleep": 0.05}}
            for g in GROUPS
            for n in range(JOBS)
        ]
    )


def peaks(redis_client: redis.Redis) -> dict[str, int]:
    """The most batches of each group that ran at once."""
    return {g: max(int(p) for p in redis_client.lrange(f"test:peaks:{g}", 0, -1)) for g in GROUPS}


def run(
    redis_client: redis.Redis, start: Callable[..., list[WorkerProcess]], **env: str
) -> dict[str, int]:
    """Enqueue the groups' jobs, run two processes until all are done; the peak of running
    batches of each group."""
    start(2, **env)
    enqueue_groups()
    eventually(lambda: redis_client.llen("test:finished") >= len(GROUPS) * JOBS, timeout=60)
    return peaks(redis_client)


def test_at_most_group_concurrency_batches_of_a_group_run_at_once(
    redis_client: redis.Redis, start: Callable[..., list[WorkerProcess]]
) -> None:
    peaks = run(redis_client, start, TEST_GROUP_CAP="2")
    assert max(peaks.values()) <= 2, peaks
    assert 2 in peaks.values(), peaks  # the cap was reached, not only respected
    assert sorted(redis_client.lrange("test:finished", 0, -1)) == sorted(
        f"{g}{n}".encode() for g in GROUPS for n in range(JOBS)
    )
    assert Capped.metrics()["length"] == 0
    held = Capped.queue().keys.group_claims_prefix + "held:*"
    eventually(lambda: redis_client.keys(held) == [])  # every place released


def test_without_a_cap_the_same_jobs_run_more_of_a_group_at_once(
    redis_client: redis.Redis, start: Callable[..., list[WorkerProcess]]
) -> None:
    peaks = run(redis_client, start)
    assert max(peaks.values()) > 2, peaks


def starts(redis_client: redis.Redis, group: str) -> list[float]:
    """When each job of ``group`` started (Redis's clock), in order."""
    return sorted(float(t) for t in redis_client.lrange(f"test:starts:{group}", 0, -1))


def test_a_per_group_rate_limit_holds_each_group_to_its_rate(
    redis_client: redis.Redis, start: Callable[..., list[WorkerProcess]]
) -> None:
    start(2, TEST_GROUP_RATE="10")
    Capped.perform_async(
        [{"id": f"{g}{n}", "group": g, "payload": {"g": g}} for g in GROUPS for n in range(25)]
        + [{"id": f"plain{n}", "payload": {"g": "none"}} for n in range(25)]
    )
    eventually(lambda: redis_client.llen("test:finished") >= 4 * 25, timeout=60)
    every = []
    for group in (*GROUPS, "none"):  # the jobs without a group are one group too
        times = starts(redis_client, group)
        every += times
        assert len(times) == 25
        for first in times:  # any second holds at most 10 starts, and the burst of 1
            assert sum(1 for t in times if first <= t < first + 1.0) <= 11, (group, times)
    busiest = max(sum(1 for t in every if first <= t < first + 1.0) for first in every)
    assert busiest > 11  # the worker as a whole is not limited
