"""Reads of one queue for people and the dashboard: fetch and range_by_*.

Queued jobs come back as ``{"id", "payloads", "perform_in", "retry_count",
"error"}`` and dead jobs as ``{"id", "payloads", "updated_at", "error"}``;
``payloads`` is a list of ``[payload, score]`` ascending by score and
``error`` is absent when there is none.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from typing import Any

from lowkiq.storage import blob
from lowkiq.storage.bounds import check_limit, member_bound, score_bound
from lowkiq.storage.queue import PROCESSING_HEADER, Queue

Job = dict[str, Any]


class Queries:
    """Read-only views of one queue; every method is a few pipelined round trips."""

    def __init__(self, queue: Queue) -> None:
        self.queue = queue
        self.keys = queue.keys
        self.client = queue.client

    # -- queued jobs -----------------------------------------------------

    def fetch(self, ids: Iterable[Any]) -> list[Job]:
        """The queued jobs with these ids, in the given order; missing ids are skipped."""
        ids = [str(job_id) for job_id in ids]
        pipe = self.client.pipeline(transaction=True)
        for job_id in ids:
            pipe.zrangebylex(self.keys.fresh_lex_zset, *_exact(job_id))
            pipe.zrangebylex(self.keys.retry_lex_zset, *_exact(job_id))
            pipe.zscore(self.keys.perform_in_zset(self.queue.shard_of(job_id)), job_id)
            pipe.zscore(self.keys.retry_count_zset, job_id)
            pipe.hget(self.keys.errors_hash, job_id)
        replies = pipe.execute()
        jobs = []
        for n, job_id in enumerate(ids):
            fresh, retry, perform_in, retry_count, error = replies[5 * n : 5 * n + 5]
            members = fresh or retry
            if not members or perform_in is None:
                continue
            job = {
                "id": job_id,
                "payloads": self._payloads(blob.split_member(members[0])[1]),
                "perform_in": perform_in,
                "retry_count": -1 if retry_count is None else int(retry_count),
            }
            jobs.append(self._with_error(job, error))
        return jobs

    def range_by_id(self, min: str, max: str, limit: int = 10) -> list[Job]:
        """Queued jobs with ids in ``[min, max]`` (Redis lex bounds), ascending."""
        return self.fetch(self._ids_by_lex(min, max, limit, reverse=False))

    def rev_range_by_id(self, max: str, min: str, limit: int = 10) -> list[Job]:
        """Queued jobs with ids in ``[min, max]`` (Redis lex bounds), descending."""
        return self.fetch(self._ids_by_lex(min, max, limit, reverse=True))

    def range_by_perform_in(self, min: Any, max: Any, limit: int = 10) -> list[Job]:
        """Queued jobs with ``perform_in`` in ``[min, max]``, earliest first."""
        return self.fetch(self._ids_by_perform_in(min, max, limit, reverse=False))

    def rev_range_by_perform_in(self, max: Any, min: Any, limit: int = 10) -> list[Job]:
        """Queued jobs with ``perform_in`` in ``[min, max]``, latest first."""
        return self.fetch(self._ids_by_perform_in(min, max, limit, reverse=True))

    def range_by_retry_count(self, min: Any, max: Any, limit: int = 10) -> list[Job]:
        """Queued jobs with ``retry_count`` in ``[min, max]``, ascending (then by id)."""
        return self.fetch(self._ids_by_retry_count(min, max, limit, reverse=False))

    def rev_range_by_retry_count(self, max: Any, min: Any, limit: int = 10) -> list[Job]:
        """Queued jobs with ``retry_count`` in ``[min, max]``, descending (then by id)."""
        return self.fetch(self._ids_by_retry_count(min, max, limit, reverse=True))

    # -- the morgue ------------------------------------------------------

    def morgue_fetch(self, ids: Iterable[Any]) -> list[Job]:
        """The dead jobs with these ids, in the given order; missing ids are skipped."""
        ids = [str(job_id) for job_id in ids]
        pipe = self.client.pipeline(transaction=True)
        for job_id in ids:
            pipe.zrangebylex(self.keys.morgue_lex_zset, *_exact(job_id))
            pipe.zscore(self.keys.morgue_updated_at_zset, job_id)
            pipe.hget(self.keys.morgue_errors_hash, job_id)
        replies = pipe.execute()
        jobs = []
        for n, job_id in enumerate(ids):
            members, updated_at, error = replies[3 * n : 3 * n + 3]
            if not members:
                continue
            job = {
                "id": job_id,
                "payloads": self._payloads(blob.split_member(members[0])[1]),
                "updated_at": updated_at,
            }
            jobs.append(self._with_error(job, error))
        return jobs

    def morgue_range_by_id(self, min: str, max: str, limit: int = 10) -> list[Job]:
        """Dead jobs with ids in ``[min, max]``, ascending."""
        return self.morgue_fetch(self._morgue_ids_by_lex(min, max, limit, reverse=False))

    def morgue_rev_range_by_id(self, max: str, min: str, limit: int = 10) -> list[Job]:
        """Dead jobs with ids in ``[min, max]``, descending."""
        return self.morgue_fetch(self._morgue_ids_by_lex(min, max, limit, reverse=True))

    def morgue_range_by_updated_at(self, min: Any, max: Any, limit: int = 10) -> list[Job]:
        """Dead jobs with ``updated_at`` in ``[min, max]``, oldest first."""
        low, high, limit = score_bound(min), score_bound(max), check_limit(limit)
        ids = self.client.zrangebyscore(
            self.keys.morgue_updated_at_zset, low.redis, high.redis, start=0, num=limit
        )
        return self.morgue_fetch(i.decode() for i in ids)

    def morgue_rev_range_by_updated_at(self, max: Any, min: Any, limit: int = 10) -> list[Job]:
        """Dead jobs with ``updated_at`` in ``[min, max]``, newest first."""
        low, high, limit = score_bound(min), score_bound(max), check_limit(limit)
        ids = self.client.zrevrangebyscore(
            self.keys.morgue_updated_at_zset, high.redis, low.redis, start=0, num=limit
        )
        return self.morgue_fetch(i.decode() for i in ids)

    # -- processing areas --------------------------------------------------

    def processing_data(self) -> list[Job]:
        """The jobs now in processing areas (being performed), by shard."""
        pipe = self.client.pipeline(transaction=False)
        for shard in range(self.queue.shards_count):
            pipe.hgetall(self.keys.processing_hash(shard))
        jobs = []
        for area in pipe.execute():
            for job_id, value in sorted(area.items()):
                perform_in, retry_count, error_length = PROCESSING_HEADER.unpack_from(value)
                offset = PROCESSING_HEADER.size
                error = None
                if error_length >= 0:
                    error = value[offset : offset + error_length]
                    offset += error_length
                job = {
                    "id": job_id.decode(),
                    "payloads": self._payloads(value[offset:]),
                    "perform_in": perform_in,
                    "retry_count": retry_count,
                }
                jobs.append(self._with_error(job, error))
        return jobs

    # -- helpers -----------------------------------------------------------

    def _payloads(self, packed: bytes) -> list[list[Any]]:
        load = self.queue.codec.load_payload
        return [[load(payload), score] for payload, score in blob.unpack(packed)]

    def _with_error(self, job: Job, error: bytes | None) -> Job:
        if error is not None:
            job["error"] = self.queue.codec.error_text(error)
        return job

    def _lex_ids(self, key: str, min: str, max: str, limit: int, reverse: bool) -> list[str]:
        low, high = member_bound(min, "min"), member_bound(max, "max")
        if reverse:
            members = self.client.zrevrangebylex(key, high, low, start=0, num=limit)
        else:
            members = self.client.zrangebylex(key, low, high, start=0, num=limit)
        return [blob.split_member(member)[0] for member in members]

    def _ids_by_lex(self, min: str, max: str, limit: int, reverse: bool) -> list[str]:
        limit = check_limit(limit)
        fresh = self._lex_ids(self.keys.fresh_lex_zset, min, max, limit, reverse)
        retry = self._lex_ids(self.keys.retry_lex_zset, min, max, limit, reverse)
        merged = heapq.merge(fresh, retry, key=_id_order, reverse=reverse)
        return list(merged)[:limit]

    def _morgue_ids_by_lex(self, min: str, max: str, limit: int, reverse: bool) -> list[str]:
        limit = check_limit(limit)
        return self._lex_ids(self.keys.morgue_lex_zset, min, max, limit, reverse)[:limit]

    def _ids_by_perform_in(self, min: Any, max: Any, limit: int, reverse: bool) -> list[str]:
        low, high, limit = score_bound(min), score_bound(max), check_limit(limit)
        pipe = self.client.pipeline(transaction=False)
        for shard in range(self.queue.shards_count):
            key = self.keys.perform_in_zset(shard)
            if reverse:
                pipe.zrevrangebyscore(key, high.redis, low.redis, 0, limit, withscores=True)
            else:
                pipe.zrangebyscore(key, low.redis, high.redis, 0, limit, withscores=True)
        heads = [
            [(score, _id_order(member.decode())) for member, score in shard]
            for shard in pipe.execute()
        ]
        merged = heapq.merge(*heads, reverse=reverse)
        return [id_bytes.decode() for _, id_bytes in list(merged)[:limit]]

    def _ids_by_retry_count(self, min: Any, max: Any, limit: int, reverse: bool) -> list[str]:
        low, high, limit = score_bound(min), score_bound(max), check_limit(limit)
        if limit == 0:
            return []
        fresh_included = low.admits_from_below(-1) and high.admits_from_above(-1)

        def fresh(count: int) -> list[str]:
            if not fresh_included or count <= 0:
                return []
            return self._lex_ids(self.keys.fresh_lex_zset, "-", "+", count, reverse)

        def retries(count: int) -> list[str]:
            if count <= 0:
                return []
            key = self.keys.retry_count_zset
            if reverse:
                ids = self.client.zrevrangebyscore(key, high.redis, low.redis, 0, count)
            else:
                ids = self.client.zrangebyscore(key, low.redis, high.redis, 0, count)
            return [i.decode() for i in ids]

        if reverse:
            ids = retries(limit)
            return ids + fresh(limit - len(ids))
        ids = fresh(limit)
        return ids + retries(limit - len(ids))


def _exact(job_id: str) -> tuple[str, str]:
    """Lex bounds selecting the one member ``job_id\\0blob``."""
    return f"[{job_id}\0", f"({job_id}\x01"


def _id_order(job_id: str) -> bytes:
    """Ids sort as Redis sorts lex members: by their bytes."""
    return job_id.encode()
