"""The banner of every page when a worker has shards no live process serves while jobs
wait in them (a crashed fleet, a process stopped by hand, workers never started).

"Served" is what ``lowkiq info`` counts as served: the shard's lease is held by a live
process (:func:`lowkiq.processes`).  Read at most once every :data:`TTL` seconds per web
process, so every page stays cheap.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import redis
from redis.exceptions import RedisClusterException

import lowkiq
from lowkiq.errors import LowkiqError

#: Seconds a web process keeps what it read of the shards' owners.
TTL = 5.0


@dataclass(frozen=True)
class UnservedShards:
    """One worker's shards that no live process serves, and the jobs queued in them."""

    worker: str
    #: Shards no live process serves.
    unserved: int
    #: Every shard of the worker's queue.
    shards: int
    #: Jobs queued in the unserved shards.
    waiting: int

    def message(self) -> str:
        """``"OrderWorker: 3 of 5 shards have no live process (12 jobs waiting)"``."""
        shards = "shard" if self.shards == 1 else "shards"
        has = "has" if self.unserved == 1 else "have"
        jobs = "job" if self.waiting == 1 else "jobs"
        return (
            f"{self.worker}: {self.unserved} of {self.shards} {shards} {has} no live process"
            f" ({self.waiting:,} {jobs} waiting)"
        )


def read_unserved() -> list[UnservedShards]:
    """Every worker with shards no live process serves and jobs queued in them, in
    settings order (two round trips per worker to read the owners, one to count)."""
    found = [(owners, owners.unowned) for owners in lowkiq.processes().queues if owners.unowned]
    if not found:
        return []
    workers = {worker.__name__: worker for worker in lowkiq.settings.workers}
    client = lowkiq.settings.client()
    pipe = client.pipeline(transaction=False)
    for owners, shards in found:
        keys = workers[owners.worker].queue(client).keys
        for shard in shards:
            pipe.zcard(keys.perform_in_zset(shard))
    counts = iter(pipe.execute())
    result = []
    for owners, shards in found:
        waiting = sum(int(next(counts)) for _ in shards)
        if waiting:
            result.append(UnservedShards(owners.worker, len(shards), len(owners.owners), waiting))
    return result


_read: dict[str, Any] = {"at": -TTL, "key": None, "found": []}


def reset() -> None:
    """Forget what was read (tests, or after the settings change)."""
    _read.update(at=-TTL, key=None, found=[])


def unserved_shards() -> list[UnservedShards]:
    """:func:`read_unserved`, read at most once every :data:`TTL` seconds per process (and
    afresh when the client or the workers change); nothing when Redis cannot answer."""
    now = time.monotonic()
    try:
        key = (
            id(lowkiq.settings.client()),
            tuple((w.__name__, w.queue_name, w.shards_count) for w in lowkiq.settings.workers),
        )
        if now - _read["at"] < TTL and _read["key"] == key:
            return list(_read["found"])
        found = read_unserved()
    except (LowkiqError, redis.RedisError, RedisClusterException, OSError):
        key, found = None, []
    _read.update(at=now, key=key, found=found)
    return list(found)
