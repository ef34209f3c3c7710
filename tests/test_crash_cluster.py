"""Several worker processes, and Redis itself going away: order, exclusivity, nothing lost."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

import lowkiq
from lowkiq.clients.embedded import start_server
from tests.apps.runner import WorkerProcess, eventually


@pytest.fixture
def processes() -> Iterator[list[WorkerProcess]]:
    started: list[WorkerProcess] = []
    yield started
    for process in started:
        process.close()


def test_two_by_node_processes_never_overlap_an_id_and_keep_score_order(
    redis_client: redis.Redis,
    redis_url: str,
    monkeypatch: pytest.MonkeyPatch,
    processes: list[WorkerProcess],
) -> None:
    monkeypatch.setenv("REDIS_URL", redis_url)
    env = {"REDIS_URL": redis_url, "TEST_SHARDS": "8", "TEST_BATCH": "3"}
    for node in ("0", "1"):
        args = ("-r", "tests.apps.recorder", "--nodes", "2", "--node", node, "--threads", "3")
        processes.append(WorkerProcess(*args, env=env))
    for process in processes:
        process.wait_started()
    from tests.apps.recorder import Recorder

    lowkiq.settings.workers = [Recorder]
    ids = [f"order{k}" for k in range(24)]
    versions = range(1, 31)
    for version in versions:
        Recorder.perform_async(
            [{"id": i, "payload": {"v": version, "sleep": 0.001}, "score": version} for i in ids]
        )
        time.sleep(0.005)

    def all_seen() -> bool:
        return all(redis_client.llen(f"test:seen:{i}") >= len(versions) for i in ids)

    eventually(all_seen, timeout=60)
    assert redis_client.lrange("test:overlaps", 0, -1) == []
    for i in ids:
        seen = [int(v) for v in redis_client.lrange(f"test:seen:{i}", 0, -1)]
        assert seen == list(versions), i
    # Each process served its node's shards (the start line names them).
    assert "serve Recorder:0,2,4,6" in processes[0].output()
    assert "serve Recorder:1,3,5,7" in processes[1].output()


def test_redis_stopped_and_restarted_mid_run_loses_nothing(
    redis_client: redis.Redis,
    redis_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    processes: list[WorkerProcess],
) -> None:
    queue_server = start_server(tmp_path / "queue", persistent=True)
    try:
        monkeypatch.setenv("REDIS_URL", queue_server.url)
        monkeypatch.setenv("RECORD_URL", redis_url)
        from tests.apps.recorder import Recorder

        lowkiq.settings.redis = lambda: redis.Redis.from_url(queue_server.url)
        lowkiq.settings.workers = [Recorder]
        worker = WorkerProcess(
            "-r",
            "tests.apps.recorder",
            env={"REDIS_URL": queue_server.url, "RECORD_URL": redis_url, "TEST_POLL": "0.1"},
        )
        processes.append(worker)
        worker.wait_started()
        ids = [f"r{n}" for n in range(300)]
        Recorder.perform_async([{"id": i, "payload": {"v": 1, "sleep": 0.005}} for i in ids])
        eventually(lambda: redis_client.llen("test:finished") >= 30)
        queue_server.stop()
        with pytest.raises(lowkiq.RedisUnavailable):
            Recorder.perform_async([{"id": "during-outage"}])
        time.sleep(1.0)
        queue_server = start_server(tmp_path / "queue", persistent=True)
        done = {b.decode() for b in redis_client.lrange("test:finished", 0, -1)}
        eventually(
            lambda: (
                done.update(b.decode() for b in redis_client.lrange("test:finished", 0, -1))
                or done >= set(ids)
            ),
            timeout=60,
        )
        assert worker.process.poll() is None
        output = worker.output()
        assert output.count("dispatcher: Redis error") <= 5  # once per thread
        assert "dispatcher: works again" in output
        eventually(lambda: Recorder.metrics()["busy"] == 0 and Recorder.metrics()["length"] == 0)
    finally:
        queue_server.stop()
