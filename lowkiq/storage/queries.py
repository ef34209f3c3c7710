"""Reads of one queue for people and the dashboard: fetch, range_by_* and groups.

Queued jobs come back as ``{"id", "payloads", "perform_in", "retry_count",
"error", "group", "workflows"}`` and dead jobs as ``{"id", "payloads", "updated_at",
"error", "group", "workflows"}``; ``payloads`` is a list of ``[payload, score]``
ascending by score, ``error`` is absent when there is none, ``group`` when the job is
in the default group and ``workflows`` when none of the payloads read is a workflow's
member.

A hot id can hold a great many payloads: ``Queries(queue, payloads_limit=n)``
gives each job at most its ``n`` first payloads plus ``payloads_count`` (how
many it has), and :meth:`Queries.payloads` pages through them.
"""

from __future__ import annotations

import functools
import heapq
from collections.abc import Callable, Iterable
from itertools import islice
from typing import Any, TypedDict

from lowkiq.errors import InvalidQuery
from lowkiq.storage import blob
from lowkiq.storage import workflow_tags as tags
from lowkiq.storage.bounds import check_limit, member_bound, score_bound
from lowkiq.storage.group_rows import GroupRows, group_rows
from lowkiq.storage.processing import PROCESSING_HEADER, processing_group
from lowkiq.storage.queue import Queue
from lowkiq.storage.scripts import run_pipelined
from lowkiq.storage.unreachable import public_calls_raise_unavailable


class _JobFields(TypedDict):
    id: str
    #: ``[payload, score]`` pairs, ascending by score.
    payloads: list[list[Any]]


class Job(_JobFields, total=False):
    """A job as queries return it: queued or in processing (``perform_in``,
    ``retry_count``) or dead (``updated_at``); ``error`` when it failed."""

    perform_in: float
    retry_count: int
    updated_at: float
    error: str
    #: The group it belongs to (absent: the default group).
    group: str
    #: How many payloads the job has, when reads are bounded (``payloads_limit``).
    payloads_count: int
    #: The workflows its payloads read are members of, in order (absent: none).
    workflows: list[str]


