"""A ``django.tasks`` backend running tasks on lowkiq workers.

::

    TASKS = {
        "default": {
            "BACKEND": "lowkiq.contrib.django.tasks.LowkiqBackend",
            "QUEUES": ["default", "emails"],
            "OPTIONS": {"SHARDS": 5, "MAX_RETRIES": 0, "RESULT_TTL": 86400},
        }
    }

Each queue name is a lowkiq queue of its own, ``tasks.<alias>.<queue_name>``
(:mod:`lowkiq.contrib.django.task_worker`), served by ``manage.py lowkiq_worker``.
``task.enqueue(...)`` returns the ``TaskResult`` at once, its ``id`` a new random one;
``get_result(id)`` reads its status (``READY``, ``RUNNING``, ``SUCCESSFUL``,
``FAILED``), errors and return value, kept ``RESULT_TTL`` seconds after the last change.

**Ids and order.** By default every call is a lowkiq job of its own (its id is the
result id): calls run in any order, on any thread.  A task may name the argument that
is the id of the entity it works on, ``@task(lowkiq_id="order_id")``: every call with
the same ``order_id`` is then the same lowkiq job id in its queue, so the calls for one
order merge into one job and run one at a time, in the order they were enqueued, while
different orders run in parallel.  Tasks of one queue naming the same entity id share
the job id (they are ordered together).

What is refused, with ``InvalidTask`` (``InvalidTaskError`` in the backport): a
``priority`` other than 0 (lowkiq has no priorities: give urgent tasks a queue of their
own); a queue not in ``QUEUES``; a ``lowkiq_id`` that names no argument of the function,
or whose value is not a string or an integer.  ``run_after`` is the job's
``perform_in``.
"""

from __future__ import annotations

import inspect
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from django.core.exceptions import ImproperlyConfigured
from django.utils import timezone

from lowkiq.contrib.django import task_results
from lowkiq.contrib.django.task_worker import (
    DEFAULT_RESULT_TTL,
    TaskWorker,
    build_result,
    load_task,
    worker_for,
)
from lowkiq.contrib.django.tasks_api import (
    BaseTaskBackend,
    InvalidTask,
    Task,
    TaskResultDoesNotExist,
    TaskResultStatus,
    task_enqueued,
)

#: The backend's OPTIONS and their defaults.
DEFAULT_OPTIONS: Mapping[str, Any] = {
    "SHARDS": 5,
    "MAX_RETRIES": 0,
    "RESULT_TTL": DEFAULT_RESULT_TTL,
}


@dataclass(frozen=True, slots=True, kw_only=True)
class LowkiqTask(Task):  # type: ignore[misc,type-arg,unused-ignore]
    """A task of :class:`LowkiqBackend`: ``@task(lowkiq_id="order_id")`` names the
    argument whose value is the lowkiq job id (see the module)."""

    #: The argument whose value is the job id; ``None``: every call its own id.
    lowkiq_id: str | None = None


