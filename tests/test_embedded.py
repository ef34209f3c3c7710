"""``lowkiq.clients.embedded``: a real Redis server, for tests and for running without
``REDIS_URL``."""

from __future__ import annotations

import os
import time

import pytest
import redis

import lowkiq
from lowkiq.clients.embedded import (
    EmbeddedServer,
    project_server_url,
    redis_server_binary,
    start_server,
)


def answers(url: str) -> bool:
    try:
        return bool(redis.Redis.from_url(url, socket_timeout=1).ping())
    except (redis.ConnectionError, OSError):
        return False


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def wait_until(condition, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def test_start_server_gives_a_working_redis_of_at_least_6_2(tmp_path):
    server = start_server(tmp_path / "redis")
    try:
        client = server.client()
        assert client.ping()
        major, minor = (int(part) for part in client.info("server")["redis_version"].split(".")[:2])
        assert (major, minor) >= (6, 2)
        client.set("key", "value")
        assert redis.Redis.from_url(server.url).get("key") == b"value"
    finally:
        server.stop()
    assert not answers(server.url)
    assert server.process is None or server.process.poll() is not None


def test_lowkiq_runs_on_a_started_server(tmp_path):
    server = start_server(tmp_path / "redis", binary=redis_server_binary())
    try:
        lowkiq.settings.reset()
        lowkiq.settings.redis = server.client

        class EmbeddedWorker(lowkiq.Worker):
            shards_count = 2

        lowkiq.settings.workers = [EmbeddedWorker]
        EmbeddedWorker.perform_async([{"id": n, "payload": n} for n in range(5)])
        assert EmbeddedWorker.metrics()["length"] == 5
    finally:
        lowkiq.settings.reset()
        server.stop()


def test_project_server_starts_once_and_is_reused(tmp_path):
    directory = tmp_path / "project"
    url = project_server_url(directory)
    server = EmbeddedServer(url=url, directory=directory)
    try:
        assert answers(url)
        client = redis.Redis.from_url(url)
        pid = int(client.info("server")["process_id"])
        run_id = client.info("server")["run_id"]
        assert client.config_get("appendonly")["appendonly"] == "yes"
        client.set("shared", "1")

        assert project_server_url(directory) == url
        again = redis.Redis.from_url(url)
        assert again.info("server")["run_id"] == run_id
        assert again.get("shared") == b"1"
    finally:
        server.stop()
    assert wait_until(lambda: not answers(url))
    assert wait_until(lambda: not alive(pid))


@pytest.mark.parametrize("depth", [1, 12])
def test_project_server_works_from_short_and_long_directories(tmp_path, depth):
    directory = tmp_path.joinpath(*["a-rather-long-directory-name"] * depth)
    url = project_server_url(directory)
    try:
        assert answers(url)
    finally:
        EmbeddedServer(url=url, directory=directory).stop()
    assert wait_until(lambda: not answers(url))
