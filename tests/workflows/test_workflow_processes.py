"""Workflows run by real ``lowkiq worker`` processes (tests/apps/workflow_app.py): a
process SIGKILLed in the middle of the workflows loses no member, and every callback
comes exactly once, after its last member."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

import lowkiq
from tests.apps.runner import WorkerProcess, eventually
from tests.workflows.workflow_support import check_crash_workflows, enqueue_crash_workflows


@pytest.fixture
def app(
    redis_client: redis.Redis, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[list[WorkerProcess]]:
    """The workflow app's workers, enqueueing into the test's Redis; the processes the
    test starts (killed after it)."""
    monkeypatch.setenv("REDIS_URL", redis_url)
    from tests.apps import workflow_app

    lowkiq.settings.workers = [workflow_app.Step, workflow_app.Finished]
    started: list[WorkerProcess] = []
    yield started
    for process in started:
        process.close()


def start(started: list[WorkerProcess], **env: str) -> WorkerProcess:
    """Start a process of the workflow app, serving once it returns."""
    process = WorkerProcess("-r", "tests/apps/workflow_app.py", env=env)
    started.append(process)
    process.wait_started()
    return process


def test_a_process_killed_mid_workflow_loses_no_member_and_callbacks_come_once(
    app: list[WorkerProcess], redis_client: redis.Redis, redis_url: str
) -> None:
    from tests.apps.workflow_app import Step

    env = {"REDIS_URL": redis_url}
    first = start(app, **env)
    start(app, **env)
    members = enqueue_crash_workflows(Step, 4)
    total = sum(len(m) for m in members.values())
    eventually(lambda: sum(redis_client.scard(f"wf:performed:{w}") for w in members) >= total // 4)
    first.kill()  # SIGKILL, its batches in flight
    check_crash_workflows(redis_client, members)
    assert Step.metrics()["length"] == 0
