"""lowkiq: ordered background-job processing on Redis.

Jobs are sharded by id; each shard is processed by one thread at a time, under a
lease, and jobs with the same id are merged, so updates about one entity are
processed one after the other and in order.  A process frozen in ``perform`` past
its lease is the exception; ``current_batch().lease.fence`` fences your writes.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from lowkiq.errors import (
    ConfigurationError,
    EnqueueIncomplete,
    InvalidJob,
    InvalidQuery,
    LeaseLost,
    LowkiqError,
    RedisFull,
    RedisUnavailable,
    UnknownGroup,
    WorkflowError,
)
from lowkiq.iterable import IterableWorker
from lowkiq.limits.rate_limit import RateLimit
from lowkiq.outcomes import BatchFailed, Discard, Kill, Snooze
from lowkiq.ownership.status import Process, Processes, QueueOwners, command_process, processes
from lowkiq.perform.timeouts import PerformHardTimeout, PerformTimeout
from lowkiq.periodic import Schedule
from lowkiq.periodic import control as _schedule_control
from lowkiq.periodic.control import ScheduleError, ScheduleInfo
from lowkiq.periodic.status import UnknownSchedule
from lowkiq.running import BatchLease, RunningBatch, current_batch
from lowkiq.serializers import Undecodable
from lowkiq.settings import Settings, settings
from lowkiq.storage.actions import Actions, JobsRunning
from lowkiq.storage.job_events import JobEvent, queue_events
from lowkiq.storage.metrics import Overview, QueueMetrics
from lowkiq.storage.metrics import overview as metrics_overview
from lowkiq.storage.pausing import paused_queues
from lowkiq.storage.queries import Job, Queries
from lowkiq.strategies.schedulers import build_lag_scheduler, build_seq_scheduler
from lowkiq.strategies.splitters import build_by_node_splitter, build_default_splitter
from lowkiq.telemetry import history as _history
from lowkiq.telemetry.counts import Counts
from lowkiq.telemetry.history import History, Span
from lowkiq.version import __version__
from lowkiq.worker import Worker
from lowkiq.workflows.context import Workflow, WorkflowRef, workflow
from lowkiq.workflows.status import WorkflowStatus


def overview(config: Settings = settings) -> Overview:
    """The queue metrics of every worker of ``config`` (in order) and their totals."""
    client = config.client()
    return metrics_overview(
        client, {worker.__name__: worker.queue(client, config) for worker in config.workers}
    )


def history(
    minutes: int = 60, workers: list[str] | None = None, config: Settings = settings
) -> dict[str, History]:
    """The stored metrics of the last ``minutes`` minutes (at most 72 hours) of each
    worker of ``config`` (or of those named in ``workers``), by worker name."""
    client = config.client()
    chosen = [w for w in config.workers if workers is None or w.__name__ in workers]
    return _history.read(client, {w.__name__: w.queue_name for w in chosen}, minutes)


def paused_workers(config: Settings = settings) -> set[str]:
    """The names of the workers of ``config`` whose queues are paused (``Worker.pause``)."""
    paused = paused_queues(config.client())
    return {worker.__name__ for worker in config.workers if worker.queue_name in paused}


def events(
    worker: type[Worker],
    since: float | None = None,
    follow: bool = False,
    poll: float = 0.5,
    config: Settings = settings,
) -> Iterator[JobEvent]:
    """The recorded job events of ``worker`` (``Worker.track``): those kept (from
    ``since``, Unix seconds, when given), in time order; with ``follow``, then each new
    one as it comes (read every ``poll`` seconds), without end.  Events of one id come
    in their order; those of different shards in the order of Redis's clock.  Raises
    :class:`ConfigurationError` when ``worker.track`` is off (nothing is recorded)."""
    worker._check_tracked("events")
    return queue_events(worker._current_queue(config), since, follow, poll)


def schedules(config: Settings = settings) -> list[ScheduleInfo]:
    """Every schedule: those of ``settings.schedules`` with what was changed at run time
    (paused, ticks changed, removed) and those added at run time, each with its worker,
    cron or period, next and last run and where it comes from.  Change them with
    :mod:`lowkiq.periodic.control` (``pause``, ``resume``, ``change``, ``add``,
    ``remove``, ``reset``), ``lowkiq schedules`` or the dashboard."""
    return _schedule_control.schedules(config)


def stats() -> dict[str, Any]:
    """The ``/api/v1/stats`` document over ``settings.workers``: ``length``,
    ``morgue_length`` and ``lag`` in total (lag: the largest) and by worker."""
    return overview().stats()


__all__ = [
    "Actions",
    "BatchFailed",
    "ConfigurationError",
    "Counts",
    "Discard",
    "EnqueueIncomplete",
    "History",
    "InvalidJob",
    "InvalidQuery",
    "IterableWorker",
    "BatchLease",
    "Job",
    "JobEvent",
    "JobsRunning",
    "Kill",
    "LeaseLost",
    "LowkiqError",
    "Overview",
    "PerformHardTimeout",
    "PerformTimeout",
    "Process",
    "Processes",
    "Queries",
    "QueueMetrics",
    "QueueOwners",
    "RateLimit",
    "RedisFull",
    "RedisUnavailable",
    "RunningBatch",
    "Schedule",
    "ScheduleError",
    "ScheduleInfo",
    "Snooze",
    "Span",
    "Undecodable",
    "UnknownGroup",
    "UnknownSchedule",
    "Worker",
    "Workflow",
    "WorkflowError",
    "WorkflowRef",
    "WorkflowStatus",
    "__version__",
    "build_by_node_splitter",
    "build_default_splitter",
    "build_lag_scheduler",
    "build_seq_scheduler",
    "command_process",
    "current_batch",
    "events",
    "history",
    "overview",
    "paused_workers",
    "processes",
    "schedules",
    "settings",
    "stats",
    "workflow",
]


def _name_errors_publicly() -> None:
    """Give every exception of :data:`__all__` the module users import it from,
    ``lowkiq``: a job's stored error and a traceback read ``lowkiq.Kill: ...``, not the
    module it is defined in (``lowkiq.outcomes.Kill``)."""
    for name in __all__:
        value = globals()[name]
        if isinstance(value, type) and issubclass(value, BaseException):
            value.__module__ = __name__


_name_errors_publicly()
