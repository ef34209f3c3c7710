"""Bulk operations on one queue, built from the queue's scripts and reads.

Operations over a whole queue work in chunks of :data:`CHUNK` jobs, each
chunk one atomic script call, so Redis is never blocked for long.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from lowkiq.storage.queue import Queue

#: Jobs handled by one script call of a bulk operation.
CHUNK = 1000


class Actions:
    """Operator actions of one queue (used by the dashboard); each returns a count."""

    def __init__(self, queue: Queue) -> None:
        self.queue = queue
        self.keys = queue.keys
        self.client = queue.client

    def perform_all_jobs_now(self) -> int:
        """Set every queued job's ``perform_in`` to now; returns how many moved."""
        now = time.time()
        total = 0
        for shard in range(self.queue.shards_count):
            while moved := self.queue.run("perform_now", shard, now, CHUNK):
                total += moved
        return total

    def kill_all_failed_jobs(self) -> int:
        """Move queued jobs with ``retry_count >= 0``, whole, to the morgue."""
        return self._drain(
            self.keys.retry_count_zset,
            lambda ids: self.queue.run("kill_failed", time.time(), *self._with_shards(ids)),
        )

    def delete_all_failed_jobs(self) -> int:
        """Delete queued jobs with ``retry_count >= 0``."""
        return self._drain(
            self.keys.retry_count_zset,
            lambda ids: self.queue.run("delete_failed", *self._with_shards(ids)),
        )

    def morgue_queue_up(self, ids: Iterable[Any]) -> int:
        """Move these dead jobs back to the queue, due now (SPEC §3 rule 4)."""
        ids = [str(job_id) for job_id in ids]
        if not ids:
            return 0
        return int(self.queue.run("morgue_queue_up", time.time(), *self._with_shards(ids)))

    def morgue_queue_up_all_jobs(self) -> int:
        """Move every dead job back to the queue, due now."""
        return self._drain(self.keys.morgue_updated_at_zset, self.morgue_queue_up)

    def morgue_delete(self, ids: Iterable[Any]) -> int:
        """Delete these dead jobs."""
        ids = [str(job_id) for job_id in ids]
        if not ids:
            return 0
        return int(self.queue.run("morgue_delete", *ids))

    def morgue_delete_all_jobs(self) -> int:
        """Delete every dead job (a chunk at a time, hot ids' payloads with them)."""
        return self._drain(self.keys.morgue_updated_at_zset, self.morgue_delete)

    def _with_shards(self, ids: Iterable[str]) -> list[Any]:
        args: list[Any] = []
        for job_id in ids:
            args += (job_id, self.queue.shard_of(job_id))
        return args

    def _drain(self, index_key: str, handle: Callable[[list[str]], int]) -> int:
        """Apply ``handle(ids)`` to the ids of ``index_key``, a chunk at a time, until none left."""
        total = 0
        while ids := [_text(i) for i in self.client.zrange(index_key, 0, CHUNK - 1)]:
            done = handle(ids)
            total += done
            if done == 0:
                break
        return total


def _text(member: Any) -> str:
    """A sorted-set member read back (bytes) as text."""
    return member.decode() if isinstance(member, bytes) else str(member)
