"""Real `lowkiq worker` processes: crashes, signals and restarts never lose a job."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable

import pytest
import redis

from tests.apps.runner import WorkerProcess, eventually


def finished(client: redis.Redis) -> set[str]:
    return {item.decode() for item in client.lrange("test:finished", 0, -1)}


def test_sigterm_during_a_batch_finishes_it_and_exits_0(
    workers: Callable[..., WorkerProcess], recorder: type, redis_client: redis.Redis
) -> None:
    worker = workers()
    recorder.perform_async([{"id": "slow", "payload": {"sleep": 1.0}}])
    eventually(lambda: redis_client.lrange("test:started", 0, -1) == [b"slow"])
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    assert finished(redis_client) == {"slow"}
    metrics = recorder.metrics()
    assert (metrics["processed"], metrics["busy"], metrics["length"]) == (1, 0, 0)
    assert "TERM: stopping after the running batches" in worker.output()


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM])
def test_a_second_int_or_term_exits_at_once_and_the_batch_is_restored_later(
    workers: Callable[..., WorkerProcess],
    recorder: type,
    redis_client: redis.Redis,
    stop: signal.Signals,
) -> None:
    worker = workers()
    recorder.perform_async([{"id": "long", "payload": {"sleep": 30}}])
    eventually(lambda: redis_client.lrange("test:started", 0, -1) == [b"long"])
    worker.signal(stop)
    time.sleep(0.2)
    worker.signal(stop)
    assert worker.wait(10) == 128 + stop
    assert recorder.metrics()["busy"] == 1
    redis_client.delete("test:running:long")
    workers()  # restores the batch; it starts again
    eventually(lambda: redis_client.llen("test:started") == 2)


def test_a_process_dying_mid_batch_is_restored_on_restart(
    workers: Callable[..., WorkerProcess], recorder: type, redis_client: redis.Redis
) -> None:
    worker = workers()
    recorder.perform_async([{"id": "crash", "payload": {"exit_once": "test:crashed", "v": 1}}])
    assert worker.wait() == 3
    assert recorder.metrics()["busy"] == 1
    redis_client.delete("test:running:crash")
    workers()
    eventually(lambda: finished(redis_client) == {"crash"})
    assert redis_client.lrange("test:seen:crash", 0, -1) == [b"1"]


def test_sigkill_with_a_thousand_jobs_in_flight_loses_nothing(
    workers: Callable[..., WorkerProcess], recorder: type, redis_client: redis.Redis
) -> None:
    ids = [f"job{n}" for n in range(1000)]
    recorder.perform_async([{"id": i, "payload": {"v": 1, "sleep": 0.002}} for i in ids])
    worker = workers(TEST_BATCH="10")
    eventually(lambda: redis_client.llen("test:finished") >= 100)
    worker.kill()
    assert len(finished(redis_client)) < 1000
    redis_client.delete(*redis_client.keys("test:running:*") or ["none"])
    workers(TEST_BATCH="10")
    eventually(lambda: finished(redis_client) == set(ids), timeout=60)
    eventually(lambda: recorder.metrics()["busy"] == 0)


def test_ttin_writes_every_threads_stack_to_the_announced_file(
    workers: Callable[..., WorkerProcess],
) -> None:
    worker = workers()
    line = next(line for line in worker.output().splitlines() if "TTIN" in line)
    path = line.rsplit(" ", 1)[-1]
    worker.signal(signal.SIGTTIN)
    text = eventually(lambda: _read(path))
    os.unlink(path)
    assert "lowkiq-0" in text and "MainThread" in text
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0


def _read(path: str) -> str:
    try:
        with open(path) as file:
            return file.read()
    except FileNotFoundError:
        return ""