class LowkiqBackend(BaseTaskBackend):  # type: ignore[misc,unused-ignore]
    """Runs ``django.tasks`` tasks on lowkiq workers (see the module)."""

    task_class = LowkiqTask
    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = False

    #: What the app asks to serve a backend's queues (:mod:`lowkiq.contrib.django.apps`).
    lowkiq_backend: ClassVar[bool] = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        self.workers = {worker.task_queue: worker for worker in self.lowkiq_workers(alias, params)}

    @classmethod
    def lowkiq_workers(cls, alias: str, params: Mapping[str, Any]) -> list[type[TaskWorker]]:
        """The worker class of each queue of backend ``alias`` configured by ``params``
        (its ``TASKS`` entry)."""
        queues = params.get("QUEUES", ["default"])
        if not isinstance(queues, (list, tuple, set)) or not queues:
            raise ImproperlyConfigured(
                f"TASKS[{alias!r}]['QUEUES'] must list the queue names: each is a lowkiq "
                f"queue a worker process serves, got {queues!r}"
            )
        options = _options(alias, params.get("OPTIONS", {}))
        return [worker_for(alias, str(name), options) for name in sorted(queues)]

    def validate_task(self, task: Any) -> None:
        """The checks of every backend, lowkiq's message for a priority, and the
        ``lowkiq_id`` argument."""
        if task.priority != 0:
            raise InvalidTask(
                f"{task.name}: lowkiq has no task priorities (got priority {task.priority}); "
                "give the urgent tasks a queue of their own (TASKS QUEUES)"
            )
        super().validate_task(task)
        name = getattr(task, "lowkiq_id", None)
        if name is not None and name not in inspect.signature(task.func).parameters:
            raise InvalidTask(f"{task.name}: lowkiq_id={name!r} names no argument of the task")

    def enqueue(self, task: Any, args: Any, kwargs: Any) -> Any:
        """Enqueue one call of ``task``; return its ``TaskResult`` (status ``READY``)."""
        self.validate_task(task)
        result_id = secrets.token_urlsafe(24)
        document = {
            "task": task.module_path,
            "backend": self.alias,
            "queue": task.queue_name,
            "run_after": None if task.run_after is None else task.run_after.timestamp(),
            "args": list(args),
            "kwargs": dict(kwargs),
            "status": TaskResultStatus.READY,
            "enqueued_at": timezone.now().timestamp(),
            "started_at": None,
            "last_attempted_at": None,
            "finished_at": None,
            "errors": [],
            "worker_ids": [],
            "return_value": None,
        }
        result = build_result(task, result_id, document)  # checks the arguments are JSON
        document["args"], document["kwargs"] = result.args, result.kwargs
        job: dict[str, Any] = {
            "id": self._job_id(task, result_id, args, kwargs),
            "payload": {
                "result": result_id,
                "task": task.module_path,
                "args": result.args,
                "kwargs": result.kwargs,
            },
        }
        if task.run_after is not None:
            job["perform_in"] = task.run_after.timestamp()
        worker = self.workers[task.queue_name]
        ttl = worker.result_ttl
        task_results.write(result_id, document, ttl)
        try:
            worker.perform_async([job])
        except BaseException:
            task_results.delete(result_id)
            raise
        task_enqueued.send(type(self), task_result=result)
        return result

    def get_result(self, result_id: str) -> Any:
        """The ``TaskResult`` of ``result_id`` as stored now; ``TaskResultDoesNotExist``
        when there is none (never enqueued here, or older than ``RESULT_TTL``)."""
        document = task_results.read(result_id)
        if document is None or document.get("backend") != self.alias:
            raise TaskResultDoesNotExist(result_id)
        task = load_task(document["task"], self.alias, document["queue"])
        return build_result(task, result_id, document)

    @staticmethod
    def _job_id(task: Any, result_id: str, args: Iterable[Any], kwargs: Mapping[str, Any]) -> str:
        """The lowkiq job id of one call: the result id, or the value of the argument the
        task names as its ``lowkiq_id``."""
        name = getattr(task, "lowkiq_id", None)
        if name is None:
            return result_id
        arguments = [] if not task.takes_context else [None]
        try:
            bound = inspect.signature(task.func).bind(*arguments, *args, **kwargs)
        except TypeError as exc:
            raise InvalidTask(f"{task.name}: {exc}") from exc
        bound.apply_defaults()
        value = bound.arguments[name]
        if isinstance(value, bool) or not isinstance(value, (str, int)) or value == "":
            raise InvalidTask(
                f"{task.name}: its lowkiq_id argument {name!r} must be a non-empty string or "
                f"an integer, got {value!r}"
            )
        return str(value)


def _options(alias: str, options: Any) -> dict[str, Any]:
    """The backend's OPTIONS with their defaults; an unknown one is refused."""
    if not isinstance(options, Mapping):
        raise ImproperlyConfigured(f"TASKS[{alias!r}]['OPTIONS'] must be a dict, got {options!r}")
    unknown = sorted(set(options) - set(DEFAULT_OPTIONS))
    if unknown:
        raise ImproperlyConfigured(
            f"TASKS[{alias!r}]['OPTIONS']: unknown option(s) {', '.join(map(repr, unknown))}; "
            f"known: {', '.join(DEFAULT_OPTIONS)}"
        )
    merged = {**DEFAULT_OPTIONS, **options}
    for name, minimum in (("SHARDS", 1), ("MAX_RETRIES", 0), ("RESULT_TTL", 0)):
        value = merged[name]
        number = int if name != "RESULT_TTL" else (int, float)
        if (
            isinstance(value, bool)
            or not isinstance(value, number)
            or value < minimum
            or (name == "RESULT_TTL" and not value > 0)
        ):
            kind = "seconds > 0" if name == "RESULT_TTL" else f"an integer >= {minimum}"
            raise ImproperlyConfigured(
                f"TASKS[{alias!r}]['OPTIONS'][{name!r}] must be {kind}, got {value!r}"
            )
    return merged
