"""The workflows guide's example runs as written: a worker on examples/workflows/app.py
performs the members ``python -m examples.workflows`` enqueues, then each callback once,
then the job held ``after=`` the workflow."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import pytest
import redis

import lowkiq
from tests.apps.runner import ROOT, WorkerProcess, eventually


def test_the_workflows_example_fires_its_callbacks_once_then_the_held_job(
    redis_client: redis.Redis, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = {**os.environ, "REDIS_URL": redis_url, "PYTHONPATH": str(ROOT)}
    worker = WorkerProcess("-r", "examples/workflows/app.py", env={"REDIS_URL": redis_url})
    try:
        worker.wait_started()
        started = subprocess.run(
            [sys.executable, "-m", "examples.workflows", "42", "200"],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert started.returncode == 0, started.stderr
        assert "reindex-account-42: 200 members; the report waits for them" in started.stdout
        eventually(lambda: "report of account 42 rebuilt" in worker.output(), timeout=60)
        eventually(lambda: "mail to account 42" in worker.output())
        eventually(lambda: "reindex-account-42 complete" in worker.output())
        time.sleep(1)  # a second callback would show by now
        output = worker.output()
        assert output.count("reindex-account-42 complete: 200 done, 0 dead, 0 discarded") == 1
        assert output.count("mail to account 42: your orders are searchable") == 1
        assert output.count("report of account 42 rebuilt") == 1
        assert "Traceback" not in output
        monkeypatch.setenv("REDIS_URL", redis_url)
        status = lowkiq.workflow("reindex-account-42").status()
        assert (status.done, status.total, status.complete, status.succeeded) == (
            200, 200, True, True,
        )  # fmt: skip
    finally:
        worker.close()


def test_the_guide_shows_the_example_whole() -> None:
    # The guide includes line ranges of the example's files: a range that no longer
    # starts and ends where the code does would show a cut example.
    guide = (ROOT / "docs" / "guides" / "workflows.md").read_text()
    ranges = re.findall(r'--8<-- "(examples/workflows/[\w.]+):(\d+):(\d+)"', guide)
    assert {path for path, _, _ in ranges} == {
        "examples/workflows/app.py",
        "examples/workflows/__main__.py",
    }
    for path, first, last in ranges:
        lines = (ROOT / path).read_text().splitlines()
        shown = lines[int(first) - 1 : int(last)]
        assert shown[0] and not shown[0].startswith((" ", ")", "#")), (path, shown[0])
        assert int(last) == len(lines), f"{path}: the guide stops before the file's end"
