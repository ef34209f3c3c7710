"""The ``lowkiq.Worker`` base class: defaults, ``perform_async`` and the per-queue views."""

from __future__ import annotations

import functools
import inspect
import logging
import operator
import random
import threading
import types
import weakref
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, ClassVar, Literal

import redis

from lowkiq.aio.producer import aperform_async, raise_enqueue_failure
from lowkiq.aio.reads import AsyncQueries, async_queue_metrics
from lowkiq.clients.connection import Client
from lowkiq.clients.memory_policy import PRODUCER_GATE
from lowkiq.errors import ConfigurationError
from lowkiq.limits.rate_limit import (
    RateLimit,
    RateLimitStatus,
    check_rate_limit,
    clear_rate_limit,
    rate_limit_overrides,
    rate_limit_status,
    set_rate_limit,
)
from lowkiq.middleware import chain
from lowkiq.ownership import leases
from lowkiq.perform.coroutines import call_retries_exhausted
from lowkiq.perform.timeouts import check_perform_hard_timeout, check_perform_timeout
from lowkiq.settings import Settings, settings
from lowkiq.storage import pausing
from lowkiq.storage.enqueueing import max_bulk_len
from lowkiq.storage.job_events import JobEvent, job_history
from lowkiq.storage.jobs import (
    check_group_weights,
    check_job_list,
    check_merge_perform_in,
    validate_jobs,
)
from lowkiq.storage.metrics import QueueMetrics, queue_metrics
from lowkiq.storage.push_plan import NewJob
from lowkiq.storage.queries import Queries
from lowkiq.storage.queue import Queue
from lowkiq.storage.unreachable import unreachable_raises
from lowkiq.workflows.actions import HeldActions
from lowkiq.workflows.context import Workflow, check_after, hold_jobs, members_of
from lowkiq.workflows.context import current as current_workflow

log = logging.getLogger("lowkiq.worker")

#: What :meth:`Worker.validate` checks, but ``group_weights`` (compared as a copy).
_checked_attributes = operator.attrgetter(
    "shards_count",
    "batch_size",
    "max_retry_count",
    "max_restores",
    "max_perform_seconds",
    "queue_name",
    "rate_limit",
    "perform_timeout",
    "perform_hard_timeout",
    "merge_perform_in",
    "group_concurrency",
    "track",
    "track_length",
    "weight",
)
#: The settings a worker's queue is made of (:attr:`Settings.codec`, :attr:`Settings.replication`).
_producer_settings = operator.attrgetter(
    "dump_payload",
    "load_payload",
    "dump_error",
    "load_error",
    "wait_replicas",
    "wait_timeout",
)


class _ProducerQueues(threading.local):
    """Per thread (each may have a client of its own: an executor thread's, inside
    ``perform``), per worker class: what its perform_async queue was made of, and it."""

    def __init__(self) -> None:
        self.by_class: weakref.WeakKeyDictionary[type, tuple[tuple[Any, ...], Queue]] = (
            weakref.WeakKeyDictionary()
        )


_producer_queues = _ProducerQueues()


