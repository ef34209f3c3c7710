"""Pause and resume a worker with real `lowkiq worker` processes and the CLI."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable

import redis

from tests.apps.runner import ROOT, WorkerProcess, eventually


def lowkiq_cli(redis_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "REDIS_URL": redis_url}
    return subprocess.run(
        [sys.executable, "-m", "lowkiq", *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def cpu_seconds(pid: int) -> float:
    """User + system CPU time the process has used (Linux)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def started(client: redis.Redis) -> list[bytes]:
    return client.lrange("test:started", 0, -1)


def test_a_paused_worker_takes_no_batch_on_any_process_until_resumed(
    redis_client: redis.Redis,
    redis_url: str,
    recorder: type,
    workers: Callable[..., WorkerProcess],
) -> None:
    first = workers("--threads", "2")
    recorder.perform_async([{"id": "slow", "payload": {"sleep": 1.0}}])
    eventually(lambda: started(redis_client) == [b"slow"])

    result = lowkiq_cli(redis_url, "pause", "Recorder", "-r", "tests/apps/recorder.py")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "Recorder paused"
    assert recorder.paused()
    again = lowkiq_cli(redis_url, "pause", "Recorder", "-r", "tests/apps/recorder.py")
    assert again.stdout.strip() == "Recorder was already paused"

    # The running batch finishes; enqueueing goes on, but nothing new starts,
    # not even on a process that starts while the worker is paused.
    eventually(lambda: redis_client.lrange("test:finished", 0, -1) == [b"slow"])
    eventually(lambda: "Recorder is paused" in first.output())
    recorder.perform_async([{"id": n, "payload": {"v": n}} for n in range(20)])
    second = workers("--threads", "2")
    eventually(lambda: "Recorder is paused" in second.output())
    before = cpu_seconds(first.process.pid) + cpu_seconds(second.process.pid)
    time.sleep(1.5)
    used = cpu_seconds(first.process.pid) + cpu_seconds(second.process.pid) - before
    assert started(redis_client) == [b"slow"]
    assert recorder.metrics()["length"] == 20
    # Idle while paused: heartbeats only, no loop spinning over the due jobs.
    assert used < 0.5, f"paused processes used {used:.2f}s of CPU in 1.5s"

    result = lowkiq_cli(redis_url, "resume", "Recorder", "-r", "tests/apps/recorder.py")
    assert result.returncode == 0 and result.stdout.strip() == "Recorder resumed"
    assert not recorder.paused()
    eventually(lambda: len(redis_client.lrange("test:finished", 0, -1)) == 21)
    assert recorder.metrics()["length"] == 0
    assert redis_client.lrange("test:overlaps", 0, -1) == []


def test_pause_names_an_unknown_worker(redis_client: redis.Redis, redis_url: str) -> None:
    result = lowkiq_cli(redis_url, "pause", "Nope", "-r", "tests/apps/recorder.py")
    assert result.returncode == 2
    assert "no worker 'Nope' in settings.workers (workers: Recorder)" in result.stderr
