"""The ``django.tasks`` backend: tasks enqueued with ``.enqueue()`` run on a real
``manage.py lowkiq_worker``, their results read back with ``get_result``."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.apps.runner import eventually
from tests.contrib_django.conftest import ManagedWorker


@pytest.fixture
def tasks(django_lowkiq: redis.Redis) -> Iterator[Any]:
    from tests.contrib_django.project.shop import tasks

    yield tasks


def finished(task: Any, result_id: str) -> Callable[[], Any]:
    def check() -> Any:
        result = task.get_result(result_id)
        return result if result.is_finished else None

    return check


def test_a_task_runs_on_a_lowkiq_worker_and_its_result_is_read_back(
    tasks: Any, django_worker: Callable[..., ManagedWorker]
) -> None:
    from lowkiq.contrib.django.tasks_api import TaskResultStatus

    result = tasks.add.enqueue(2, 3)
    assert result.id and result.status == TaskResultStatus.READY
    assert result.enqueued_at is not None and result.enqueued_at.tzinfo is not None
    stored = tasks.add.get_result(result.id)
    assert (stored.status, stored.args, stored.backend) == (
        TaskResultStatus.READY,
        [2, 3],
        "default",
    )
    django_worker("--threads", "2")
    done = eventually(finished(tasks.add, result.id))
    assert done.status == TaskResultStatus.SUCCESSFUL
    assert done.return_value == 5
    assert done.attempts == 1 and done.errors == []
    assert done.started_at <= done.finished_at
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == 5


def test_a_task_that_raises_is_failed_with_its_error(
    tasks: Any, django_worker: Callable[..., ManagedWorker]
) -> None:
    from lowkiq.contrib.django.tasks_api import TaskResultStatus

    django_worker("--threads", "1")
    result = tasks.fail.enqueue("no stock")
    done = eventually(finished(tasks.fail, result.id))
    assert done.status == TaskResultStatus.FAILED
    assert [error.exception_class for error in done.errors] == [ValueError]
    assert "ValueError: no stock" in done.errors[0].traceback
    with pytest.raises(ValueError, match="failed"):
        done.return_value  # noqa: B018


def test_a_queue_name_is_a_lowkiq_queue_of_its_own(tasks: Any) -> None:
    import lowkiq
    from lowkiq.contrib.django.task_worker import TaskWorker

    tasks.send_email.enqueue("ann@example.com")
    by_queue = {w.queue_name: w for w in lowkiq.settings.workers if issubclass(w, TaskWorker)}
    assert by_queue["tasks.default.emails"].metrics()["length"] == 1
    assert by_queue["tasks.default.default"].metrics()["length"] == 0


def test_calls_naming_one_entity_run_one_at_a_time_in_order(
    tasks: Any, django_worker: Callable[..., ManagedWorker], tmp_path: Path
) -> None:
    import lowkiq

    record = tmp_path / "orders.jsonl"
    results = []
    for version in range(1, 21):
        for order in (1, 2, 3):
            results.append(tasks.update_order.enqueue(order_id=order, version=version))
    default = next(w for w in lowkiq.settings.workers if w.queue_name == "tasks.default.default")
    # One job per order, each holding its 20 updates.
    assert sorted(job["id"] for job in default.queries().range_by_id("-", "+")) == ["1", "2", "3"]
    django_worker("--threads", "2", RECORD_FILE=str(record))
    eventually(lambda: all(finished(tasks.update_order, r.id)() for r in results))
    seen = [json.loads(line) for line in record.read_text().splitlines()]
    for order in (1, 2, 3):
        assert [version for o, version in seen if o == order] == list(range(1, 21))
    assert tasks.update_order.get_result(results[-1].id).return_value == 20


def test_without_an_entity_argument_every_call_is_its_own_job(tasks: Any) -> None:
    import lowkiq

    first, second = tasks.add.enqueue(1, 1), tasks.add.enqueue(1, 1)
    default = next(w for w in lowkiq.settings.workers if w.queue_name == "tasks.default.default")
    ids = sorted(job["id"] for job in default.queries().range_by_id("-", "+"))
    assert ids == sorted([first.id, second.id])


def test_what_the_backend_cannot_do_is_refused_clearly(tasks: Any) -> None:
    from lowkiq.contrib.django.tasks_api import InvalidTask, TaskResultDoesNotExist

    with pytest.raises(InvalidTask, match="lowkiq has no task priorities"):
        tasks.add.using(priority=10)
    with pytest.raises(InvalidTask, match="not valid for backend"):
        tasks.add.using(queue_name="elsewhere")
    with pytest.raises(InvalidTask, match="lowkiq_id='order' names no argument"):
        from django_tasks import task

        task(lowkiq_id="order")(tasks.add.func)
    with pytest.raises(InvalidTask, match="must be a non-empty string or an integer"):
        tasks.update_order.enqueue(order_id=None, version=1)
    with pytest.raises(TypeError):
        tasks.add.enqueue(object(), 1)
    with pytest.raises(TaskResultDoesNotExist):
        tasks.add.get_result("no-such-result")


def test_run_after_is_the_job_s_perform_in(tasks: Any) -> None:
    from datetime import datetime, timedelta, timezone

    import lowkiq

    later = datetime.now(timezone.utc) + timedelta(hours=1)
    result = tasks.add.using(run_after=later).enqueue(1, 2)
    default = next(w for w in lowkiq.settings.workers if w.queue_name == "tasks.default.default")
    (job,) = default.queries().fetch([result.id])
    assert job["perform_in"] == pytest.approx(later.timestamp(), abs=0.01)


def test_an_async_task_runs_too(tasks: Any, django_worker: Callable[..., ManagedWorker]) -> None:
    from lowkiq.contrib.django.tasks_api import TaskResultStatus

    django_worker("--threads", "1")
    result = tasks.multiply.enqueue(6, 7)
    done = eventually(finished(tasks.multiply, result.id))
    assert (done.status, done.return_value) == (TaskResultStatus.SUCCESSFUL, 42)


def queued_payload(result_id: str) -> Any:
    import lowkiq

    default = next(w for w in lowkiq.settings.workers if w.queue_name == "tasks.default.default")
    (job,) = default.queries().fetch([result_id])
    return default, job["payloads"][0][0]


def test_a_failed_try_with_a_retry_left_is_ready_then_failed_on_the_last(tasks: Any) -> None:
    from lowkiq.contrib.django.task_worker import run_task
    from lowkiq.contrib.django.tasks_api import TaskResultStatus

    result = tasks.fail.enqueue("flaky")
    worker, payload = queued_payload(result.id)
    with pytest.raises(ValueError, match="flaky"):
        run_task(worker, payload, last_try=False)
    retried = tasks.fail.get_result(result.id)
    assert retried.status == TaskResultStatus.READY and not retried.is_finished
    assert (retried.attempts, len(retried.errors)) == (1, 1)
    with pytest.raises(ValueError, match="flaky"):
        run_task(worker, payload, last_try=True)
    failed = tasks.fail.get_result(result.id)
    assert failed.status == TaskResultStatus.FAILED
    assert (failed.attempts, len(failed.errors)) == (2, 2)


def test_a_successful_call_is_not_run_again_when_its_job_is_retried(
    tasks: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lowkiq.contrib.django.task_worker import run_task

    record = tmp_path / "orders.jsonl"
    monkeypatch.setenv("RECORD_FILE", str(record))
    result = tasks.update_order.enqueue(order_id=7, version=1)
    worker, payload = queued_payload("7")
    run_task(worker, payload, last_try=False)
    run_task(worker, payload, last_try=False)  # the job retried after a later call failed
    assert record.read_text().splitlines() == ["[7, 1]"]
    assert tasks.update_order.get_result(result.id).attempts == 1


def test_a_failed_update_holds_the_later_updates_of_its_entity(
    tasks: Any, django_worker: Callable[..., ManagedWorker], tmp_path: Path
) -> None:
    import lowkiq
    from lowkiq.contrib.django.tasks_api import TaskResultStatus

    record = tmp_path / "orders.jsonl"
    first = tasks.update_order.enqueue(order_id=5, version=1)
    bad = tasks.update_order.enqueue(order_id=5, version=-2)
    later = tasks.update_order.enqueue(order_id=5, version=3)
    other = tasks.update_order.enqueue(order_id=6, version=1)
    django_worker("--threads", "1", RECORD_FILE=str(record))
    eventually(finished(tasks.update_order, bad.id))
    eventually(finished(tasks.update_order, other.id))
    status = {r.id: tasks.update_order.get_result(r.id).status for r in (first, bad, later)}
    assert status == {
        first.id: TaskResultStatus.SUCCESSFUL,
        bad.id: TaskResultStatus.FAILED,
        later.id: TaskResultStatus.READY,  # waits with the failed update, not run past it
    }
    assert [json.loads(line) for line in record.read_text().splitlines()] == [[5, 1], [6, 1]]
    default = next(w for w in lowkiq.settings.workers if w.queue_name == "tasks.default.default")
    (dead,) = default.queries().morgue_fetch(["5"])
    assert [payload["result"] for payload, _ in dead["payloads"]][-2:] == [bad.id, later.id]


def test_a_bad_backend_option_is_improperly_configured(django_lowkiq: redis.Redis) -> None:
    from django.core.exceptions import ImproperlyConfigured

    from lowkiq.contrib.django.tasks import LowkiqBackend

    for options, message in (
        ({"SHARD": 3}, "unknown option"),
        ({"SHARDS": 0}, "SHARDS.*an integer >= 1"),
        ({"MAX_RETRIES": -1}, "MAX_RETRIES.*an integer >= 0"),
        ({"RESULT_TTL": 0}, "RESULT_TTL.*seconds > 0"),
    ):
        with pytest.raises(ImproperlyConfigured, match=message):
            LowkiqBackend.lowkiq_workers("other", {"QUEUES": ["default"], "OPTIONS": options})
    with pytest.raises(ImproperlyConfigured, match="QUEUES"):
        LowkiqBackend.lowkiq_workers("other", {"QUEUES": []})
