"""Django for the tests of :mod:`lowkiq.contrib.django`: the test project
(tests/contrib_django/project) configured in this process once per session, on sqlite
in a temporary directory and, when PostgreSQL is installed, on a throwaway cluster as
the ``pg`` database; lowkiq's settings from its ``LOWKIQ`` on the session's Redis."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

import lowkiq
from tests.apps.runner import ROOT, eventually
from tests.contrib_django.postgres import Cluster, start_cluster

PROJECT = "tests.contrib_django.project"


@pytest.fixture(scope="session")
def postgres() -> Iterator[Cluster | str]:
    """A PostgreSQL cluster for the session, or why there is none."""
    cluster = start_cluster()
    try:
        yield cluster
    finally:
        if isinstance(cluster, Cluster):
            cluster.stop()


@pytest.fixture(scope="session")
def django_project(
    tmp_path_factory: pytest.TempPathFactory, redis_url: str, postgres: Cluster | str
) -> dict[str, str]:
    """Django set up in this process with the test project's settings; returns the
    environment a worker process of the project needs."""
    import django
    from django.conf import settings
    from django.core.management import call_command

    from tests.contrib_django.project.settings import build

    db_dir = str(tmp_path_factory.mktemp("django"))
    address = postgres.address if isinstance(postgres, Cluster) else None
    if settings.configured:
        pytest.fail("Django was configured before the contrib_django fixtures")
    settings.configure(**build(db_dir, redis_url, address))
    django.setup()
    for alias in settings.DATABASES:
        call_command("migrate", database=alias, verbosity=0)
    # The app configured lowkiq.settings at django.setup(): the tests that need it apply
    # it again (django_lowkiq); the others find lowkiq's defaults.
    lowkiq.settings.reset()
    return {
        "DJANGO_SETTINGS_MODULE": f"{PROJECT}.settings",
        "TEST_DB_DIR": db_dir,
        "TEST_POSTGRES": address or "",
        "REDIS_URL": redis_url,
        "PYTHONPATH": str(ROOT),
    }


@pytest.fixture
def django_lowkiq(django_project: dict[str, str], redis_client: redis.Redis) -> redis.Redis:
    """The test project's lowkiq configuration applied again (``redis_client`` resets
    ``lowkiq.settings`` for every test), on a flushed Redis."""
    from django.apps import apps

    apps.get_app_config("lowkiq").ready()
    return redis_client


@pytest.fixture
def pg_alias(django_project: dict[str, str], postgres: Cluster | str) -> str:
    """The PostgreSQL database's alias, or a skip saying why there is none (a failure
    under CI=true: .ci/run installs PostgreSQL)."""
    if not isinstance(postgres, Cluster):
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true: {postgres}")
        pytest.skip(postgres)
    return "pg"


def pg_address() -> str:
    """``host:port`` of the session's PostgreSQL cluster (the ``pg`` database)."""
    from django.conf import settings

    database = settings.DATABASES["pg"]
    return f"{database['HOST']}:{database['PORT']}"


def manage(*args: str) -> list[str]:
    """The command line of the test project's ``manage.py`` with ``args``."""
    return [sys.executable, "-m", "django", *args]


@pytest.fixture
def project_env(django_project: dict[str, str], tmp_path: Path) -> Callable[..., dict[str, str]]:
    """The environment of a process of the test project, with ``extra`` variables."""

    def env(**extra: str) -> dict[str, str]:
        return {**os.environ, **django_project, **extra}

    return env


class ManagedWorker:
    """``manage.py lowkiq_worker ARGS`` of the test project, its output in a file."""

    def __init__(self, args: tuple[str, ...], env: dict[str, str]) -> None:
        self.log = tempfile.NamedTemporaryFile(prefix="django-worker-", delete=False)  # noqa: SIM115
        self.process = subprocess.Popen(
            manage("lowkiq_worker", *args), env=env, cwd=ROOT,
            stdout=self.log, stderr=subprocess.STDOUT,
        )  # fmt: skip

    def output(self) -> str:
        return Path(self.log.name).read_text()

    def wait_started(self) -> None:
        eventually(lambda: "TTIN" in self.output() or self.process.poll() is not None, 30)
        assert self.process.poll() is None, self.output()

    def stop(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(30)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
        self.log.close()
        os.unlink(self.log.name)


@pytest.fixture
def django_worker(
    django_lowkiq: redis.Redis, project_env: Callable[..., dict[str, str]]
) -> Iterator[Callable[..., ManagedWorker]]:
    """Start ``manage.py lowkiq_worker`` processes (``start(*args, **env)``); all are
    killed after the test."""
    started: list[ManagedWorker] = []

    def start(*args: str, **env: str) -> ManagedWorker:
        worker = ManagedWorker(args, project_env(**env))
        started.append(worker)
        worker.wait_started()
        return worker

    yield start
    for worker in started:
        worker.close()
