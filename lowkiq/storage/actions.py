"""Bulk operations on one queue, built from the queue's scripts and reads.

Operations over a whole queue work in chunks of :data:`CHUNK` jobs, each
chunk one atomic script call, so Redis is never blocked for long.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import Any

from lowkiq.errors import ConfigurationError
from lowkiq.storage.queue import Queue

#: Jobs handled by one script call of a bulk operation.
CHUNK = 1000

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

    def _by_shard(self, ids: Iterable[Any], handle: Callable[[int, list[str]], int]) -> int:
        """Apply ``handle(shard, ids)`` to the given ids, grouped by shard."""
        groups: dict[int, list[str]] = {}
        for job_id in ids:
            text = str(job_id)
            groups.setdefault(self.shard_of(text), []).append(text)
        return sum(handle(shard, group) for shard, group in sorted(groups.items()))

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
