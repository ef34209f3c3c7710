"""How a batch ends when ``perform`` raises (SPEC §4, §11 Job control).

Any exception fails the whole batch under the retry rules.  Three exceptions say
something else:

* :class:`Discard`: the batch is dropped, acked without a retry (counted as
  ``discarded``);
* :class:`Kill`: the batch's jobs go to the morgue at once, whatever their retry count
  (``retries_exhausted`` is called with them);
* :class:`Snooze`: the batch's jobs are due again after so many seconds, their retry
  count and error unchanged (counted as ``snoozed``, not as failed);
* :class:`BatchFailed`: only the jobs it names fail, each with its own exception; the
  rest of the batch is acked.

:func:`judge` turns what ``perform`` raised into a :class:`Verdict`: the fate and error
text of each job of the batch, plain data that one script then writes.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lowkiq.errors import LowkiqError

#: The longest delay taken (a job's ``delay``, a :class:`Snooze`): 100 years, in seconds.
MAX_DELAY = 3_155_760_000.0

#: The logger of the shard handlers, which settle batches.
log = logging.getLogger("lowkiq.shard_handler")


class Discard(LowkiqError):
    """Raised from ``perform``: drop the batch without a retry.

    The batch's jobs leave the processing area as if they succeeded, counted as
    ``discarded`` (``Worker.metrics()``), and ``reason`` is logged at info level.
    ``raise lowkiq.Discard("order was cancelled")``.
    """

    def __init__(self, reason: str = "") -> None:
        super().__init__(reason)
        #: Why the batch was dropped (logged).
        self.reason = reason


class Kill(LowkiqError):
    """Raised from ``perform``: send the batch's jobs to the morgue at once.

    No retry, whatever ``retry_count`` and ``max_retry_count`` say: each job goes to the
    morgue whole (every payload ``perform`` got), with this exception as its error, and
    ``retries_exhausted`` is called with them.  For errors retrying cannot help:
    ``raise lowkiq.Kill("no such customer") from exc``.
    """

    def __init__(self, reason: str = "") -> None:
        super().__init__(reason)
        #: Why the jobs are dead (their error's message).
        self.reason = reason


class Snooze(LowkiqError):
    """Raised from ``perform``: put the batch's jobs off for ``seconds``, not failing.

    Each job is due again ``seconds`` from now (Redis's clock), with its retry count and
    error unchanged; no retry is counted, and the jobs are counted as ``snoozed``
    (``Worker.metrics()``).  For a partner that says when to come back:
    ``raise lowkiq.Snooze(response.retry_after)``.  In :class:`BatchFailed`, snoozes
    only the ids it is given for.
    """

    def __init__(self, seconds: float) -> None:
        if (
            isinstance(seconds, bool)
            or not isinstance(seconds, int | float)
            or not 0 <= seconds <= MAX_DELAY
        ):
            raise ValueError(
                f"Snooze(seconds): a number of seconds from 0 to {MAX_DELAY:.0f}, got {seconds!r}"
            )
        super().__init__(f"snoozed for {seconds:g} s")
        #: Seconds until the jobs are due again.
        self.seconds = float(seconds)


class BatchFailed(LowkiqError):
    """Raised from ``perform``: only the ids of ``failures`` failed, the rest of the batch
    succeeded.

    ``failures`` maps an id of the batch (a key of ``payloads_by_id``; another key is
    taken as ``str(key)``) to its own exception: those jobs fail under the retry rules
    (a retry, or the morgue after ``max_retry_count``), each with its exception as its
    error; an exception that is a :class:`Kill` or a :class:`Discard` kills or discards
    that job alone.  The other jobs of the batch are acked, in the same script.  An id
    the batch does not hold is ignored, with a warning in the log.
    """

    def __init__(self, failures: Mapping[Any, Exception]) -> None:
        for job_id, exc in failures.items():
            if not isinstance(exc, Exception):
                raise TypeError(
                    f"BatchFailed: the value for id {job_id!r} must be an exception, "
                    f"not {type(exc).__name__}"
                )
        #: Id (as ``str``) -> the exception of that job.
        self.failures: dict[str, Exception] = {str(k): v for k, v in failures.items()}
        ids = ", ".join(repr(job_id) for job_id in list(self.failures)[:5])
        more = f" and {len(self.failures) - 5} more" if len(self.failures) > 5 else ""
        super().__init__(f"{len(self.failures)} job(s) of the batch failed: {ids}{more}")


class Fate(enum.Enum):
    """How one job of a batch that raised ends; the value is what the ``fail`` script reads."""

    #: The retry rules of SPEC §4: queued again for a retry, or the morgue after
    #: ``max_retry_count``.
    RETRY = "retry"
    #: The morgue at once, whole.
    KILL = "kill"
    #: Dropped, counted as discarded.
    DISCARD = "discard"
    #: Due again later, retry count and error unchanged, counted as snoozed.
    SNOOZE = "snooze"
    #: Acked, counted as processed (a job :class:`BatchFailed` did not name).
    DONE = "done"


@dataclass(frozen=True, slots=True)
class JobVerdict:
    """One job's fate, the error text stored with it (retried and killed jobs), and the
    exception it failed with (for ``Worker.retry_in(retry_count, exception)``)."""

    fate: Fate
    error: str | None = None
    exception: BaseException | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Verdict:
    """How every job of a batch that raised ends, by id (in batch order)."""

    jobs: dict[str, JobVerdict]
    #: Ids a :class:`BatchFailed` named that the batch does not hold (ignored).
    unknown: list[str] = field(default_factory=list)

    def ids(self, fate: Fate) -> list[str]:
        """The ids of the jobs of ``fate``, in batch order."""
        return [job_id for job_id, job in self.jobs.items() if job.fate is fate]

    @property
    def failed(self) -> bool:
        """Whether a job of the batch failed (retried or killed)."""
        return any(job.fate in (Fate.RETRY, Fate.KILL) for job in self.jobs.values())


def fate_of(exc: Exception) -> Fate:
    """The fate an exception gives the jobs it is raised for."""
    if isinstance(exc, Discard):
        return Fate.DISCARD
    if isinstance(exc, Kill):
        return Fate.KILL
    if isinstance(exc, Snooze):
        return Fate.SNOOZE
    return Fate.RETRY


def judge(
    exc: Exception, ids: Sequence[str], format_error: Callable[[BaseException], str]
) -> Verdict:
    """The verdict on a batch of ``ids`` whose ``perform`` raised ``exc``; ``format_error``
    gives the error text of each retried or killed job (called once per exception)."""
    if isinstance(exc, BatchFailed):
        return _judge_some(exc, ids, format_error)
    verdict = _job_verdict(exc, format_error)
    return Verdict({job_id: verdict for job_id in ids})


def _judge_some(
    exc: BatchFailed, ids: Sequence[str], format_error: Callable[[BaseException], str]
) -> Verdict:
    done = JobVerdict(Fate.DONE)
    jobs = {job_id: done for job_id in ids}
    for job_id, failure in exc.failures.items():
        if job_id in jobs:
            jobs[job_id] = _job_verdict(failure, format_error)
    return Verdict(jobs, [job_id for job_id in exc.failures if job_id not in jobs])


def _job_verdict(exc: Exception, format_error: Callable[[BaseException], str]) -> JobVerdict:
    fate = fate_of(exc)
    stored = fate in (Fate.RETRY, Fate.KILL)  # a discarded or snoozed job keeps its error
    return JobVerdict(fate, format_error(exc) if stored else None, exc)


def log_failure(
    name: str, size: int, failure: Exception, verdict: Verdict, fields: dict[str, Any]
) -> None:
    """Log how a batch of ``size`` jobs of shard ``name`` ends after ``failure``: a
    discard at info, a failure or a kill as a warning with its traceback, each job a
    :class:`BatchFailed` names apart, and the ids it names that the batch does not hold."""
    if not isinstance(failure, BatchFailed):
        _log_end(name, f"batch of {size} job(s)", failure, fields)
        return
    for job_id, exc in failure.failures.items():
        if job_id in verdict.jobs:
            _log_end(name, f"job {job_id!r} of a batch of {size}", exc, fields)
    if verdict.unknown:
        log.warning(
            "%s: BatchFailed names id(s) its batch does not hold, ignored: %s",
            name,
            ", ".join(repr(job_id) for job_id in verdict.unknown),
            extra=fields,
        )


def _log_end(name: str, what: str, exc: Exception, fields: dict[str, Any]) -> None:
    fate = fate_of(exc)
    if fate is Fate.DISCARD:
        log.info("%s: %s discarded: %s", name, what, str(exc) or "no reason given", extra=fields)
        return
    if fate is Fate.SNOOZE:
        log.info("%s: %s %s", name, what, exc, extra=fields)
        return
    ended = "killed (to the morgue at once)" if fate is Fate.KILL else "failed"
    log.warning(
        "%s: %s %s: %s: %s", name, what, ended, type(exc).__name__, exc, exc_info=exc, extra=fields
    )
