"""Redis's memory: a worker refuses a server that evicts keys, waits out a full one.

Each test runs its own Redis server (the policy and the memory limit are the
server's), and real ``lowkiq worker`` processes on the recorder app, which
records its performs on the session's server.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

import lowkiq
from lowkiq.clients.embedded import EmbeddedServer, redis_server_binary, start_server
from lowkiq.clients.memory_policy import SAFE_POLICY, check_eviction, policies
from lowkiq.errors import ConfigurationError
from tests.apps.runner import WorkerProcess, eventually

#: Policies a managed Redis often has by default, both unsafe for lowkiq.
EVICTING = ["allkeys-lru", "volatile-lru"]


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[Callable[..., EmbeddedServer]]:
    """Start a Redis server of the test's own with extra ``config`` arguments."""
    started: list[EmbeddedServer] = []

    def start(*config: str) -> EmbeddedServer:
        server = start_server(
            tmp_path / f"redis{len(started)}",
            binary=redis_server_binary(prefer_path=True),
            config=list(config),
        )
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def start_worker(redis_url: str) -> Iterator[Callable[..., WorkerProcess]]:
    """Start ``lowkiq worker`` on the recorder app against ``queue_url``, recording on
    the session's server; killed after the test."""
    started: list[WorkerProcess] = []

    def start(queue_url: str, *args: str, **env: str) -> WorkerProcess:
        process = WorkerProcess(
            "-r",
            "tests/apps/recorder.py",
            *args,
            env={"REDIS_URL": queue_url, "RECORD_URL": redis_url, **env},
        )
        started.append(process)
        return process

    yield start
    for process in started:
        process.close()


@pytest.fixture
def enqueue(monkeypatch: pytest.MonkeyPatch, redis_url: str) -> Callable[[str, list], None]:
    """Enqueue jobs of the recorder app into the queue at ``queue_url``."""
    monkeypatch.setenv("REDIS_URL", redis_url)
    from tests.apps.recorder import Recorder

    def push(queue_url: str, jobs: list) -> None:
        lowkiq.settings.redis = lambda: redis.Redis.from_url(queue_url)
        try:
            Recorder.perform_async(jobs)
        finally:
            lowkiq.settings.reset()

    return push


@pytest.mark.parametrize("policy", EVICTING)
def test_a_worker_refuses_to_start_on_a_redis_that_evicts(
    private_redis: Callable[..., EmbeddedServer],
    start_worker: Callable[..., WorkerProcess],
    policy: str,
) -> None:
    server = private_redis("--maxmemory-policy", policy)
    worker = start_worker(server.url)
    assert worker.wait(30) != 0
    output = worker.output()
    assert f"maxmemory-policy {policy}" in output
    assert f"set maxmemory-policy {SAFE_POLICY}" in output
    assert "allow_eviction" in output
    assert "Traceback" not in output


def test_a_supervisor_refuses_before_it_forks(
    private_redis: Callable[..., EmbeddedServer], start_worker: Callable[..., WorkerProcess]
) -> None:
    server = private_redis("--maxmemory-policy", "allkeys-lru")
    worker = start_worker(server.url, "--processes", "2")
    assert worker.wait(30) != 0
    assert worker.output().count("maxmemory-policy allkeys-lru") == 1


@pytest.mark.parametrize("policy", EVICTING)
def test_allow_eviction_starts_with_a_warning(
    private_redis: Callable[..., EmbeddedServer],
    start_worker: Callable[..., WorkerProcess],
    enqueue: Callable[[str, list], None],
    redis_client: redis.Redis,
    policy: str,
) -> None:
    server = private_redis("--maxmemory-policy", policy)
    worker = start_worker(server.url, LOWKIQ_ALLOW_EVICTION="1")
    worker.wait_started()
    assert f"maxmemory-policy {policy}" in worker.output()
    assert "running anyway" in worker.output()
    enqueue(server.url, [{"id": "a", "payload": {"v": 1}}])
    eventually(lambda: redis_client.lrange("test:started", 0, -1) == [b"a"])


def test_the_policy_is_read_from_info_where_config_is_forbidden(
    private_redis: Callable[..., EmbeddedServer],
) -> None:
    server = private_redis("--maxmemory-policy", "allkeys-lru", "--rename-command", "CONFIG", "")
    client = redis.Redis.from_url(server.url)
    with pytest.raises(redis.ResponseError):
        client.config_get("maxmemory-policy")
    assert [found.policy for found in policies(client)] == ["allkeys-lru"]
    with pytest.raises(ConfigurationError, match="allkeys-lru"):
        check_eviction(client, allow_eviction=False)
    client.close()


def test_noeviction_passes(redis_client: redis.Redis) -> None:
    assert [found.evicts for found in check_eviction(redis_client, allow_eviction=False)] == [False]


def test_a_worker_started_on_a_full_redis_waits_and_then_drains(
    private_redis: Callable[..., EmbeddedServer],
    start_worker: Callable[..., WorkerProcess],
    enqueue: Callable[[str, list], None],
    redis_client: redis.Redis,
) -> None:
    server = private_redis()
    queue = redis.Redis.from_url(server.url)
    enqueue(server.url, [{"id": str(n), "payload": {"v": n}} for n in range(20)])
    queue.config_set("maxmemory", 1)  # below what it holds: every write is refused
    with pytest.raises(redis.exceptions.OutOfMemoryError):
        queue.set("probe", 1)
    worker = start_worker(server.url)
    eventually(lambda: "Redis is full" in worker.output(), timeout=30)
    assert worker.process.poll() is None, worker.output()
    assert redis_client.llen("test:started") == 0
    queue.config_set("maxmemory", 0)
    eventually(lambda: redis_client.llen("test:started") == 20, timeout=30)
    assert worker.process.poll() is None
    queue.close()
