"""``Worker.weight`` with a real ``lowkiq worker`` process: two workers with backlogs
share its threads in proportion to their weights, whatever their shard counts."""

from __future__ import annotations

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
    """``start(**env)``: the app's two workers, each with a backlog of 3,000 jobs, and a
    `lowkiq worker` process with two threads serving both."""
    started: list[WorkerProcess] = []

    def start(**env: str) -> tuple[type, type]:
        monkeypatch.setenv("REDIS_URL", redis_url)
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        import tests.apps.weighted as app

        heavy, light = app.Heavy, app.Light
        for worker in (heavy, light):
            worker.perform_async([{"id": str(n)} for n in range(3000)])
        process = WorkerProcess("-r", APP, "--threads", "2", env={"REDIS_URL": redis_url, **env})
        started.append(process)
        process.wait_started()
        return heavy, light

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
