"""``Worker.perform_async(jobs, on_commit=True)``: enqueued when the transaction commits,
never on rollback, savepoints respected; sqlite always, PostgreSQL when installed."""

from __future__ import annotations

import subprocess
import sys

import pytest
import redis

import lowkiq
from tests.apps.runner import ROOT


def queued_ids(worker: type[lowkiq.Worker]) -> list[str]:
    return sorted(job["id"] for job in worker.queries().range_by_id("-", "+", limit=100))


@pytest.fixture(params=["default", "pg"])
def alias(request: pytest.FixtureRequest, django_lowkiq: redis.Redis) -> str:
    """Each database: sqlite (``default``) and PostgreSQL (``pg``, skipped when absent)."""
    if request.param == "pg":
        return str(request.getfixturevalue("pg_alias"))
    return "default"


def test_jobs_are_enqueued_only_when_the_transaction_commits(alias: str) -> None:
    from django.db import transaction

    from tests.contrib_django.project.shop.jobs import Recorded

    with transaction.atomic(using=alias):
        Recorded.perform_async([{"id": "a", "payload": 1}], on_commit=True, using=alias)
        assert queued_ids(Recorded) == []  # not yet: the transaction is open
    assert queued_ids(Recorded) == ["a"]


def test_a_rolled_back_transaction_enqueues_nothing(alias: str) -> None:
    from django.db import transaction

    from tests.contrib_django.project.shop.jobs import Recorded

    with pytest.raises(RuntimeError), transaction.atomic(using=alias):
        Recorded.perform_async([{"id": "a"}], on_commit=True, using=alias)
        raise RuntimeError("roll back")
    assert queued_ids(Recorded) == []


def test_a_rolled_back_savepoint_drops_its_jobs_and_keeps_the_others(alias: str) -> None:
    from django.db import transaction

    from tests.contrib_django.project.shop.jobs import Recorded

    with transaction.atomic(using=alias):
        Recorded.perform_async([{"id": "outer"}], on_commit=True, using=alias)
        with transaction.atomic(using=alias):
            Recorded.perform_async([{"id": "kept-inner"}], on_commit=True, using=alias)
        with pytest.raises(RuntimeError), transaction.atomic(using=alias):
            Recorded.perform_async([{"id": "dropped"}], on_commit=True, using=alias)
            with transaction.atomic(using=alias):
                Recorded.perform_async([{"id": "dropped-too"}], on_commit=True, using=alias)
            raise RuntimeError("roll back the savepoint")
        assert queued_ids(Recorded) == []
    assert queued_ids(Recorded) == ["kept-inner", "outer"]


def test_outside_a_transaction_the_jobs_are_enqueued_at_once(alias: str) -> None:
    from tests.contrib_django.project.shop.jobs import Recorded

    Recorded.perform_async([{"id": "now"}], on_commit=True, using=alias)
    assert queued_ids(Recorded) == ["now"]


def test_a_transaction_of_another_database_does_not_hold_the_jobs(
    django_lowkiq: redis.Redis, pg_alias: str
) -> None:
    from django.db import transaction

    from tests.contrib_django.project.shop.jobs import Recorded

    with transaction.atomic(using=pg_alias):
        Recorded.perform_async([{"id": "on-default"}], on_commit=True)  # using the default db
        Recorded.perform_async([{"id": "on-pg"}], on_commit=True, using=pg_alias)
        assert queued_ids(Recorded) == ["on-default"]
    assert queued_ids(Recorded) == ["on-default", "on-pg"]


def test_a_bad_job_raises_at_the_call_and_nothing_is_enqueued(django_lowkiq: redis.Redis) -> None:
    from django.db import transaction

    from tests.contrib_django.project.shop.jobs import Recorded

    with transaction.atomic():
        with pytest.raises(lowkiq.InvalidJob, match="payload"):
            Recorded.perform_async([{"id": "x", "payload": object()}], on_commit=True)
        with pytest.raises(lowkiq.InvalidJob, match="not a job field"):
            Recorded.perform_async([{"id": "x", "colour": "red"}], on_commit=True)
        Recorded.perform_async([{"id": "good"}], on_commit=True)
    assert queued_ids(Recorded) == ["good"]


def test_the_jobs_enqueued_are_those_given_at_the_call(django_lowkiq: redis.Redis) -> None:
    from django.db import transaction

    from tests.contrib_django.project.shop.jobs import Recorded

    with transaction.atomic():
        jobs = [{"id": "first", "payload": "p"}]
        Recorded.perform_async(jobs, on_commit=True)
        jobs.append({"id": "added-later"})
        jobs[0]["id"] = "changed-later"
    assert queued_ids(Recorded) == ["first"]


def test_the_client_middlewares_run_at_the_commit(django_lowkiq: redis.Redis) -> None:
    from django.db import transaction

    from tests.contrib_django.project.shop.jobs import Recorded

    seen: list[list[str]] = []

    def record(worker: type, jobs: list, call_next):  # type: ignore[no-untyped-def]
        seen.append([job["id"] for job in jobs])
        return call_next(worker, jobs)

    lowkiq.settings.client_middlewares = [record]
    with transaction.atomic():
        Recorded.perform_async([{"id": "a"}], on_commit=True)
        assert seen == []
    assert seen == [["a"]]


def test_on_commit_without_django_configured_is_a_clear_error() -> None:
    code = (
        "import lowkiq\n"
        "class W(lowkiq.Worker):\n"
        "    @classmethod\n"
        "    def perform(cls, batch): pass\n"
        "try:\n"
        "    W.perform_async([{'id': 1}], on_commit=True)\n"
        "except lowkiq.ConfigurationError as exc:\n"
        "    print(exc)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "W.perform_async(jobs, on_commit=True)" in result.stdout
    assert "Django is not configured" in result.stdout


def test_an_override_deriving_ids_runs_once_at_the_call(django_lowkiq: redis.Redis) -> None:
    from django.db import transaction

    calls: list[list[dict]] = []

    class Derived(lowkiq.Worker):
        @classmethod
        def perform(cls, payloads_by_id):  # type: ignore[no-untyped-def]
            pass

        @classmethod
        def perform_async(cls, jobs, **options):  # type: ignore[no-untyped-def]
            calls.append(list(jobs))
            derived = [{"id": job["payload"]["order"], **job} for job in jobs]
            super().perform_async(derived, **options)

    with transaction.atomic():
        Derived.perform_async([{"payload": {"order": 7}}], on_commit=True)
    assert calls == [[{"payload": {"order": 7}}]]  # not again at the commit
    assert queued_ids(Derived) == ["7"]


def test_jobs_enqueued_on_commit_inside_a_workflow_are_its_members(
    django_lowkiq: redis.Redis,
) -> None:
    from django.db import transaction

    from tests.contrib_django.project.shop.jobs import Recorded

    with lowkiq.Workflow("orders"), transaction.atomic():
        Recorded.perform_async([{"id": "a", "payload": 1}], on_commit=True)
    # The transaction committed inside the block: its job is a member.
    assert lowkiq.workflow("orders").status() == lowkiq.WorkflowStatus(pending=1)
    # A transaction committing after the block ended: its job cannot join the closed
    # workflow, and the commit says so (nothing enqueued).
    with (
        pytest.raises(lowkiq.WorkflowError, match="'late' is closed"),
        transaction.atomic(),
        lowkiq.Workflow("late") as late,
    ):
        Recorded.perform_async([{"id": "b", "payload": 1}], on_commit=True)
    assert late.status().complete
    assert queued_ids(Recorded) == ["a"]
