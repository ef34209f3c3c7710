"""One clock: a worker whose host clock is off runs jobs on Redis's time (due-ness, retry
times), neither early nor late."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import redis

from tests.apps.runner import WorkerProcess, eventually


def redis_now(client: redis.Redis) -> float:
    seconds, micros = client.time()
    return seconds + micros / 1e6


def started_at(client: redis.Redis, job_id: str) -> list[float]:
    return [float(at) for at in client.lrange(f"test:started_at:{job_id}", 0, -1)]


@pytest.mark.parametrize("skew", [30.0, -30.0])
def test_a_skewed_worker_starts_scheduled_jobs_and_retries_on_redis_time(
    workers: Callable[..., WorkerProcess], recorder: type, redis_client: redis.Redis, skew: float
) -> None:
    workers(TEST_CLOCK_SKEW=str(skew), TEST_SHARDS="1", TEST_POLL="0.5")
    due = redis_now(redis_client) + 2.0  # the producer's perform_in, on Redis's clock here
    recorder.perform_async(
        [
            {"id": "later", "payload": {"v": 1}, "perform_in": due},
            {"id": "retried", "payload": {"fail_once": "test:failed", "v": 2}},
        ]
    )
    # The failing job's retry comes retry_in (0.1 s) later on Redis's clock: a worker
    # 30 s fast would have scheduled it 30 s late.
    eventually(lambda: len(started_at(redis_client, "retried")) == 2, timeout=10)
    first, retry = started_at(redis_client, "retried")
    assert 0.1 <= retry - first < 2.0
    # The scheduled job starts when Redis's clock reaches it: not 30 s early (a fast host),
    # not 30 s late (a slow one).
    eventually(lambda: started_at(redis_client, "later"), timeout=10)
    (start,) = started_at(redis_client, "later")
    assert due <= start < due + 1.5