@public_calls_raise_unavailable("queries")
class Queries:
    """Read-only views of one queue; every method is a few pipelined round trips.
    Redis out of reach raises :class:`lowkiq.RedisUnavailable`."""

    def __init__(self, queue: Queue, payloads_limit: int | None = None) -> None:
        self.queue = queue
        self.keys = queue.keys
        self.client = queue.client
        if payloads_limit is not None and check_limit(payloads_limit) == 0:
            raise InvalidQuery("payloads_limit must be at least 1")
        self.payloads_limit = payloads_limit

    @functools.cached_property
    def shard_of(self) -> Callable[[str], int]:
        """The shard each id's jobs are read from (see :meth:`Queue.locator`)."""
        return self.queue.locator()

    # -- queued jobs -----------------------------------------------------

    def yields(self, job_id: str) -> int:
        """How many times the perform of ``job_id`` gave payloads back (``yield_rest``)
        since the id last ended (acked, failed or buried)."""
        shard = self.shard_of(str(job_id))
        count = self.client.hget(self.keys.restores_hash(shard), "\0" + str(job_id))
        return int(count or 0)

    def fetch(self, ids: Iterable[Any]) -> list[Job]:
        """The queued jobs with these ids, in the given order; missing ids are skipped."""
        ids = [str(job_id) for job_id in ids]
        pipe = self._reads(ids)
        for job_id in ids:
            shard = self.shard_of(job_id)
            pipe.zrangebylex(self.keys.fresh_lex_zset(shard), *_exact(job_id))
            pipe.zrangebylex(self.keys.retry_lex_zset(shard), *_exact(job_id))
            pipe.zscore(self.keys.perform_in_zset(shard), job_id)
            pipe.zscore(self.keys.retry_count_zset(shard), job_id)
            pipe.hget(self.keys.errors_hash(shard), job_id)
        read_groups = self._read_groups(pipe, ids, self.keys.group_of_hash, queued=True)
        replies = pipe.execute()
        group_of = read_groups(replies)
        jobs: list[Job] = []
        packed: list[bytes] = []
        for n, job_id in enumerate(ids):
            fresh, retry, perform_in, retry_count, error = replies[5 * n : 5 * n + 5]
            members = fresh or retry
            if not members or perform_in is None:
                continue
            job: Job = {
                "id": job_id,
                "payloads": [],
                "perform_in": perform_in,
                "retry_count": -1 if retry_count is None else int(retry_count),
            }
            _with_group(job, group_of.get(job_id))
            jobs.append(self._with_error(job, error))
            packed.append(blob.split_member(members[0])[1])
        return self._with_payloads(jobs, packed, self.keys.payloads_zset)

    def range_by_id(self, min: str, max: str, limit: int = 10) -> list[Job]:
        """Queued jobs with ids in ``[min, max]`` (Redis lex bounds), ascending."""
        return self.fetch(self._ids_by_lex(min, max, limit, reverse=False))

    def rev_range_by_id(self, max: str, min: str, limit: int = 10) -> list[Job]:
        """Queued jobs with ids in ``[min, max]`` (Redis lex bounds), descending."""
        return self.fetch(self._ids_by_lex(min, max, limit, reverse=True))

    def range_by_perform_in(
        self, min: Any, max: Any, limit: int = 10, after_id: str | None = None
    ) -> list[Job]:
        """Queued jobs with ``perform_in`` in ``[min, max]``, earliest first."""
        return self.fetch(self._ids_by_perform_in(min, max, limit, False, after_id))

    def rev_range_by_perform_in(
        self, max: Any, min: Any, limit: int = 10, after_id: str | None = None
    ) -> list[Job]:
        """Queued jobs with ``perform_in`` in ``[min, max]``, latest first."""
        return self.fetch(self._ids_by_perform_in(min, max, limit, True, after_id))

    def range_by_retry_count(
        self, min: Any, max: Any, limit: int = 10, after_id: str | None = None
    ) -> list[Job]:
        """Queued jobs with ``retry_count`` in ``[min, max]``, ascending (then by id)."""
        return self.fetch(self._ids_by_retry_count(min, max, limit, False, after_id))

    def rev_range_by_retry_count(
        self, max: Any, min: Any, limit: int = 10, after_id: str | None = None
    ) -> list[Job]:
        """Queued jobs with ``retry_count`` in ``[min, max]``, descending (then by id)."""
        return self.fetch(self._ids_by_retry_count(min, max, limit, True, after_id))

    def retries_range_by_id(self, min: str, max: str, limit: int = 10) -> list[Job]:
        """Queued retries (``retry_count >= 0``) with ids in ``[min, max]``, ascending."""
        keys = self._lex_keys(self.keys.retry_lex_zset)
        return self.fetch(self._merged_lex(keys, min, max, check_limit(limit), reverse=False))

    def retries_rev_range_by_id(self, max: str, min: str, limit: int = 10) -> list[Job]:
        """Queued retries (``retry_count >= 0``) with ids in ``[min, max]``, descending."""
        keys = self._lex_keys(self.keys.retry_lex_zset)
        return self.fetch(self._merged_lex(keys, min, max, check_limit(limit), reverse=True))

    def redis_time(self) -> float:
        """Now on Redis's clock (the clock ``perform_in`` is due by), unix seconds."""
        seconds, micros = self.client.time()
        return seconds + micros / 1e6

    def scheduled_count(self, now: float | None = None) -> int:
        """How many queued jobs are not due yet (``perform_in`` after ``now``, default
        Redis's clock): the Scheduled list's length."""
        after = f"({self.redis_time() if now is None else now!r}"
        pipe = self.client.pipeline(transaction=False)
        for shard in self.queue.shards:
            pipe.zcount(self.keys.perform_in_zset(shard), after, "+inf")
        return sum(pipe.execute())

    # -- the morgue ------------------------------------------------------

    def morgue_fetch(self, ids: Iterable[Any]) -> list[Job]:
        """The dead jobs with these ids, in the given order; missing ids are skipped."""
        ids = [str(job_id) for job_id in ids]
        pipe = self._reads(ids)
        for job_id in ids:
            shard = self.shard_of(job_id)
            pipe.zrangebylex(self.keys.morgue_lex_zset(shard), *_exact(job_id))
            pipe.zscore(self.keys.morgue_updated_at_zset(shard), job_id)
            pipe.hget(self.keys.morgue_errors_hash(shard), job_id)
        read_groups = self._read_groups(pipe, ids, self.keys.morgue_group_of_hash)
        replies = pipe.execute()
        group_of = read_groups(replies)
        jobs: list[Job] = []
        packed: list[bytes] = []
        for n, job_id in enumerate(ids):
            members, updated_at, error = replies[3 * n : 3 * n + 3]
            if not members:
                continue
            job: Job = {"id": job_id, "payloads": [], "updated_at": updated_at}
            _with_group(job, group_of.get(job_id))
            jobs.append(self._with_error(job, error))
            packed.append(blob.split_member(members[0])[1])
        return self._with_payloads(jobs, packed, self.keys.morgue_payloads_zset)

    # -- the payloads of one job -------------------------------------------

    def payloads(self, job_id: Any, start: int = 0, limit: int = 100) -> list[list[Any]]:
        """A page of a queued job's payloads: ``limit`` from index ``start``, by score."""
        return self._payloads_page(str(job_id), start, limit, queued=True)

    def morgue_payloads(self, job_id: Any, start: int = 0, limit: int = 100) -> list[list[Any]]:
        """A page of a dead job's payloads: ``limit`` from index ``start``, by score."""
        return self._payloads_page(str(job_id), start, limit, queued=False)

    def morgue_range_by_id(self, min: str, max: str, limit: int = 10) -> list[Job]:
        """Dead jobs with ids in ``[min, max]``, ascending."""
        return self.morgue_fetch(self._morgue_ids_by_lex(min, max, limit, reverse=False))

    def morgue_rev_range_by_id(self, max: str, min: str, limit: int = 10) -> list[Job]:
        """Dead jobs with ids in ``[min, max]``, descending."""
        return self.morgue_fetch(self._morgue_ids_by_lex(min, max, limit, reverse=True))

    def morgue_range_by_updated_at(
        self, min: Any, max: Any, limit: int = 10, after_id: str | None = None
    ) -> list[Job]:
        """Dead jobs with ``updated_at`` in ``[min, max]``, oldest first."""
        return self.morgue_fetch(self._ids_by_updated_at(min, max, limit, False, after_id))

    def morgue_rev_range_by_updated_at(
        self, max: Any, min: Any, limit: int = 10, after_id: str | None = None
    ) -> list[Job]:
        """Dead jobs with ``updated_at`` in ``[min, max]``, newest first."""
        return self.morgue_fetch(self._ids_by_updated_at(min, max, limit, True, after_id))

    # -- processing areas --------------------------------------------------

    def processing_data(self) -> list[Job]:
        """The jobs now in processing areas (being performed), by shard."""
        pipe = self.client.pipeline(transaction=False)
        for shard in self.queue.shards:
            pipe.hgetall(self.keys.processing_hash(shard))
        jobs: list[Job] = []
        packed: list[bytes] = []
        for area in pipe.execute():
            for job_id, value in sorted(area.items()):
                group, offset = processing_group(value)
                perform_in, retry_count, error_length = PROCESSING_HEADER.unpack_from(value, offset)
                offset += PROCESSING_HEADER.size
                error = None
                if error_length >= 0:
                    error = value[offset : offset + error_length]
                    offset += error_length
                job: Job = {
                    "id": job_id.decode(),
                    "payloads": [],
                    "perform_in": perform_in,
                    "retry_count": retry_count,
                }
                if group is not None:
                    job["group"] = group
                jobs.append(self._with_error(job, error))
                packed.append(value[offset:])
        # A batch holds packed payloads only (a hot id's share is packed by pop).
        return self._with_payloads(jobs, packed, self.keys.payloads_zset)

    # -- groups ------------------------------------------------------------

    def groups(self, limit: int = 20) -> GroupRows:
        """The ``limit`` groups with the most queued jobs across the queue's shards, most
        first, with their earliest ``perform_in`` and their jobs in flight; a list whose
        ``complete`` is ``False`` when a shard had more groups than one reading counts
        (see :func:`lowkiq.storage.group_rows.group_rows`)."""
        return group_rows(self.queue, check_limit(limit))

    # -- helpers -----------------------------------------------------------

    def _reads(self, ids: list[str]) -> Any:
        """A pipeline for reads of these ids: atomic (MULTI) when they are all in one
        shard, so a job is never seen half moved; else per shard."""
        one_shard = len({self.shard_of(job_id) for job_id in ids}) <= 1
        return self.client.pipeline(transaction=one_shard and not self.queue.cluster)

    def _read_groups(
        self, pipe: Any, ids: list[str], key: Callable[[int], str], queued: bool = False
    ) -> Callable[[list[Any]], dict[str, bytes]]:
        """Queue on ``pipe``, last, one HMGET of the hash ``key(shard)`` (id -> group) per
        shard of ``ids`` (``queued``: and a GET of its base group, the group of the ids
        the hash does not name); returns what reads id -> group (ids of a group other
        than the default one only) from the pipeline's replies."""
        by_shard: dict[int, list[str]] = {}
        for job_id in ids:
            by_shard.setdefault(self.shard_of(job_id), []).append(job_id)
        for shard, shard_ids in by_shard.items():
            pipe.hmget(key(shard), shard_ids)
            if queued:
                pipe.get(self.keys.group_base(shard))
        step = 2 if queued else 1

        def read(replies: list[Any]) -> dict[str, bytes]:
            found = replies[len(replies) - step * len(by_shard) :]
            named: dict[str, bytes] = {}
            for n, shard_ids in enumerate(by_shard.values()):
                base = found[step * n + 1] if queued else None
                for job_id, group in zip(shard_ids, found[step * n], strict=True):
                    group = base if group is None else group
                    if group:
                        named[job_id] = group
            return named

        return read

    def _payloads(self, packed: bytes) -> list[list[Any]]:
        return self.queue.load_pairs(blob.unpack(packed))

    def _with_payloads(
        self, jobs: list[Job], packed: list[bytes], hot_key: Callable[[int, str], str]
    ) -> list[Job]:
        """Give each job its payloads: from its blob, or a hot id's from its sorted set
        (``hot_key(shard, id)``), read in one more round trip; bounded by ``payloads_limit``."""
        limit = self.payloads_limit
        pairs = zip(jobs, packed, strict=True)
        shard_of = self.shard_of
        hot = [(job, hot_key(shard_of(job["id"]), job["id"])) for job, data in pairs if not data]
        pipe = self.client.pipeline(transaction=False)
        for _, key in hot:
            pipe.zrange(key, 0, -1 if limit is None else limit - 1, withscores=True)
            pipe.zcard(key)
        replies = pipe.execute() if hot else []
        for n, (job, _) in enumerate(hot):
            job["payloads"] = self.queue.load_pairs(replies[2 * n])
            _with_workflows(job, replies[2 * n])
            job["payloads_count"] = replies[2 * n + 1]
        for job, data in zip(jobs, packed, strict=True):
            if data:
                stored = blob.unpack(data)
                job["payloads"] = self.queue.load_pairs(stored)
                _with_workflows(job, stored)
                job["payloads_count"] = len(job["payloads"])
                if limit is not None:
                    del job["payloads"][limit:]
        if limit is None:
            for job in jobs:
                del job["payloads_count"]
        return jobs

    def _payloads_page(self, job_id: str, start: int, limit: int, queued: bool) -> list[list[Any]]:
        if isinstance(start, bool) or not isinstance(start, int) or start < 0:
            raise InvalidQuery(f"start must be an integer >= 0, got {start!r}")
        if check_limit(limit) == 0:
            return []
        shard = self.shard_of(job_id)
        if queued:
            lex_keys = [self.keys.fresh_lex_zset(shard), self.keys.retry_lex_zset(shard)]
            hot_key = self.keys.payloads_zset(shard, job_id)
        else:
            lex_keys = [self.keys.morgue_lex_zset(shard)]
            hot_key = self.keys.morgue_payloads_zset(shard, job_id)
        pipe = self.client.pipeline(transaction=not self.queue.cluster)
        for key in lex_keys:
            pipe.zrangebylex(key, *_exact(job_id))
        pipe.zrange(hot_key, start, start + limit - 1, withscores=True)
        *members, rows = pipe.execute()
        found = [reply[0] for reply in members if reply]
        if not found:
            return []
        packed = blob.split_member(found[0])[1]
        if packed:
            return self._payloads(packed)[start : start + limit]
        return self.queue.load_pairs(rows)

    def _with_error(self, job: Job, error: bytes | None) -> Job:
        if error is not None:
            job["error"] = self.queue.codec.error_text(error)
        return job

    def _lex(self, pipe: Any, key: str, min: str, max: str, limit: int, reverse: bool) -> None:
        """Queue on ``pipe`` a read of the ids of a lex zset of ``id\\0blob`` members."""
        low, high = member_bound(min, "min"), member_bound(max, "max")
        if reverse:
            pipe.zrevrangebylex(key, high, low, start=0, num=limit)
        else:
            pipe.zrangebylex(key, low, high, start=0, num=limit)

    def _lex_keys(self, *names: Callable[[int], str]) -> list[str]:
        """The keys ``name(shard)`` of every shard, for each of ``names``."""
        return [name(shard) for name in names for shard in self.queue.shards]

    def _merged_lex(
        self, keys: list[str], min: str, max: str, limit: int, reverse: bool
    ) -> list[str]:
        """Ids in ``[min, max]`` across lex zsets of ``id\\0blob`` members, in id order."""
        pipe = self.client.pipeline(transaction=False)
        for key in keys:
            self._lex(pipe, key, min, max, limit, reverse)
        heads = [[_member_id(m) for m in reply] for reply in pipe.execute()]
        return list(islice(heapq.merge(*heads, key=_id_order, reverse=reverse), limit))

    def _ids_by_lex(self, min: str, max: str, limit: int, reverse: bool) -> list[str]:
        keys = self._lex_keys(self.keys.fresh_lex_zset, self.keys.retry_lex_zset)
        return self._merged_lex(keys, min, max, check_limit(limit), reverse)

    def _morgue_ids_by_lex(self, min: str, max: str, limit: int, reverse: bool) -> list[str]:
        keys = self._lex_keys(self.keys.morgue_lex_zset)
        return self._merged_lex(keys, min, max, check_limit(limit), reverse)

    def _ids_by_score(
        self,
        key: Callable[[int], str],
        min: Any,
        max: Any,
        limit: int,
        reverse: bool,
        after_id: str | None,
    ) -> list[str]:
        """The first ``limit`` members of the sorted sets ``key(shard)`` of all shards with
        scores in ``[min, max]``, in (score, member) order, in one round trip.

        With ``after_id`` the range starts after the cursor ``(score, after_id)``,
        the score being ``min`` (ascending) or ``max`` (descending); members of
        equal score are in id order, so paging through a tie is exact.
        """
        low, high, limit = score_bound(min), score_bound(max), check_limit(limit)
        shards = self.queue.shards
        heads: list[list[tuple[float, bytes]]]
        if after_id is None:
            pipe = self.client.pipeline(transaction=False)
            for shard in shards:
                if reverse:
                    pipe.zrevrangebyscore(
                        key(shard), high.redis, low.redis, 0, limit, withscores=True
                    )
                else:
                    pipe.zrangebyscore(key(shard), low.redis, high.redis, 0, limit, withscores=True)
            heads = [_from_pairs(reply) for reply in pipe.execute()]
        else:
            cursor, far = (high, low.complement) if reverse else (low, high.redis)
            if cursor.exclusive:
                raise InvalidQuery("with after_id the cursor bound must be inclusive")
            args = [repr(cursor.value), after_id, far, limit, "desc" if reverse else "asc"]
            script = self.queue.scripts.range_after
            calls = [(script, [self.keys.prefix(shard), key(shard)], args) for shard in shards]
            heads = [_from_flat(reply) for reply in run_pipelined(self.client, calls)]
        merged = islice(heapq.merge(*heads, reverse=reverse), limit)
        return [member.decode() for _, member in merged]

    def _ids_by_perform_in(
        self, min: Any, max: Any, limit: int, reverse: bool, after_id: str | None
    ) -> list[str]:
        return self._ids_by_score(self.keys.perform_in_zset, min, max, limit, reverse, after_id)

    def _ids_by_updated_at(
        self, min: Any, max: Any, limit: int, reverse: bool, after_id: str | None
    ) -> list[str]:
        key = self.keys.morgue_updated_at_zset
        return self._ids_by_score(key, min, max, limit, reverse, after_id)

    def _ids_by_retry_count(
        self, min: Any, max: Any, limit: int, reverse: bool, after_id: str | None
    ) -> list[str]:
        """Fresh jobs (retry_count -1, kept apart from the retries) come before the
        retries ascending and after them descending, in id order as Redis ties are."""
        low, high, limit = score_bound(min), score_bound(max), check_limit(limit)
        cursor = (high if reverse else low).value if after_id is not None else None
        fresh: list[str] = []
        if low.admits_from_below(-1) and high.admits_from_above(-1):
            start = f"({after_id}" if cursor == -1 else ("+" if reverse else "-")
            bounds = ("-", start) if reverse else (start, "+")
            keys = self._lex_keys(self.keys.fresh_lex_zset)
            fresh = self._merged_lex(keys, *bounds, limit, reverse)
        retry_after = after_id if cursor is not None and cursor >= 0 else None
        retries = self._ids_by_score(
            self.keys.retry_count_zset, min, max, limit, reverse, retry_after
        )
        return ((retries + fresh) if reverse else (fresh + retries))[:limit]


