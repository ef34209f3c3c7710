"""The one exception hierarchy of lowkiq."""

from __future__ import annotations

from redis.exceptions import OutOfMemoryError


class LowkiqError(Exception):
    """Base class of every error lowkiq raises on purpose."""


class ConfigurationError(LowkiqError):
    """A setting or a worker class attribute has a bad name or value."""


class InvalidJob(LowkiqError, ValueError):
    """A job given to ``perform_async`` is malformed; nothing of that call was enqueued.

    ``index`` is the job's position in the list and ``field`` the offending key;
    ``index`` is ``None`` when the argument as a whole is wrong (not a list of jobs,
    ``field`` ``"jobs"``).
    """

    def __init__(self, index: int | None, field: str, message: str) -> None:
        self.index = index
        self.field = field
        where = "perform_async" if index is None else f"job {index}"
        super().__init__(f"{where}: {field!r} {message}")


class InvalidQuery(LowkiqError, ValueError):
    """A query bound or limit that Redis would reject."""


class UnknownGroup(InvalidQuery):
    """A group a worker does not know (``Worker.actions().pause_group`` and the others):
    none of its jobs is queued or running, and nothing is set for it; nothing changed."""


class WorkflowError(LowkiqError, ValueError):
    """A workflow call that cannot be done as asked (``lowkiq.Workflow``): an unknown
    ``after=`` workflow, a callback that is not a worker, a workflow id reused while
    open, a member enqueued outside an open context; nothing was changed."""


class RedisUnavailable(LowkiqError, ConnectionError):
    """Redis could not be reached; the operation did not happen."""


class EnqueueIncomplete(RedisUnavailable):
    """A Redis Cluster master failed during ``perform_async``, or the queue was resharded
    again and again during it: some jobs are enqueued, the others are not confirmed
    (they may or may not be).

    Enqueueing the unconfirmed jobs again is safe: jobs of one id merge, and an
    equal payload keeps its smallest score.
    """

    def __init__(self, message: str, enqueued: list[str], not_confirmed: list[str]) -> None:
        super().__init__(message)
        #: Ids of the jobs that are enqueued.
        self.enqueued = enqueued
        #: Ids of the jobs that may not be enqueued.
        self.not_confirmed = not_confirmed


class RedisFull(RedisUnavailable):
    """Redis refused a write because it reached maxmemory (OOM).

    Raised by ``perform_async`` (and by any other write lowkiq makes) when Redis
    answers ``OOM command not allowed``.  A call that fits in one script call
    enqueues nothing; a call split into several script calls may stop part-way:
    ``enqueued`` names the ids that are enqueued and ``not_confirmed`` the ids
    that are not (Redis refuses a script whole, so they were not written).
    Free memory (or raise ``maxmemory``) and enqueue ``not_confirmed`` again.
    """

    def __init__(
        self,
        message: str,
        enqueued: list[str] | None = None,
        not_confirmed: list[str] | None = None,
    ) -> None:
        super().__init__(message)
        #: Ids of the jobs that are enqueued (empty when the call wrote nothing).
        self.enqueued = enqueued if enqueued is not None else []
        #: Ids of the jobs that are not enqueued.
        self.not_confirmed = not_confirmed if not_confirmed is not None else []


def is_out_of_memory(error: BaseException) -> bool:
    """Whether a Redis error is its refusal of a write at maxmemory: ``OOM command not
    allowed``, as a command's reply or (Redis before 7) inside a script's error."""
    return isinstance(error, OutOfMemoryError) or "OOM command not allowed" in str(error)


class LeaseLost(LowkiqError):
    """The shard's lease is no longer held by this process: the call changed nothing.

    Raised by pop, ack, fail and restore when the lease token they were given
    is stale (it expired, or another process acquired the shard since).
    """


class StaleBatch(LowkiqError):
    """The batch a call named is no longer in its shard's processing area (it was acked,
    failed or restored already, and another pop took a new batch): the call changed
    nothing."""
