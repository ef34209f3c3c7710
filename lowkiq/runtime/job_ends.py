"""How each job of a batch whose ``perform`` raised ends, before the fail script settles it.

:func:`judge_batch` gives the verdict (:func:`lowkiq.outcomes.judge`) with the error
texts of the process's ``format_error``; :func:`job_ends` turns it into the script's
:class:`~lowkiq.storage.processing.JobEnd` rows: a retried job is due again after
``Worker.retry_in``, a snoozed one after its :class:`~lowkiq.outcomes.Snooze`.  The
user's ``format_error`` and ``retry_in`` may raise: lowkiq's defaults then stand in, and
the shard's log says so.  No Redis call here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from lowkiq.outcomes import Fate, Snooze, Verdict, judge
from lowkiq.serializers import format_error as default_format_error
from lowkiq.storage.processing import JobEnd, PoppedJob
from lowkiq.worker import Worker, retry_in_takes_exception

# The shard handler's logger: these lines are about its batches.
log = logging.getLogger("lowkiq.shard_handler")


def judge_batch(
    name: str,
    format_error: Callable[[BaseException], str],
    batch: Sequence[PoppedJob],
    exc: Exception,
) -> Verdict:
    """How each job of shard ``name``'s ``batch`` ends now that ``perform`` raised
    ``exc``, its error text by ``format_error`` (lowkiq's own when that raises)."""

    def error_text(error: BaseException) -> str:
        try:
            return format_error(error)
        except Exception:
            log.exception("%s: format_error raised; storing lowkiq's default text", name)
            return default_format_error(error)

    return judge(exc, [job.id for job in batch], error_text)


def job_ends(
    name: str, worker: type[Worker], batch: Sequence[PoppedJob], verdict: Verdict
) -> list[JobEnd]:
    """The fail script's view of ``verdict`` on shard ``name``'s ``batch``: a retried
    job's delay comes from ``worker.retry_in``, a snoozed one's from its Snooze."""
    ends = []
    for job in batch:
        end = verdict.jobs[job.id]
        delay = 0.0
        if end.fate is Fate.RETRY:
            delay = _retry_in(name, worker, job.retry_count + 1, end.exception)
        elif isinstance(end.exception, Snooze):
            delay = end.exception.seconds
        ends.append(JobEnd(job.id, end.fate, end.error, delay))
    return ends


def _retry_in(
    name: str, worker: type[Worker], retry_count: int, exception: BaseException | None
) -> float:
    """``Worker.retry_in``'s delay (given the exception when it takes two arguments);
    the default delay when it raises."""
    try:
        retry_in: Callable[..., float] = worker.retry_in
        if retry_in_takes_exception(worker):
            return float(retry_in(retry_count, exception))
        return float(retry_in(retry_count))
    except Exception:
        log.exception("%s: retry_in raised; using the default delay", name)
        return float(Worker.retry_in(retry_count))
