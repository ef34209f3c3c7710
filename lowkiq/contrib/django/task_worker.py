"""The lowkiq workers that run ``django.tasks`` tasks: one worker class (one lowkiq
queue) per backend alias and task queue name, ``tasks.<alias>.<queue_name>``.

A job's payload names the task (its dotted path), its arguments and its result id.
The payloads of one job id (one entity, see :class:`lowkiq.contrib.django.tasks.LowkiqTask`)
run one after the other, in the order they were enqueued.  A task that raises fails
its job: the payloads after it in that job wait, so an entity's updates never run past a
failed one.  When the job is retried, the payloads whose result is already ``SUCCESSFUL``
are not run again; after ``MAX_RETRIES`` retries (default 0) the job goes to the morgue,
the failed result ``FAILED``.
"""

from __future__ import annotations

import json
import os
import socket
import time
import traceback
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any, ClassVar

from django.conf import settings as django_settings
from django.utils.module_loading import import_string

import lowkiq
from lowkiq.contrib.django import task_results
from lowkiq.contrib.django.tasks_api import (
    InvalidTask,
    Task,
    TaskContext,
    TaskError,
    TaskResult,
    TaskResultStatus,
    task_finished,
    task_started,
)

#: Seconds a result is kept after its last change, unless the backend's OPTIONS say.
DEFAULT_RESULT_TTL = 24 * 3600.0


class TaskWorker(lowkiq.Worker):
    """Runs the tasks of one queue of one ``LowkiqBackend``; made by :func:`worker_for`."""

    #: One job (one id, all its payloads in order) per batch.
    batch_size: ClassVar[int] = 1
    max_retry_count: ClassVar[int] = 0
    #: The backend alias and the task queue name this worker serves.
    backend_alias: ClassVar[str] = ""
    task_queue: ClassVar[str] = ""
    result_ttl: ClassVar[float] = DEFAULT_RESULT_TTL

    @classmethod
    def perform(cls, payloads_by_id: dict[str, list[Any]]) -> None:
        """Run each payload's task in order; an id whose task raised stops there and fails."""
        batch = lowkiq.current_batch()
        retry_counts: Mapping[str, int] = batch.retry_counts if batch is not None else {}
        failures: dict[Any, Exception] = {}
        for job_id, payloads in payloads_by_id.items():
            last_try = retry_counts.get(job_id, -1) + 1 >= cls.max_retry_count
            for payload in payloads:
                try:
                    run_task(cls, payload, last_try)
                except Exception as exc:
                    # The last try: the whole job (this payload and those after it) goes to
                    # the morgue, where it can be queued up again.
                    failures[job_id] = lowkiq.Kill(_describe(exc)) if last_try else exc
                    break
        if failures:
            raise lowkiq.BatchFailed(failures)

    @classmethod
    def retries_exhausted(cls, jobs: list[dict[str, Any]]) -> None:
        """Jobs moved to the morgue another way (their process died running them too
        often): a result left ``RUNNING`` becomes ``FAILED``."""
        for job in jobs:
            for payload, _score in job["payloads"]:
                document = task_results.read(payload["result"])
                if document is None or document["status"] != TaskResultStatus.RUNNING:
                    continue
                document["status"] = TaskResultStatus.FAILED
                document["finished_at"] = time.time()
                document["errors"].append(
                    {"exception_class_path": "lowkiq.Kill", "traceback": job.get("error", "")}
                )
                task_results.write(payload["result"], document, cls.result_ttl)


def worker_for(alias: str, queue_name: str, options: Mapping[str, Any]) -> type[TaskWorker]:
    """The worker class of ``alias``'s queue ``queue_name`` (the same class for the same
    pair), with the backend's options."""
    name = f"tasks.{alias}.{queue_name}"
    attributes = {
        "shards_count": options["SHARDS"],
        "max_retry_count": options["MAX_RETRIES"],
        "result_ttl": float(options["RESULT_TTL"]),
    }
    worker = _WORKERS.get(name)
    if worker is None:
        if any(c in name for c in "{}\0"):
            raise InvalidTask(f"queue name {queue_name!r}: lowkiq queue names have no braces")
        worker = type(
            name,
            (TaskWorker,),
            {
                "__module__": __name__,
                "__doc__": f"The tasks of queue {queue_name!r} of backend {alias!r}.",
                "queue_name": name,
                "backend_alias": alias,
                "task_queue": queue_name,
                **attributes,
            },
        )
        _WORKERS[name] = worker
    else:
        for attribute, value in attributes.items():
            setattr(worker, attribute, value)
        worker.validate()
    return worker


_WORKERS: dict[str, type[TaskWorker]] = {}


