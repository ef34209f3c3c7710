"""``Worker.weight`` with a real ``lowkiq worker`` process: two workers with backlogs
share its threads in proportion to their weights, whatever their shard counts."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest
import redis

import lowkiq
from tests.apps.runner import WorkerProcess, eventually

APP = "tests/apps/weighted.py"


@pytest.fixture
def weighted(
    redis_client: redis.Redis, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[..., tuple[type, type]]]:
    """``start(light=3000, threads="2", **env)``: the app's two workers, Heavy with a
    backlog of 3,000 jobs and Light of ``light``, and a `lowkiq worker` process with
    ``threads`` threads serving both."""
    started: list[WorkerProcess] = []

    def start(light: int = 3000, threads: str = "2", **env: str) -> tuple[type, type]:
        monkeypatch.setenv("REDIS_URL", redis_url)
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        import tests.apps.weighted as app

        heavy = app.Heavy
        heavy.perform_async([{"id": str(n)} for n in range(3000)])
        if light:
            app.Light.perform_async([{"id": str(n)} for n in range(light)])
        process = WorkerProcess(
            "-r", APP, "--threads", threads, env={"REDIS_URL": redis_url, **env}
        )
        started.append(process)
        process.wait_started()
        return heavy, app.Light

    yield start
    for process in started:
        process.close()
    lowkiq.settings.workers = []


def started_by(redis_client: redis.Redis, first: int, count: int) -> dict[str, int]:
    """Batches each worker started among the recorded starts ``first`` to ``first + count``."""
    rows = redis_client.lrange("test:starts", first, first + count - 1)
    counts = {"Heavy": 0, "Light": 0}
    for row in rows:
        counts[row.decode().split(" ")[1]] += 1
    return counts


def test_backlogged_workers_start_batches_in_proportion_to_their_weights(
    redis_client: redis.Redis, weighted: Callable[..., tuple[type, type]]
) -> None:
    weighted()  # Heavy: weight 3, 4 shards; Light: weight 1, 8 shards
    eventually(lambda: redis_client.llen("test:starts") >= 1400, 60, interval=0.2)
    # After the first rounds (the process starting), while both have backlogs.
    counts = started_by(redis_client, 200, 1200)
    share = counts["Heavy"] / (counts["Heavy"] + counts["Light"])
    assert 0.75 * 0.9 <= share <= 0.75 * 1.1, counts


def test_equal_weights_share_equally_though_one_worker_has_twice_the_shards(
    redis_client: redis.Redis, weighted: Callable[..., tuple[type, type]]
) -> None:
    weighted(TEST_HEAVY_WEIGHT="1")
    eventually(lambda: redis_client.llen("test:starts") >= 1400, 60, interval=0.2)
    counts = started_by(redis_client, 200, 1200)
    share = counts["Heavy"] / (counts["Heavy"] + counts["Light"])
    assert 0.45 <= share <= 0.55, counts


def test_a_worker_with_no_batch_in_flight_starts_next_beside_a_flood_that_fills_the_threads(
    redis_client: redis.Redis, weighted: Callable[..., tuple[type, type]]
) -> None:
    # One thread; each Heavy batch takes 0.1 s, so each pop takes one batch, and the
    # process holds two of them (one running, one waiting for the thread).
    _, light = weighted(light=0, threads="1", **FLOOD)
    assert_starts_next(redis_client, light)


#: The Heavy flood of :func:`assert_starts_next`: each batch takes 0.1 s, so each pop takes
#: one batch, and a process of one thread holds two (one running, one waiting).
FLOOD = {"TEST_SLEEP": "0.1", "TEST_HEAVY_WEIGHT": "1"}


def assert_starts_next(record: redis.Redis, light: type[lowkiq.Worker]) -> None:
    """Five times, a job of ``light`` (no batch in flight) beside Heavy's flood: the running
    Heavy batch ends, and the free thread takes Light's batch, not Heavy's waiting one.
    (One Heavy start may slip in when the enqueue meets a batch's end; without a place
    for Light, one always does.)"""
    eventually(lambda: record.llen("test:starts") >= 3, 30, interval=0.05)
    heavy_first = []
    for n in range(5):
        before = record.llen("test:starts")
        light.perform_async([{"id": f"urgent{n}"}])

        def started(first: int = before) -> list[str]:
            return [row.decode().split(" ")[1] for row in record.lrange("test:starts", first, -1)]

        eventually(lambda: "Light" in started(), 10)  # noqa: B023 - called in this turn
        heavy_first.append(started().index("Light"))
        # Light's batch ends (0.1 s), and the next enqueue meets a Heavy batch elsewhere.
        time.sleep(0.15 + 0.03 * n)
    assert max(heavy_first) <= 1 and heavy_first.count(0) >= 2, heavy_first
