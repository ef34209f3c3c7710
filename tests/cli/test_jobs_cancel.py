"""``lowkiq jobs cancel WORKER IDS...`` run as a real process, while a real ``lowkiq worker``
process performs the job (``tests/apps/cancellable.py``): the perform is told to stop
and its job ends as cancelled; no ids is a one-line error."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
import redis

import lowkiq
from tests.apps.runner import ROOT, WorkerProcess, eventually

APP = "tests/apps/cancellable.py"


@pytest.fixture
def worker(
    redis_client: redis.Redis, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[WorkerProcess]:
    monkeypatch.setenv("REDIS_URL", redis_url)
    from tests.apps.cancellable import Long, Steps, Watch

    lowkiq.settings.workers = [Long, Steps, Watch]
    process = WorkerProcess("-r", APP, env={"REDIS_URL": redis_url})
    process.wait_started()
    yield process
    process.close()


def cancel(redis_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "REDIS_URL": redis_url, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "lowkiq", "jobs", "cancel", *args, "-r", APP],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_jobs_cancel_stops_the_running_perform(
    worker: WorkerProcess, redis_client: redis.Redis, redis_url: str
) -> None:
    from tests.apps.cancellable import Long

    Long.perform_async([{"id": "42", "payload": {"n": 1}}])
    eventually(lambda: redis_client.lrange("test:started", 0, -1) == [b"42"])
    done = cancel(redis_url, "Long", "42", "43")
    assert done.returncode == 0, done.stderr
    assert (
        done.stdout == "Long: 1 job cancelled (1 of the ids given are neither queued nor running)\n"
    )
    stopped = eventually(lambda: redis_client.lrange("test:stopped", 0, -1))
    assert json.loads(stopped[0])["cancelled"] == ["42"]
    eventually(lambda: Long.metrics()["cancelled"] == 1)


def test_jobs_cancel_without_ids_is_a_one_line_error(
    redis_client: redis.Redis, redis_url: str
) -> None:
    done = cancel(redis_url, "Long")
    assert done.returncode != 0
    assert done.stderr.strip().splitlines() == [
        "Error: give the ids of the jobs (or - to read them from stdin, one a line)"
    ]
