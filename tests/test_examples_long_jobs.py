"""The long-jobs guide's example runs as written: a worker on examples/long_jobs/app.py
drains a shop's burst enqueued by ``python -m examples.long_jobs``, across a TERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
import redis

import lowkiq
from tests.apps.runner import ROOT, WorkerProcess, eventually


def test_the_long_jobs_example_drains_a_burst_across_a_stop(
    redis_client: redis.Redis, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = {**os.environ, "REDIS_URL": redis_url, "PYTHONPATH": str(ROOT)}
    first = WorkerProcess("-r", "examples/long_jobs/app.py", env={"REDIS_URL": redis_url})
    second: WorkerProcess | None = None
    try:
        first.wait_started()
        enqueued = subprocess.run(
            [sys.executable, "-m", "examples.long_jobs", "500"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert enqueued.returncode == 0, enqueued.stderr
        assert "enqueued 500 products of shop-1" in enqueued.stdout
        monkeypatch.setenv("REDIS_URL", redis_url)
        from examples.long_jobs.app import ReindexShop

        lowkiq.settings.workers = [ReindexShop]
        eventually(lambda: ReindexShop.metrics()["busy"] == 1)
        first.signal(signal.SIGTERM)
        assert first.wait(10) == 0
        left = ReindexShop.queries().fetch(["shop-1"])
        assert left and 0 < len(left[0]["payloads"]) < 500  # the rest went back
        second = WorkerProcess("-r", "examples/long_jobs/app.py", env={"REDIS_URL": redis_url})
        eventually(lambda: ReindexShop.metrics()["length"] == 0, timeout=60)
        eventually(lambda: ReindexShop.metrics()["busy"] == 0)
        assert ReindexShop.metrics()["morgue_length"] == 0
    finally:
        first.close()
        if second is not None:
            second.close()
