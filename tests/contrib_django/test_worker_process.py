"""``manage.py lowkiq_worker`` runs a real worker process of the Django project, with
``lowkiq worker``'s options, and Django's database connections are closed around every
batch (sqlite and PostgreSQL)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from tests.apps.runner import ROOT, eventually
from tests.contrib_django.conftest import ManagedWorker, manage


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_manage_py_lowkiq_worker_serves_the_workers_of_settings_lowkiq(
    django_worker: Callable[..., ManagedWorker], tmp_path: Path
) -> None:
    from tests.contrib_django.project.shop.jobs import Querying, Recorded

    record = tmp_path / "record.jsonl"
    worker = django_worker("--threads", "1", "--only", "Recorded", RECORD_FILE=str(record))
    Recorded.perform_async([{"id": f"r{n}", "payload": n} for n in range(20)])
    Querying.perform_async([{"id": "q", "payload": {"db": "default"}}])
    eventually(lambda: len(lines(record)) == 20)
    # --only Recorded: the other queue is left alone.
    time.sleep(0.3)
    assert Querying.metrics()["length"] == 1
    assert worker.stop() == 0, worker.output()


def test_manage_py_lowkiq_worker_has_the_options_of_lowkiq_worker(
    project_env: Callable[..., dict[str, str]],
) -> None:
    from lowkiq.cli import worker as lowkiq_worker

    shown = subprocess.run(
        manage("lowkiq_worker", "--help"), env=project_env(), cwd=ROOT,
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    options = [opt for param in lowkiq_worker.params for opt in param.opts if param.name != "app"]
    assert options and all(option in shown.stdout for option in options)
    assert "--require" not in shown.stdout
    bad = subprocess.run(
        manage("lowkiq_worker", "--nodes", "2"), env=project_env(), cwd=ROOT,
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert bad.returncode == 2
    assert "--nodes and --node go together" in bad.stderr


def open_sqlite_files(pid: int, db_dir: str) -> int:
    """How many file descriptors of process ``pid`` are open on the sqlite database."""
    found = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        found += target == os.path.join(db_dir, "db.sqlite3")
    return found


def test_a_thousand_sqlite_batches_leave_no_connection_open(
    django_worker: Callable[..., ManagedWorker], django_project: dict[str, str]
) -> None:
    from tests.contrib_django.project.shop.jobs import Querying

    worker = django_worker("--threads", "2", "--only", "Querying")
    Querying.perform_async([{"id": f"b{n}", "payload": {"db": "default"}} for n in range(1000)])
    eventually(lambda: Querying.metrics()["processed"] >= 1000, 120, 0.1)
    assert Querying.metrics()["failed"] == 0
    pid, db_dir = worker.process.pid, django_project["TEST_DB_DIR"]
    # Each thread's connection was closed after its batch: no sqlite file is left open.
    eventually(lambda: open_sqlite_files(pid, db_dir) == 0, 5)
    assert worker.stop() == 0, worker.output()


def pg_connections(application: str) -> int:
    """The open connections of the worker process (its application_name), read by a
    connection of the test's own."""
    import psycopg

    from tests.contrib_django.conftest import pg_address

    host, port = pg_address().rsplit(":", 1)
    with psycopg.connect(host=host, port=int(port), user="postgres", dbname="postgres") as db:
        row = db.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (application,)
        ).fetchone()
    assert row is not None
    return int(row[0])


def test_a_thousand_postgresql_batches_leave_no_connection_open(
    django_worker: Callable[..., ManagedWorker], pg_alias: str
) -> None:
    from tests.contrib_django.project.shop.jobs import Querying

    application = f"worker-{uuid.uuid4().hex[:12]}"
    worker = django_worker("--threads", "2", "--only", "Querying", TEST_PG_APPLICATION=application)
    Querying.perform_async([{"id": f"b{n}", "payload": {"db": pg_alias}} for n in range(1000)])
    eventually(lambda: Querying.metrics()["processed"] >= 1000, 120, 0.1)
    assert Querying.metrics()["failed"] == 0
    eventually(lambda: pg_connections(application) == 0, 5)
    assert worker.stop() == 0, worker.output()


def test_a_connection_the_database_dropped_does_not_fail_later_batches(
    django_worker: Callable[..., ManagedWorker], pg_alias: str
) -> None:
    """CONN_MAX_AGE keeps connections between batches; one the server ends (a restart, a
    failover, an idle timeout) is found unusable and replaced before the next batch."""
    import psycopg

    from tests.contrib_django.conftest import pg_address
    from tests.contrib_django.project.shop.jobs import Querying

    application = f"worker-{uuid.uuid4().hex[:12]}"
    worker = django_worker(
        "--threads", "1", "--only", "Querying",
        TEST_PG_APPLICATION=application, TEST_CONN_MAX_AGE="600",
    )  # fmt: skip
    Querying.perform_async([{"id": f"a{n}", "payload": {"db": pg_alias}} for n in range(50)])
    eventually(lambda: Querying.metrics()["processed"] >= 50)
    assert pg_connections(application) == 1  # kept for the next batch (CONN_MAX_AGE)
    host, port = pg_address().rsplit(":", 1)
    with psycopg.connect(host=host, port=int(port), user="postgres", dbname="postgres") as db:
        db.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
            (application,),
        )
    eventually(lambda: pg_connections(application) == 0)
    Querying.perform_async([{"id": f"b{n}", "payload": {"db": pg_alias}} for n in range(50)])
    eventually(lambda: Querying.metrics()["processed"] + Querying.metrics()["failed"] >= 100)
    # The first batch after the drop may fail on the dead connection; it is then closed
    # and every later batch runs on a new one.
    assert Querying.metrics()["failed"] <= 1
    assert worker.stop() == 0, worker.output()


def test_call_command_passes_the_options_after_a_double_dash(
    project_env: Callable[..., dict[str, str]],
) -> None:
    code = (
        "import django; django.setup()\n"
        "from django.core.management import call_command\n"
        "call_command('lowkiq_worker', '--', '--nodes', '2')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=project_env(), cwd=ROOT,
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "--nodes and --node go together" in done.stderr


def test_processes_forked_by_manage_py_lowkiq_worker_query_the_database(
    django_worker: Callable[..., ManagedWorker], tmp_path: Path
) -> None:
    from tests.contrib_django.project.shop.jobs import Querying

    record = tmp_path / "done.txt"
    worker = django_worker("--processes", "2", "--threads", "1", "--only", "Querying",
                           RECORD_FILE=str(record))  # fmt: skip
    Querying.perform_async([{"id": f"f{n}", "payload": {"db": "default"}} for n in range(100)])
    eventually(lambda: len(lines(record)) >= 100, 60)
    assert sorted(set(lines(record))) == sorted(f"f{n}" for n in range(100))
    assert Querying.metrics()["failed"] == 0
    assert worker.stop() == 0, worker.output()
