"""Bulk operations on one queue, built from the queue's scripts and reads.

Operations over a whole queue, or over many ids, work in chunks of
:data:`CHUNK` jobs of one shard, each chunk one atomic script call, so Redis is
never blocked for long.  No action touches a processing area: for an id being
performed, only what is queued for it is changed; its running batch is not.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from lowkiq.errors import ConfigurationError, InvalidQuery
from lowkiq.storage.queue import Queue

#: Jobs handled by one script call of a bulk operation.
CHUNK = 1000

#: The error a job killed by hand gets when it has none of its own.
KILLED_ERROR = "killed by hand (Worker.actions().kill); it had no error of its own"

#: Times a move puts a chunk again when the target queue was resharded meanwhile.
MOVE_REROUTES = 3


class HasQueue(Protocol):
    """What :meth:`Actions.move` moves jobs to: a worker class (its ``queue()``)."""

    def queue(self) -> Queue:
        """The storage of the worker's queue."""
        ...


#: Puts back into a queue the batches left in processing in shards no process holds,
#: taking and releasing their leases; returns how many jobs went back.  Ownership
#: provides it (:meth:`lowkiq.Worker.actions` passes it in), storage only calls it.
RestoreOrphaned = Callable[[Queue], int]


class Actions:
    """Operator actions of one queue (used by the dashboard); each returns a count."""

    def __init__(self, queue: Queue, restore_orphaned: RestoreOrphaned | None = None) -> None:
        self.queue = queue
        self.keys = queue.keys
        self.client = queue.client
        self._restore_orphaned = restore_orphaned

    @functools.cached_property
    def shard_of(self) -> Callable[[str], int]:
        """The shard each id's jobs are changed in (see :meth:`Queue.locator`)."""
        return self.queue.locator()

    def perform_all_jobs_now(self) -> int:
        """Set every queued job's ``perform_in`` to now; returns how many moved."""
        total = 0
        for shard in self.queue.shards:  # now on Redis's clock
            while moved := self.queue.run("perform_now", shard, "", CHUNK):
                total += moved
        return total

    def kill_all_failed_jobs(self) -> int:
        """Move queued jobs with ``retry_count >= 0``, whole, to the morgue."""
        return self._drain(
            self.keys.retry_count_zset,
            lambda shard, ids: self.queue.run("kill_failed", shard, "", *ids),
        )

    def delete_all_failed_jobs(self) -> int:
        """Delete queued jobs with ``retry_count >= 0``."""
        return self._drain(
            self.keys.retry_count_zset,
            lambda shard, ids: self.queue.run("delete_failed", shard, *ids),
        )

    def delete(self, ids: Iterable[Any]) -> int:
        """Delete these queued jobs (fresh, retries, due or not) with their payloads;
        returns how many were queued.  Dead jobs are :meth:`morgue_delete`'s."""
        return self._by_shard(
            ids, lambda shard, chunk: self.queue.run("jobs_delete", shard, *chunk)
        )

    def perform_now(self, ids: Iterable[Any]) -> int:
        """Make these queued jobs due now (``perform_in = now`` for those not yet due;
        due ones keep their place, every job its ``retry_count``); returns how many
        were queued."""
        return self._by_shard(
            ids, lambda shard, chunk: self.queue.run("jobs_perform_now", shard, "", *chunk)
        )

    def kill(self, ids: Iterable[Any]) -> int:
        """Move these queued jobs, whole, to the morgue (a job that never failed gets
        :data:`KILLED_ERROR` as its error); returns how many were queued."""
        error = self.queue.codec.error_bytes(KILLED_ERROR)
        return self._by_shard(
            ids, lambda shard, chunk: self.queue.run("jobs_kill", shard, "", error, *chunk)
        )

    def clear(self) -> int:
        """Delete every queued job of the queue (not the processing areas, not the
        morgue), a chunk at a time; returns how many."""
        total = 0
        for shard in self.queue.shards:
            while cleared := int(self.queue.run("jobs_clear", shard, CHUNK)):
                total += cleared
        return total

    def move(self, ids: Iterable[Any], to: HasQueue) -> int:
        """Move these queued jobs to the queue of the worker ``to``: payloads keep their
        scores and merge as a dead job queued up does (SPEC §3 rule 4: ``perform_in =
        now``, ``retry_count = -1``, the error stays); returns how many moved.

        Per chunk of one shard: the jobs are read, put into the target queue, then
        only the payloads put there are taken out of this one (a payload enqueued
        meanwhile stays).  On a Redis Cluster the two queues' shards are different
        slots, so no one script can do both: a crash between the steps, or a job
        popped between them, leaves a payload in both queues (performed twice at
        worst), never in neither.
        """
        target = to.queue()
        target.refresh_layout()
        if target.name == self.queue.name:
            raise InvalidQuery(f"cannot move jobs of {self.queue.name} onto their own queue")
        return self._by_shard(ids, lambda shard, chunk: self._move_chunk(shard, chunk, target))

    def perform_all_failed_jobs_now(self) -> int:
        """Make every queued job with ``retry_count >= 0`` due now (retry counts stay);
        returns how many there were."""
        return self._each_chunk(
            self.keys.retry_count_zset,
            lambda shard, ids: self.queue.run("jobs_perform_now", shard, "", *ids),
        )

    def delete_all_scheduled_jobs(self) -> int:
        """Delete every queued job not yet due (``perform_in`` after now, on Redis's
        clock), a chunk at a time; returns how many."""
        seconds, micros = self.client.time()
        after = f"({seconds + micros / 1e6!r}"
        total = 0
        for shard in self.queue.shards:
            key = self.keys.perform_in_zset(shard)
            while ids := [
                _text(i) for i in self.client.zrangebyscore(key, after, "+inf", 0, CHUNK)
            ]:
                deleted = int(self.queue.run("jobs_delete", shard, *ids))
                total += deleted
                if deleted == 0:
                    break
        return total

    def morgue_queue_up(self, ids: Iterable[Any]) -> int:
        """Move these dead jobs back to the queue, due now (SPEC §3 rule 4)."""
        return self._by_shard(ids, self._morgue_queue_up)

    def morgue_queue_up_all_jobs(self) -> int:
        """Move every dead job back to the queue, due now."""
        return self._drain(self.keys.morgue_updated_at_zset, self._morgue_queue_up)

    def morgue_delete(self, ids: Iterable[Any]) -> int:
        """Delete these dead jobs."""
        return self._by_shard(ids, self._morgue_delete)

    def morgue_delete_all_jobs(self) -> int:
        """Delete every dead job (a chunk at a time, hot ids' payloads with them)."""
        return self._drain(self.keys.morgue_updated_at_zset, self._morgue_delete)

    def restore_orphaned_batches(self) -> int:
        """Put back into the queue the batches left in processing in shards no process
        holds (a process died, and no live process serves the queue: shown as busy
        forever otherwise); returns how many jobs went back.  Needs the
        ``restore_orphaned`` these actions were made with (:meth:`lowkiq.Worker.actions`
        gives it)."""
        if self._restore_orphaned is None:
            raise ConfigurationError(
                "restore_orphaned_batches needs actions made with restore_orphaned "
                "(use Worker.actions())"
            )
        return self._restore_orphaned(self.queue)

    def _morgue_queue_up(self, shard: int, ids: list[str]) -> int:
        return int(self.queue.run("morgue_queue_up", shard, "", *ids))

    def _morgue_delete(self, shard: int, ids: list[str]) -> int:
        return int(self.queue.run("morgue_delete", shard, *ids))

    def _move_chunk(self, shard: int, ids: list[str], target: Queue) -> int:
        """Move the queued jobs ``ids`` of ``shard`` to ``target``: read, put, take."""
        found = self.queue.run("move_read", shard, *ids)
        jobs = [
            (_text(found[i]), found[i + 1], found[i + 2], found[i + 3])
            for i in range(0, len(found), 4)
        ]
        pending = jobs
        for _ in range(MOVE_REROUTES + 1):
            if not pending:
                break
            by_shard: dict[int, list[Any]] = {}
            for job_id, packed, error, group in pending:
                wire = b"" if error is None else b"+" + error
                by_shard.setdefault(target.shard_of(job_id), []).append(
                    (job_id, packed, wire, group)
                )
            source = self.queue.name
            calls = [
                ("move_put", to_shard, ["", source, *(arg for job in moved for arg in job)])
                for to_shard, moved in by_shard.items()
            ]
            replies = target.run_pipelined(calls)
            refused = {shard for shard, reply in zip(by_shard, replies, strict=True) if reply == -1}
            pending = [job for job in pending if target.shard_of(job[0]) in refused]
            if pending:
                target.refresh_layout()
        if pending:
            raise InvalidQuery(
                f"{target.name} was resharded {MOVE_REROUTES} times during the move; "
                f"{len(pending)} job(s) stay in {self.queue.name}"
            )
        if jobs:
            taken = (arg for job in jobs for arg in job[:2])
            self.queue.run("move_take", shard, target.name, *taken)
        return len(jobs)

    def _by_shard(self, ids: Iterable[Any], handle: Callable[[int, list[str]], int]) -> int:
        """Apply ``handle(shard, ids)`` to the given ids (each once), grouped by shard, at
        most :data:`CHUNK` ids a call."""
        by_shard: dict[int, dict[str, None]] = {}
        for job_id in ids:
            text = str(job_id)
            if "\0" in text:
                raise InvalidQuery(f"a job id must not contain NUL, got {text!r}")
            by_shard.setdefault(self.shard_of(text), {})[text] = None
        total = 0
        for shard, ids_of_shard in sorted(by_shard.items()):
            chosen = list(ids_of_shard)
            for start in range(0, len(chosen), CHUNK):
                total += int(handle(shard, chosen[start : start + CHUNK]))
        return total

    def _each_chunk(
        self, index_key: Callable[[int], str], handle: Callable[[int, list[str]], int]
    ) -> int:
        """Apply ``handle(shard, ids)`` to the ids of each shard's ``index_key(shard)``, a
        chunk at a time, once each (``handle`` leaves them in the index)."""
        total = 0
        for shard in self.queue.shards:
            key = index_key(shard)
            start = 0
            while ids := [_text(i) for i in self.client.zrange(key, start, start + CHUNK - 1)]:
                total += handle(shard, ids)
                start += CHUNK
        return total

    def _drain(
        self, index_key: Callable[[int], str], handle: Callable[[int, list[str]], int]
    ) -> int:
        """Apply ``handle(shard, ids)`` to the ids of each shard's ``index_key(shard)``, a
        chunk at a time, until none are left."""
        total = 0
        for shard in self.queue.shards:
            key = index_key(shard)
            while ids := [_text(i) for i in self.client.zrange(key, 0, CHUNK - 1)]:
                done = handle(shard, ids)
                total += done
                if done == 0:
                    break
        return total


def _text(member: Any) -> str:
    """A sorted-set member read back (bytes) as text."""
    return member.decode() if isinstance(member, bytes) else str(member)
