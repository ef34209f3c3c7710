"""What ``await Worker.aperform_async(jobs)`` does: ``perform_async``'s rules on the
running event loop's ``redis.asyncio`` client (:mod:`lowkiq.aio.client`).

The same order as ``Worker.perform_async``: the list checked, the client middlewares,
the maxmemory policy (an evicting Redis refuses, unless ``settings.allow_eviction``),
every job validated before anything is written (one bad job raises
:class:`~lowkiq.errors.InvalidJob`), then the push (:mod:`lowkiq.aio.push`), with the
same errors: :class:`~lowkiq.errors.RedisUnavailable`,
:class:`~lowkiq.errors.RedisFull` and :class:`~lowkiq.errors.EnqueueIncomplete`
naming the enqueued ids.

Client middlewares are synchronous functions ``mw(worker, jobs, call_next)``: they run
first, on the loop, and their ``call_next`` hands the jobs over to the push, which is
awaited once the whole chain has returned.  So a middleware changes, adds to or drops
the jobs as for ``perform_async``, but what it does after ``call_next`` runs before the
jobs are written, and it does not see the push's errors (a tracing span around
``call_next`` closes before the write).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NoReturn

import redis

from lowkiq.aio.client import AsyncRedis, async_client
from lowkiq.aio.off_loop import run_sized
from lowkiq.aio.push import AsyncPush
from lowkiq.aio.server import bulk_len, eviction
from lowkiq.clients.default_redis import unreachable_hint
from lowkiq.errors import ConfigurationError, RedisFull, RedisUnavailable, is_out_of_memory
from lowkiq.middleware import chain
from lowkiq.settings import settings
from lowkiq.storage.enqueueing import shard_of
from lowkiq.storage.jobs import check_job_list, validate_jobs
from lowkiq.storage.push_plan import NewJob
from lowkiq.workflows.context import Workflow, check_after, hold_jobs, members_of
from lowkiq.workflows.context import current as current_workflow

if TYPE_CHECKING:
    from lowkiq.worker import Worker


async def aperform_async(
    worker: type[Worker],
    jobs: Sequence[dict[str, Any]],
    after: str | Sequence[str] | None = None,
) -> None:
    """Enqueue ``jobs`` into ``worker``'s queue from the running loop (see the module);
    members of the enclosing workflow, held ``after=`` workflows as ``perform_async``."""
    after_ids = check_after(after)
    check_job_list(jobs)  # before the middlewares, which expect a list
    handed: list[tuple[type[Worker], Sequence[dict[str, Any]]]] = []

    def hand_over(target: type[Worker], final_jobs: Sequence[dict[str, Any]]) -> None:
        handed.append((target, final_jobs))

    chain(settings.client_middlewares, hand_over)(worker, jobs)
    for target, final_jobs in handed:
        await push_jobs(target, final_jobs, after_ids, current_workflow())


async def push_jobs(
    worker: type[Worker],
    jobs: Sequence[dict[str, Any]],
    after: list[str] | None = None,
    enclosing: Workflow | None = None,
) -> None:
    """Check and push ``jobs`` into ``worker``'s queue, without middlewares."""
    worker.validate()
    what = f"{worker.__name__}.aperform_async"
    new_jobs: list[NewJob] = []
    try:
        redis_ = await async_client()
        if not settings.allow_eviction:
            problem = await eviction(redis_)
            if problem is not None:
                raise ConfigurationError(
                    f"{what}: refused, nothing enqueued: {problem}; or set "
                    "lowkiq.settings.allow_eviction = True (LOWKIQ_ALLOW_EVICTION=1) to "
                    "enqueue anyway"
                )
        new_jobs = await _validated(redis_, jobs)
        if new_jobs:
            count = worker.shards_count
            new_jobs = members_of(
                worker.queue_name, lambda i: shard_of(i, count), new_jobs, enclosing
            )
        if new_jobs and after:
            await asyncio.to_thread(hold_jobs, settings.client(), worker, after, new_jobs)
        elif new_jobs:
            push = AsyncPush(
                redis_,
                worker.queue_name,
                worker.shards_count,
                track_length=worker.track_length if worker.track else 0,
                replication=settings.replication,
            )
            await push.push(new_jobs, merge_perform_in=worker.merge_perform_in)
    except (redis.ConnectionError, redis.TimeoutError, redis.ResponseError) as exc:
        raise_enqueue_failure(what, jobs, new_jobs, exc)


def raise_enqueue_failure(
    what: str, jobs: Sequence[Any], new_jobs: Sequence[NewJob], exc: redis.RedisError
) -> NoReturn:
    """Raise what an enqueue's Redis error means for its caller (``perform_async`` and
    ``aperform_async`` alike): :class:`RedisUnavailable`, :class:`RedisFull` naming the
    ids not enqueued, or ``exc`` itself."""
    if isinstance(exc, (redis.ConnectionError, redis.TimeoutError)):
        hint = unreachable_hint(settings.redis)
        raise RedisUnavailable(
            f"{what}: Redis is unreachable, {len(jobs)} job(s) were not enqueued: {exc}"
            + (f" ({hint})" if hint else "")
        ) from exc
    if not is_out_of_memory(exc):  # e.g. writing the queue's layout at its first use
        raise exc
    ids = list(dict.fromkeys(job[0] for job in new_jobs))
    raise RedisFull(
        f"{what}: Redis is full: it reached maxmemory and refused the write ({exc}): "
        f"{len(ids)} job id(s) not enqueued; free memory or raise maxmemory, then "
        f"enqueue them again",
        [],
        ids,
    ) from exc


class _BulkLenUnknown(Exception):
    """A payload is too large for some Redis and ``proto-max-bulk-len`` is not read yet."""


async def _validated(redis_: AsyncRedis, jobs: Sequence[dict[str, Any]]) -> list[NewJob]:
    """:func:`~lowkiq.storage.jobs.validate_jobs` (off the loop for a large call, see
    :mod:`lowkiq.aio.off_loop`), with Redis's ``proto-max-bulk-len`` read (once per
    client) only when a payload needs it."""

    def known_bulk_len() -> int:
        if redis_.bulk_len is None:
            raise _BulkLenUnknown
        return redis_.bulk_len

    dump = settings.codec.dump_payload

    def validated() -> list[NewJob]:
        return validate_jobs(jobs, dump, known_bulk_len)

    try:
        return await run_sized(len(jobs), validated)
    except _BulkLenUnknown:
        await bulk_len(redis_)
        return await run_sized(len(jobs), validated)
