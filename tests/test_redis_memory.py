"""Redis's memory: a worker refuses a server that evicts keys, notices a policy changed
while it runs, and drains a full one; producers refuse an evicting server.

Each test runs its own Redis server (the policy and the memory limit are the
server's), and real ``lowkiq worker`` processes on the recorder app, which
records its performs on the session's server.  They run on the ``redis-server``
the fixtures find (Redis 6.2 or 7: on 7 the scripts that run on a full Redis
carry the ``allow-oom`` flag).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

import lowkiq
from lowkiq.clients.embedded import EmbeddedServer, redis_server_binary, start_server
from lowkiq.clients.memory_policy import PRODUCER_GATE, SAFE_POLICY, check_eviction, policies
from lowkiq.errors import ConfigurationError, RedisFull
from lowkiq.storage.scripts import FIRST_WRITE_6, FLAGS_SHEBANG, Scripts, supports_script_flags
from tests.apps.runner import ROOT, WorkerProcess, eventually
from tests.health.probe import free_ports, verdict

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
def enqueue(monkeypatch: pytest.MonkeyPatch, redis_url: str) -> Callable[..., None]:
    """Enqueue jobs of the recorder app into the queue at ``queue_url`` (with
    ``allow_eviction``, into an evicting one too)."""
    monkeypatch.setenv("REDIS_URL", redis_url)
    from tests.apps.recorder import Recorder

    def push(queue_url: str, jobs: list, allow_eviction: bool = False) -> None:
        lowkiq.settings.redis = lambda: redis.Redis.from_url(queue_url)
        lowkiq.settings.allow_eviction = allow_eviction
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
    enqueue: Callable[..., None],
    redis_client: redis.Redis,
    policy: str,
) -> None:
    server = private_redis("--maxmemory-policy", policy)
    worker = start_worker(server.url, LOWKIQ_ALLOW_EVICTION="1")
    worker.wait_started()
    assert f"maxmemory-policy {policy}" in worker.output()
    assert "running anyway" in worker.output()
    enqueue(server.url, [{"id": "a", "payload": {"v": 1}}], allow_eviction=True)
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


def health_args(port: int) -> tuple[str, ...]:
    return ("--health-port", str(port), "--health-host", "127.0.0.1")


def reason(port: int) -> str:
    """The reason ``/ready`` gives for not being ready ('' while ready or not answering)."""
    status, document = verdict(port, "/ready")
    return str(document.get("reason", "")) if status == 503 else ""


def lowkiq_info(queue_url: str, redis_url: str, *args: str, **env: str) -> str:
    """What ``lowkiq info`` prints for the recorder app's queue at ``queue_url``."""
    done = subprocess.run(
        [sys.executable, "-m", "lowkiq", "info", "-r", "tests/apps/recorder.py", *args],
        env={**os.environ, "REDIS_URL": queue_url, "RECORD_URL": redis_url, **env},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_a_worker_started_on_a_full_redis_drains_it(
    private_redis: Callable[..., EmbeddedServer],
    start_worker: Callable[..., WorkerProcess],
    enqueue: Callable[..., None],
    redis_client: redis.Redis,
    redis_url: str,
) -> None:
    server = private_redis()
    queue = redis.Redis.from_url(server.url)
    enqueue(server.url, [{"id": str(n), "payload": {"v": n}} for n in range(20)])
    queue.config_set("maxmemory", 1)  # below what it holds: every growing write is refused
    with pytest.raises(redis.exceptions.OutOfMemoryError):
        queue.set("probe", 1)
    port = free_ports()
    worker = start_worker(server.url, *health_args(port), TEST_BATCH="5")
    # Its heartbeat, leases, pops and acks run on the full Redis: it drains it.
    eventually(lambda: redis_client.llen("test:started") > 0, timeout=10)
    eventually(lambda: redis_client.llen("test:started") == 20, timeout=30)
    assert queue.config_get("maxmemory")["maxmemory"] == "1"
    assert "Redis is full (maxmemory 1B, used" in worker.output()
    assert "Redis is full (maxmemory 1B" in eventually(lambda: reason(port))
    assert "Redis is full (maxmemory 1B" in lowkiq_info(server.url, redis_url)
    # A producer is told, and nothing is enqueued.
    with pytest.raises(RedisFull):
        enqueue(server.url, [{"id": "late", "payload": {"v": 0}}])
    queue.config_set("maxmemory", 0)
    eventually(lambda: "Redis is no longer full" in worker.output())
    assert eventually(lambda: verdict(port, "/ready")[0] == 200)
    assert worker.process.poll() is None
    queue.close()


def test_a_policy_changed_under_a_running_worker_is_noticed_by_workers_and_producers(
    private_redis: Callable[..., EmbeddedServer],
    start_worker: Callable[..., WorkerProcess],
    redis_client: redis.Redis,
    redis_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = private_redis()
    port = free_ports()
    worker = start_worker(server.url, *health_args(port))
    worker.wait_started()
    assert eventually(lambda: verdict(port, "/ready")[0] == 200)
    monkeypatch.setenv("REDIS_URL", redis_url)
    from tests.apps.recorder import Recorder

    lowkiq.settings.redis = lambda: redis.Redis.from_url(server.url)
    PRODUCER_GATE.forget()
    Recorder.perform_async([{"id": "before", "payload": {"v": 1}}])  # reads the policy: safe
    eventually(lambda: redis_client.lrange("test:started", 0, -1) == [b"before"])

    queue = redis.Redis.from_url(server.url)
    queue.config_set("maxmemory-policy", "allkeys-lru")
    changed = time.monotonic()
    name = f"{server.url.removeprefix('unix://')} has maxmemory-policy allkeys-lru"

    def refused() -> bool:
        try:
            Recorder.perform_async([{"id": "after", "payload": {"v": 2}}])
        except ConfigurationError as error:
            assert "allkeys-lru" in str(error) and "allow_eviction" in str(error)
            return True
        return False

    eventually(refused, timeout=10, interval=0.5)
    eventually(lambda: name in worker.output(), timeout=10 - (time.monotonic() - changed))
    assert "ERROR" in next(line for line in worker.output().splitlines() if name in line)
    assert name in eventually(lambda: reason(port), timeout=10 - (time.monotonic() - changed))
    assert "maxmemory-policy allkeys-lru (allow_eviction: no)" in lowkiq_info(server.url, redis_url)
    queue.config_set("maxmemory-policy", SAFE_POLICY)
    eventually(lambda: "no longer evicts keys" in worker.output())
    assert eventually(lambda: verdict(port, "/ready")[0] == 200)
    eventually(lambda: not refused())
    queue.close()


def test_producers_refuse_a_redis_that_evicts_before_any_worker_starts(
    private_redis: Callable[..., EmbeddedServer],
    enqueue: Callable[..., None],
) -> None:
    server = private_redis("--maxmemory-policy", "volatile-lru")
    with pytest.raises(ConfigurationError, match="maxmemory-policy volatile-lru"):
        enqueue(server.url, [{"id": "a", "payload": {"v": 1}}])
    queue = redis.Redis.from_url(server.url)
    assert queue.dbsize() == 0
    enqueue(server.url, [{"id": "a", "payload": {"v": 1}}], allow_eviction=True)
    assert queue.dbsize() > 0
    queue.close()


def test_with_allow_eviction_a_worker_says_when_redis_evicted_keys(
    private_redis: Callable[..., EmbeddedServer],
    start_worker: Callable[..., WorkerProcess],
    redis_url: str,
) -> None:
    server = private_redis("--maxmemory-policy", "allkeys-lru")
    worker = start_worker(server.url, LOWKIQ_ALLOW_EVICTION="1")
    worker.wait_started()
    queue = redis.Redis.from_url(server.url)
    used = int(queue.info("memory")["used_memory"])
    queue.config_set("maxmemory", used + 2_000_000)
    for n in range(100):  # 5 MB of other keys: Redis evicts some to make room
        queue.set(f"filler:{n}", b"x" * 50_000)
    assert int(queue.info("stats")["evicted_keys"]) > 0
    eventually(lambda: "Redis evicted" in worker.output(), timeout=10)
    line = next(line for line in worker.output().splitlines() if "Redis evicted" in line)
    assert "evicted_keys in INFO stats" in line and "allkeys-lru" in line
    assert worker.process.poll() is None
    assert "maxmemory-policy allkeys-lru (allow_eviction: yes)" in lowkiq_info(
        server.url, redis_url, LOWKIQ_ALLOW_EVICTION="1"
    )
    queue.close()


def test_the_scripts_that_drain_a_full_redis_carry_the_flag_where_redis_takes_it(
    redis_client: redis.Redis,
) -> None:
    major = int(str(redis_client.info("server")["redis_version"]).split(".")[0])
    assert supports_script_flags(redis_client) == (major >= 7)
    scripts = Scripts.for_client(redis_client)
    for name in ("pop", "ack", "lease_acquire", "membership_beat"):
        text = getattr(scripts, name).script
        if major >= 7:
            assert text.startswith(FLAGS_SHEBANG), name
        else:  # its first write grows nothing: before it, reads only (a pop's early lines)
            before, first_write, _ = text.partition(FIRST_WRITE_6)
            assert first_write, name
            assert set(re.findall(r"redis\.call\('(\w+)'", before)) <= {"get", "exists"}, name
    assert not scripts.push.script.startswith(("#!", FIRST_WRITE_6))
    assert "allow-oom" not in scripts.push.script


def test_lowkiq_info_on_a_full_redis_lowkiq_never_wrote_to_says_it_is_full(
    private_redis: Callable[..., EmbeddedServer], redis_url: str
) -> None:
    server = private_redis("--maxmemory", "1")
    done = subprocess.run(
        [sys.executable, "-m", "lowkiq", "info", "-r", "tests/apps/recorder.py"],
        env={**os.environ, "REDIS_URL": server.url, "RECORD_URL": redis_url},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    # Its queues read as their classes' layouts (none can be written): the table, and
    # the warning that Redis is full.
    assert done.returncode == 0, done.stderr
    assert "Redis is full (maxmemory 1B, used" in done.stdout, done.stdout
    assert "0/5 shards" in done.stdout
    assert "Traceback" not in done.stderr


def test_a_group_capped_worker_drains_a_full_redis(
    private_redis: Callable[..., EmbeddedServer],
    redis_client: redis.Redis,
    redis_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = private_redis()
    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.setenv("TEST_GROUP_CAP", "1")
    from tests.apps.capped import Capped

    lowkiq.settings.redis = lambda: redis.Redis.from_url(server.url)
    try:
        Capped.perform_async(
            [
                {"id": f"j{n}", "group": f"g{n % 2}", "payload": {"g": f"g{n % 2}", "sleep": 0}}
                for n in range(12)
            ]
        )
    finally:
        lowkiq.settings.reset()
    queue = redis.Redis.from_url(server.url)
    queue.config_set("maxmemory", 1)
    env = {"REDIS_URL": server.url, "RECORD_URL": redis_url, "TEST_GROUP_CAP": "1"}
    worker = WorkerProcess("-r", "tests/apps/capped.py", env=env)
    try:
        # Each batch claims a place of its group first: the claims run on the full Redis.
        started = lambda: sum(redis_client.llen(f"test:starts:g{g}") for g in (0, 1))  # noqa: E731
        eventually(lambda: started() == 12, timeout=30)
        assert worker.process.poll() is None
    finally:
        worker.close()
        queue.close()
