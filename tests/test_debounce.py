"""A trailing-edge debounce with a real worker process: ``merge_perform_in = "latest"``
and ``delay``, "run 2 s after the last change"."""

from __future__ import annotations

import time

import pytest
import redis

from tests.apps.runner import WorkerProcess, eventually


def redis_now(client: redis.Redis) -> float:
    seconds, micros = client.time()
    return seconds + micros / 1e6


def test_three_enqueues_a_second_apart_with_delay_2_run_once_2_s_after_the_last(
    redis_client: redis.Redis, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REDIS_URL", redis_url)
    from tests.apps.debounced import Debounced

    worker = WorkerProcess("-r", "tests/apps/debounced.py", env={"REDIS_URL": redis_url})
    try:
        worker.wait_started()
        for n in range(3):
            if n:
                time.sleep(1.0)
            Debounced.perform_async([{"id": "doc", "payload": {"v": n}, "delay": 2}])
            last = redis_now(redis_client)
        assert not redis_client.exists("test:started_at:doc")  # not run before its delay
        eventually(lambda: redis_client.llen("test:finished"), timeout=10)
        time.sleep(1.5)  # no second run follows
        started = [float(at) for at in redis_client.lrange("test:started_at:doc", 0, -1)]
        assert len(started) == 1
        assert last + 2 - 0.05 <= started[0] <= last + 2 + 0.6
        assert [int(v) for v in redis_client.lrange("test:seen:doc", 0, -1)] == [0, 1, 2]
    finally:
        worker.close()