def _with_group(job: Job, group: bytes | None) -> None:
    """Give ``job`` its group, unless it is in the default group (``None``)."""
    if group is not None:
        job["group"] = group.decode()


def _with_workflows(job: Job, pairs: Iterable[tuple[bytes, float]]) -> None:
    """Name the workflows whose members are among ``pairs`` (stored payloads) in
    ``job["workflows"]``; nothing when none is."""
    tagged = [(payload, score) for payload, score in pairs if payload.startswith(tags.MARK)]
    if tagged:
        job["workflows"] = tags.untagged(tagged)[1]


def _from_pairs(reply: list[Any]) -> list[tuple[float, bytes]]:
    """``(score, member)`` from redis-py's ``withscores`` pairs."""
    return [(score, member) for member, score in reply]


def _from_flat(reply: list[Any]) -> list[tuple[float, bytes]]:
    """``(score, member)`` from a script's flat ``member, score, ...`` list."""
    return [(float(reply[i + 1]), reply[i]) for i in range(0, len(reply), 2)]


def _member_id(member: bytes) -> str:
    """The id of a lex-zset member ``id\\0blob``."""
    return blob.split_member(member)[0]


def _exact(job_id: str) -> tuple[str, str]:
    """Lex bounds selecting the one member ``job_id\\0blob``."""
    return f"[{job_id}\0", f"({job_id}\x01"


def _id_order(job_id: str) -> bytes:
    """Ids sort as Redis sorts lex members: by their bytes."""
    return job_id.encode()