class Worker:
    """Subclass to define a queue and how its jobs are processed.

    Each subclass owns one queue named ``queue_name`` (default: the class
    name), split into ``shards_count`` shards; one thread at a time processes
    a shard, popping up to ``batch_size`` due jobs per call of :meth:`perform`.

    lowkiq calls the hooks (:meth:`perform`, :meth:`retry_in`,
    :meth:`retries_exhausted`) on the class: define them with ``@classmethod``.  A
    plain method (``def perform(self, payloads_by_id)``, ``async def`` too) is refused
    with :class:`~lowkiq.errors.ConfigurationError` when the class is defined.
    """

    shards_count: ClassVar[int] = 5
    batch_size: ClassVar[int] = 1
    max_retry_count: ClassVar[int] = 25
    #: How many times a job may be restored after its process died running it (a
    #: crash, an OOM kill, ``os._exit`` in ``perform``) before it goes to the morgue
    #: instead, with ``retries_exhausted`` called: a job that kills its process is not
    #: run forever, and runs alone once its process died (no other job dies with it).
    max_restores: ClassVar[int] = 3
    #: Seconds a batch's ``perform`` may run before ``current_batch().should_stop()``
    #: turns true (``None``: no limit); an :class:`~lowkiq.IterableWorker` then gives the
    #: rest of its payloads back to the queue.
    max_perform_seconds: ClassVar[float | None] = None
    queue_name: ClassVar[str] = "Worker"
    #: At most so many jobs started per period across every process (``None``: no
    #: limit); see :mod:`lowkiq.limits.rate_limit`.
    rate_limit: ClassVar[RateLimit | None] = None
    #: Seconds one ``perform`` may run (``None``: no limit): past it a sync perform gets
    #: ``lowkiq.PerformTimeout`` raised in its thread and an ``async def`` one is
    #: cancelled; the batch fails as on any exception (see :mod:`lowkiq.perform.timeouts`).
    perform_timeout: ClassVar[float | None] = None
    #: Seconds one ``perform`` may run at most, above ``perform_timeout`` (``None``: no
    #: hard limit): past it the perform's thread is given up, the batch fails with
    #: ``lowkiq.PerformHardTimeout`` and the process stops cleanly, for its supervisor
    #: to start it again (see :mod:`lowkiq.perform.timeouts`).
    perform_hard_timeout: ClassVar[float | None] = None
    #: The perform_in of a job enqueued onto a queued one of the same id: ``"keep"``
    #: the queued job's (SPEC §3 rule 2), the ``"latest"`` enqueue's (a trailing-edge
    #: debounce: with ``delay``, run so long after the last enqueue), or the later of
    #: the two (``"max"``).
    merge_perform_in: ClassVar[Literal["keep", "latest", "max"]] = "keep"
    #: Each group's share of a shard's turns (group -> weight > 0; a group not named
    #: weighs 1): jobs of a job's ``"group"`` are taken in turn across groups, a group
    #: of weight 2 getting two jobs for one of a group of weight 1.
    group_weights: ClassVar[Mapping[str, float]] = {}
    #: At most so many batches running jobs of one group at once, over every process
    #: and host (``None``: no cap); the default group, jobs without one, is not capped.
    group_concurrency: ClassVar[int | None] = None
    #: Record each job's events (enqueued, popped, done, failed, yielded, discarded,
    #: buried, restored, deleted, moved) in a capped stream per shard, in the script
    #: that makes the change: :meth:`history`, :func:`lowkiq.events`.
    track: ClassVar[bool] = False
    #: About how many events each shard's stream keeps (``MAXLEN ~``), with ``track``.
    track_length: ClassVar[int] = 10_000
    #: The worker's share of a process's threads while workers with backlogs wait for
    #: them: batches started in proportion to weights (docs/guides/workers.md).
    weight: ClassVar[float] = 1.0

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "queue_name" not in cls.__dict__:
            cls.queue_name = cls.__name__
        _check_hooks(cls)
        cls.validate()

    @classmethod
    def validate(cls) -> None:
        """Raise :class:`ConfigurationError` naming a bad class attribute."""
        for name, minimum in (
            ("shards_count", 1),
            ("batch_size", 1),
            ("max_retry_count", 0),
            ("max_restores", 1),
            ("track_length", 1),
        ):
            value = getattr(cls, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise ConfigurationError(
                    f"{cls.__name__}.{name} must be an integer >= {minimum}, got {value!r}"
                )
        name = cls.queue_name
        if not isinstance(name, str) or not name or any(c in name for c in "{}\0"):
            raise ConfigurationError(
                f"{cls.__name__}.queue_name must be a non-empty string without braces, got {name!r}"
            )
        check_rate_limit(cls.__name__, cls.rate_limit)
        check_perform_timeout(cls.__name__, cls.perform_timeout)
        check_perform_hard_timeout(cls.__name__, cls.perform_timeout, cls.perform_hard_timeout)
        check_merge_perform_in(cls.__name__, cls.merge_perform_in)
        check_group_weights(cls.__name__, cls.group_weights)
        cap = cls.group_concurrency
        if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 1):
            raise ConfigurationError(
                f"{cls.__name__}.group_concurrency must be an integer >= 1 or None, got {cap!r}"
            )
        if not isinstance(cls.track, bool):
            raise ConfigurationError(
                f"{cls.__name__}.track must be True or False, got {cls.track!r}"
            )
        weight = cls.weight
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not 0 < weight < 1e6:
            raise ConfigurationError(
                f"{cls.__name__}.weight must be a number > 0 and < 1e6, got {weight!r}"
            )
        seconds = cls.max_perform_seconds
        if seconds is not None and (
            isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not seconds > 0
        ):
            raise ConfigurationError(
                f"{cls.__name__}.max_perform_seconds must be a number > 0 or None, got {seconds!r}"
            )

    # -- processing hooks ------------------------------------------------

    @classmethod
    def retry_in(cls, retry_count: int) -> float:
        """Seconds before retry number ``retry_count`` (0 for the first failure).  Define
        ``retry_in(cls, retry_count, exception)`` to see the exception the job failed
        with (the one :class:`~lowkiq.BatchFailed` names for its id), so the delay can
        differ per error; either form works."""
        return float(retry_count**4 + 15 + random.randrange(30) * (retry_count + 1))

    @classmethod
    def retries_exhausted(cls, jobs: list[dict[str, Any]]) -> Awaitable[None] | None:
        """Called with the jobs just moved to the morgue: ``{"id", "payloads", "error"}``,
        ``payloads`` being ``[[payload, score], ...]`` as in every job dict.  May be
        ``async def`` (see :mod:`lowkiq.perform.coroutines`)."""

    @classmethod
    def perform(cls, payloads_by_id: dict[str, list[Any]]) -> Awaitable[None] | None:
        """Process a batch: ``{id: [payload, ...]}``, payloads ascending by score.  May be
        ``async def``: the coroutine runs on the processing thread's own event loop."""
        raise NotImplementedError(f"{cls.__name__}.perform is not defined")

    # -- enqueueing --------------------------------------------------------

    @classmethod
    def perform_async(
        cls,
        jobs: Sequence[dict[str, Any]],
        on_commit: bool = False,
        using: str | None = None,
        after: str | Sequence[str] | None = None,
    ) -> None:
        """Enqueue jobs ``{"id", "payload"?, "score"?, "perform_in"? | "delay"?, "group"?}``
        in one round trip (a huge call in several, see :mod:`lowkiq.storage.enqueueing`).
        A job's ``group`` (a tenant) takes turns with the other groups in each shard; an
        id keeps its group while queued.

        The whole list is validated first (:mod:`lowkiq.storage.jobs`): one bad job raises
        :class:`~lowkiq.errors.InvalidJob` and nothing is enqueued.  A job without
        ``score`` or ``perform_in`` gets Redis's time, not this host's; ``perform_in`` is
        a unix timestamp or a timezone-aware ``datetime``; ``delay`` is seconds from now
        on Redis's time.  The payloads given for one id without ``score`` keep their
        order (then call after call; see docs/concepts/merge.md).  A Redis whose
        ``maxmemory-policy`` evicts keys raises :class:`~lowkiq.errors.ConfigurationError` unless
        ``settings.allow_eviction`` (the policy is read at most every few seconds).  Redis
        out of memory raises :class:`~lowkiq.errors.RedisFull`; a split call failing part-way
        says which ids are enqueued.  Client middlewares ``mw(worker, jobs,
        call_next)`` wrap the enqueue.

        ``on_commit=True`` (Django): the jobs are checked now and enqueued when the current
        transaction of database ``using`` commits, never on rollback (see
        :mod:`lowkiq.contrib.django.transactions`).

        Inside ``with lowkiq.Workflow(...)`` each payload is a member of that workflow.
        ``after="wf-id"`` (or a list of ids): the jobs are stored but held until every
        one of those workflows succeeded (at once when they have); an unknown id raises
        :class:`~lowkiq.errors.WorkflowError` and nothing is stored (see
        docs/guides/workflows.md).
        """
        after_ids = check_after(after)
        enclosing = current_workflow()  # an on_commit enqueue runs later: known now

        def enqueue(worker: type[Worker], final_jobs: Sequence[dict[str, Any]]) -> None:
            worker._push(final_jobs, after_ids, enclosing)

        check_job_list(jobs)  # before the middlewares, which expect a list
        middlewares = settings.client_middlewares
        chained = chain(middlewares, enqueue) if middlewares else enqueue
        if on_commit:
            from lowkiq.contrib.django.transactions import enqueue_on_commit

            # At the commit, the middlewares and the write only: an override of this
            # method that called it ran once already, now.
            enqueue_on_commit(cls, jobs, using, lambda given: chained(cls, given))
            return
        chained(cls, jobs)

    @classmethod
    def _push(
        cls,
        jobs: Sequence[dict[str, Any]],
        after: list[str] | None = None,
        enclosing: Workflow | None = None,
    ) -> None:
        queue = cls._producer_queue()
        new_jobs: list[NewJob] = []
        try:
            # An evicting Redis refuses jobs (its policy read at most every few seconds).
            PRODUCER_GATE.check(
                queue.client, settings.allow_eviction, f"{cls.__name__}.perform_async"
            )
            new_jobs = validate_jobs(
                jobs, queue.codec.dump_payload, lambda: max_bulk_len(queue.client)
            )
            if new_jobs:
                new_jobs = members_of(queue.name, queue.shard_of, new_jobs, enclosing)
                if after:
                    hold_jobs(queue.client, cls, after, new_jobs)
                else:
                    queue.push(new_jobs, merge_perform_in=cls.merge_perform_in)
        except (redis.ConnectionError, redis.TimeoutError, redis.ResponseError) as exc:
            raise_enqueue_failure(f"{cls.__name__}.perform_async", jobs, new_jobs, exc)

    @classmethod
    async def aperform_async(
        cls, jobs: Sequence[dict[str, Any]], after: str | Sequence[str] | None = None
    ) -> None:
        """:meth:`perform_async` from an event loop, awaited: the same checks, client
        middlewares, Lua scripts, rounds and errors, on the running loop's own
        ``redis.asyncio`` client (a Redis Cluster's too); one round trip per call that
        fits in one round.  Client middlewares run before the write and do not see its
        errors (see :mod:`lowkiq.aio.producer`).  Override it, as ``perform_async``, to
        derive ids from payloads."""
        await aperform_async(cls, jobs, after)

    # -- pausing -----------------------------------------------------------

    @classmethod
    def pause(cls) -> bool:
        """Stop every process taking new batches of this queue (running ones finish);
        enqueueing goes on.  ``False`` when it was paused already."""
        return pausing.pause(settings.client(), cls.queue_name)

    @classmethod
    def resume(cls) -> bool:
        """Let the processes take this queue's batches again; ``False`` when not paused."""
        return pausing.resume(settings.client(), cls.queue_name)

    @classmethod
    def paused(cls) -> bool:
        """Whether this queue is paused."""
        return cls.queue_name in pausing.paused_queues(settings.client())

    # -- rate limit --------------------------------------------------------

    @classmethod
    def set_rate_limit(cls, limit: RateLimit | None) -> None:
        """Limit this queue to ``limit`` on every process from the next heartbeat on
        (``None``: no limit), overriding :attr:`rate_limit` until :meth:`clear_rate_limit`."""
        if limit is not None and not isinstance(limit, RateLimit):
            raise ConfigurationError(
                f"set_rate_limit takes a lowkiq.RateLimit or None, got {limit!r}"
            )
        set_rate_limit(settings.client(), cls.queue_name, limit)

    @classmethod
    def clear_rate_limit(cls) -> bool:
        """Go back to :attr:`rate_limit` on every process; ``False`` when no limit was
        set at run time."""
        return clear_rate_limit(settings.client(), cls.queue_name)

    @classmethod
    def current_rate_limit(cls) -> RateLimit | None:
        """The limit in force: the one set at run time, else :attr:`rate_limit`."""
        overrides = rate_limit_overrides(settings.client())
        return overrides.get(cls.queue_name, cls.rate_limit)

    @classmethod
    def rate_limit_status(cls) -> RateLimitStatus:
        """The limit in force, where it comes from, and how often shards waited for it."""
        return rate_limit_status(settings.client(), cls.queue_name, cls.rate_limit)

    # -- storage views -----------------------------------------------------

    @classmethod
    def queue(cls, client: Client | None = None, config: Settings | None = None) -> Queue:
        """This worker's queue storage, with the serializers of ``config`` (default: the
        global settings), on ``client`` or the shared client of ``config``."""
        cls.validate()
        config = settings if config is None else config
        queue = Queue(
            client or config.client(),
            cls.queue_name,
            cls.shards_count,
            config.codec,
            config.replication,
            max_restores=cls.max_restores,
            track_length=cls.track_length if cls.track else 0,
        )
        if cls.group_weights:
            queue.set_group_weights(cls.group_weights)
        return queue

    @classmethod
    def _producer_queue(cls) -> Queue:
        """:meth:`queue` for :meth:`perform_async`, kept per thread and made again (and
        the class validated again) only when the thread's client, the serializers, the
        replicas waited for or an attribute :meth:`validate` checks changed: an enqueue
        into an idle process runs as little Python as it can before its bytes leave."""
        client = settings.client()
        made = (
            client,
            _producer_settings(settings),
            _checked_attributes(cls),
            dict(cls.group_weights),  # a copy: a dict changed in place is a change
        )
        by_class = _producer_queues.by_class
        known = by_class.get(cls)
        if known is not None and known[0] == made:
            return known[1]
        queue = cls.queue(client)
        by_class[cls] = (made, queue)
        return queue

    @classmethod
    def _current_queue(cls, config: Settings | None = None) -> Queue:
        """:meth:`queue` (of ``config``, default the global settings), with its layout
        read from Redis now (a reshard may have run)."""
        queue = cls.queue(config=config)
        queue.refresh_layout()
        return queue

    @classmethod
    def queries(cls, payloads_limit: int | None = None) -> Queries:
        """Read-only views of the queue (fetch, range_by_*, processing_data); with
        ``payloads_limit``, each job carries at most that many payloads and
        ``payloads_count``."""
        with unreachable_raises(f"{cls.__name__}.queries()"):
            return Queries(cls._current_queue(), payloads_limit)

    @classmethod
    def aqueries(cls, payloads_limit: int | None = None) -> AsyncQueries:
        """:meth:`queries`' reads as coroutines, for an async web handler:
        ``await OrderWorker.aqueries().fetch(ids)`` (each runs on a thread of the loop's
        default executor; see :mod:`lowkiq.aio.reads`)."""
        return AsyncQueries(cls, payloads_limit)

    @classmethod
    async def ametrics(cls) -> QueueMetrics:
        """:meth:`metrics` from an event loop, on its own ``redis.asyncio`` client, in one
        round trip after reading the queue's layout."""
        return await async_queue_metrics(cls)

    @classmethod
    def actions(cls) -> HeldActions:
        """Bulk operations on the queue and its morgue, and on its jobs held ``after=``
        workflows (``held``, ``release_held``, ``delete_held``)."""
        with unreachable_raises(f"{cls.__name__}.actions()"):
            restore = functools.partial(_restore_orphaned, cls)
            return HeldActions(cls._current_queue(), restore_orphaned=restore)

    @classmethod
    def history(cls, job_id: Any) -> list[JobEvent]:
        """The recorded events of job ``job_id``, oldest first (the oldest go once the
        shard's stream holds about :attr:`track_length` events; ``[]`` when none are
        kept).  Raises :class:`~lowkiq.errors.ConfigurationError` when :attr:`track` is
        off: no events are recorded then."""
        cls._check_tracked("history")
        return job_history(cls._current_queue(), str(job_id))

    @classmethod
    def _check_tracked(cls, reader: str) -> None:
        """Raise :class:`~lowkiq.errors.ConfigurationError` when :attr:`track` is off,
        naming the call that reads events (``reader``)."""
        if not cls.track:
            raise ConfigurationError(
                f"{cls.__name__}.{reader}: {cls.__name__}.track is off, so no job events "
                f"are recorded: set track = True on the class to record them"
            )

    @classmethod
    def metrics(cls) -> QueueMetrics:
        """``length``, ``fresh``, ``retries``, ``morgue_length``, ``lag``, ``processed``,
        ``failed``, ``busy``."""
        return queue_metrics(cls.queue())


