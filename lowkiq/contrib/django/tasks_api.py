"""The Django tasks framework: ``django.tasks`` (Django 6 and later) when Django has it,
else the ``django_tasks`` package, its backport by the same author (Django 5.2)."""

from __future__ import annotations

from typing import Any

try:
    from django.tasks import exceptions, signals  # type: ignore[import-not-found,unused-ignore]
    from django.tasks.backends.base import (  # type: ignore[import-not-found,unused-ignore]
        BaseTaskBackend,
    )
    from django.tasks.base import (  # type: ignore[import-not-found,unused-ignore]
        Task,
        TaskContext,
        TaskError,
        TaskResult,
        TaskResultStatus,
    )
except ImportError:
    from django_tasks import exceptions, signals  # type: ignore[no-redef,unused-ignore]
    from django_tasks.backends.base import (  # type: ignore[no-redef,unused-ignore]
        BaseTaskBackend,
    )
    from django_tasks.base import (  # type: ignore[no-redef,unused-ignore]
        Task,
        TaskContext,
        TaskError,
        TaskResult,
        TaskResultStatus,
    )

#: A task the backend cannot run (Django 6: ``InvalidTask``; the backport: ``InvalidTaskError``).
InvalidTask: type[Exception] = (
    getattr(exceptions, "InvalidTask", None) or exceptions.InvalidTaskError
)
#: ``get_result`` of an id that has no result (any more).
TaskResultDoesNotExist: type[Exception] = exceptions.TaskResultDoesNotExist

task_enqueued: Any = signals.task_enqueued
task_started: Any = signals.task_started
task_finished: Any = signals.task_finished

__all__ = [
    "BaseTaskBackend",
    "InvalidTask",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultStatus",
    "task_enqueued",
    "task_finished",
    "task_started",
]