def run_task(worker: type[TaskWorker], payload: Mapping[str, Any], last_try: bool) -> None:
    """Run the task of one payload, recording its result; raise what the task raised."""
    result_id = payload["result"]
    document = task_results.read(result_id) or new_document(worker, payload)
    if document["status"] == TaskResultStatus.SUCCESSFUL:
        return  # run before, in a try of this job that failed on a later payload
    try:
        task = load_task(payload["task"], worker.backend_alias, worker.task_queue)
    except Exception as exc:
        _record_failure(worker, result_id, document, exc, last_try)
        raise
    now = time.time()
    document["status"] = TaskResultStatus.RUNNING
    document["started_at"] = document["started_at"] or now
    document["last_attempted_at"] = now
    document["worker_ids"].append(f"{socket.gethostname()}:{os.getpid()}")
    task_results.write(result_id, document, worker.result_ttl)
    backend = type(task.get_backend())
    result = build_result(task, result_id, document)
    task_started.send(backend, task_result=result)
    try:
        args, kwargs = payload["args"], payload["kwargs"]
        if task.takes_context:
            value = task.call(TaskContext(task_result=result), *args, **kwargs)
        else:
            value = task.call(*args, **kwargs)
        document["return_value"] = json.loads(json.dumps(value))
    except Exception as exc:
        _record_failure(worker, result_id, document, exc, last_try)
        if last_try:
            task_finished.send(backend, task_result=build_result(task, result_id, document))
        raise
    document["status"] = TaskResultStatus.SUCCESSFUL
    document["finished_at"] = time.time()
    task_results.write(result_id, document, worker.result_ttl)
    task_finished.send(backend, task_result=build_result(task, result_id, document))


def _record_failure(
    worker: type[TaskWorker],
    result_id: str,
    document: dict[str, Any],
    exc: Exception,
    last_try: bool,
) -> None:
    """Store the error of a failed try: ``FAILED`` on the last try, else ``READY`` (a
    retry is scheduled)."""
    document["errors"].append(
        {
            "exception_class_path": f"{type(exc).__module__}.{type(exc).__qualname__}",
            "traceback": "".join(traceback.format_exception(exc)),
        }
    )
    document["status"] = TaskResultStatus.FAILED if last_try else TaskResultStatus.READY
    if last_try:
        document["finished_at"] = time.time()
    task_results.write(result_id, document, worker.result_ttl)


def new_document(worker: type[TaskWorker], payload: Mapping[str, Any]) -> dict[str, Any]:
    """A result's document as enqueued (for a payload whose stored result has expired)."""
    return {
        "task": payload["task"],
        "backend": worker.backend_alias,
        "queue": worker.task_queue,
        "run_after": None,
        "args": payload["args"],
        "kwargs": payload["kwargs"],
        "status": TaskResultStatus.READY,
        "enqueued_at": None,
        "started_at": None,
        "last_attempted_at": None,
        "finished_at": None,
        "errors": [],
        "worker_ids": [],
        "return_value": None,
    }


def load_task(path: str, alias: str, queue_name: str) -> Any:
    """The task at dotted ``path``, on backend ``alias`` and queue ``queue_name``."""
    task = import_string(path)
    if not isinstance(task, Task):
        raise InvalidTask(f"{path} is not a task (decorate it with @task)")
    if task.backend != alias or task.queue_name != queue_name:
        task = replace(task, backend=alias, queue_name=queue_name)
    return task


def build_result(task: Any, result_id: str, document: Mapping[str, Any]) -> Any:
    """The ``TaskResult`` of a stored document."""
    result = TaskResult(
        task=task,
        id=result_id,
        status=TaskResultStatus(document["status"]),
        enqueued_at=to_datetime(document["enqueued_at"]),
        started_at=to_datetime(document["started_at"]),
        finished_at=to_datetime(document["finished_at"]),
        last_attempted_at=to_datetime(document["last_attempted_at"]),
        args=document["args"],
        kwargs=document["kwargs"],
        backend=task.backend,
        errors=[TaskError(**error) for error in document["errors"]],
        worker_ids=list(document["worker_ids"]),
    )
    object.__setattr__(result, "_return_value", document["return_value"])
    return result


def to_datetime(value: float | None) -> datetime | None:
    """A stored unix time as Django gives times: aware (UTC) with ``USE_TZ``, else naive
    local time."""
    if value is None:
        return None
    if django_settings.USE_TZ:
        return datetime.fromtimestamp(value, tz=timezone.utc)
    return datetime.fromtimestamp(value)


def _describe(exc: Exception) -> str:
    return f"{type(exc).__module__}.{type(exc).__qualname__}: {exc}"