#: The hooks lowkiq calls on a worker class, and how many positional arguments it
#: passes them (``retry_in``: the retry count, or also the exception).
_HOOK_ARGS: dict[str, tuple[int, ...]] = {
    "perform": (1,),
    "perform_one": (2,),
    "retry_in": (1, 2),
    "retries_exhausted": (1,),
}


def _check_hooks(cls: type[Worker]) -> None:
    """Raise :class:`ConfigurationError` when a hook defined on ``cls`` is a plain
    method (``def perform(self, payloads_by_id)``, sync or async): lowkiq calls it on
    the class, so every job would fail.  A plain function that takes just the
    arguments (as a ``@staticmethod`` would) is left alone."""
    for name, counts in _HOOK_ARGS.items():
        hook = inspect.getattr_static(cls, name, None)  # as defined, a mixin's too
        if not isinstance(hook, types.FunctionType):
            continue  # a classmethod, a staticmethod, or not defined
        parameters = list(inspect.signature(hook).parameters)
        if parameters[:1] != ["self"] and any(_takes(hook, count) for count in counts):
            continue
        kind = "async def" if inspect.iscoroutinefunction(hook) else "def"
        raise ConfigurationError(
            f"{cls.__name__}.{name} is a plain method, but lowkiq calls it on the class "
            f"(every job would fail): make it a @classmethod, `{kind} {name}(cls, ...)`"
        )


def retry_in_takes_exception(worker: type[Worker]) -> bool:
    """Whether ``worker.retry_in`` takes the exception besides the retry count."""
    return _takes_exception(worker.retry_in)


@functools.cache
def _takes_exception(retry_in: Callable[..., float]) -> bool:
    try:
        inspect.signature(retry_in).bind(0, None)
    except TypeError:
        return False
    return True


def _takes(function: types.FunctionType, count: int) -> bool:
    """Whether ``function`` can be called with ``count`` positional arguments."""
    try:
        inspect.signature(function).bind(*range(count))
    except TypeError:
        return False
    return True


def _restore_orphaned(worker: type[Worker], queue: Queue) -> int:
    """Put back the batches left in processing in shards no process holds (see
    :func:`lowkiq.ownership.leases.restore_orphaned`); returns how many jobs went back.
    The jobs it moved to the morgue instead (restored ``max_restores`` times) are reported
    to ``worker.retries_exhausted`` here: no process serves their shards to do it."""
    restored, buried = leases.restore_orphaned(queue)
    for job in buried:
        log.error("%s: job %r: %s", worker.__name__, job["id"], job["error"])
    if buried:
        call_retries_exhausted(worker, buried, worker.__name__)
    return restored
