"""Where a queue's shards are: the range of shard numbers new jobs go to, and
during a reshard the range being emptied.

A queue starts with shards ``0 .. shards_count - 1``, the class's count, which
the first process to use the queue writes to Redis (``layout_hash``,
:mod:`lowkiq.storage.keys`); from then on the record decides, and a changed
``shards_count`` in the code is only reported, never followed.  Resharding
(:mod:`lowkiq.ownership.resharding`) numbers the new shards right after the old ones (8
shards become 32 as shards 8 to 39), so no shard number is ever used twice: a
job's keys never change their name, only the shard they are in.

An enqueue uses the layout it read at most :data:`MAX_AGE` seconds ago and
never relies on it being current: a push to a shard a reshard retired is
refused by the push script and sent again under a fresh layout.  Reads for
people (queries, actions, metrics, the dashboard) read the layout first.
"""

from __future__ import annotations

import threading
import time
import weakref
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import redis
from redis.exceptions import RedisClusterException

from lowkiq.clients.connection import Client
from lowkiq.errors import is_out_of_memory
from lowkiq.storage.keys import QueueKeys

#: Seconds a reader keeps a queue's layout before reading it again.
MAX_AGE = 1.0


@dataclass(frozen=True)
class Layout:
    """The shards of one queue: new jobs go to ``base .. base + count - 1``.

    ``previous`` is ``(base, count)`` of the old shards while a reshard
    empties them; they come right before the new ones.
    """

    base: int
    count: int
    previous: tuple[int, int] | None = None

    @property
    def shards(self) -> range:
        """Every shard that may hold jobs: the old ones of a running reshard, then the new."""
        start = self.previous[0] if self.previous else self.base
        return range(start, self.base + self.count)

    @property
    def new_shards(self) -> range:
        """The shards new jobs go to."""
        return range(self.base, self.base + self.count)

    @property
    def old_shards(self) -> range:
        """The shards a running reshard empties (none when no reshard runs)."""
        if self.previous is None:
            return range(0)
        return range(self.previous[0], self.previous[0] + self.previous[1])

    def shard_of(self, job_id: str) -> int:
        """The shard new jobs of ``job_id`` go to: ``base + crc32(id) % count``."""
        return self.base + zlib.crc32(job_id.encode()) % self.count


def parse(fields: dict[bytes, bytes]) -> Layout:
    """The layout in a ``layout_hash``'s fields."""
    previous = None
    if b"from_base" in fields:
        previous = (int(fields[b"from_base"]), int(fields[b"from_count"]))
    return Layout(int(fields[b"base"]), int(fields[b"count"]), previous)


def read(client: Client, queue_name: str, default_count: int) -> Layout:
    """The queue's layout now, from Redis; remembered for :func:`cached`."""
    return read_many(client, [(queue_name, default_count)])[0]


def read_many(client: Client, queues: Sequence[tuple[str, int]]) -> list[Layout]:
    """The layouts of several queues (name, class's shards_count) now, in one round trip.

    A queue with no layout in Redis gets its class's (base 0) written there, in
    one more round trip: from then on a changed ``shards_count`` in the code
    cannot split an id's jobs over two shards; only a reshard changes it.  On a full
    Redis, which refuses that write, such a queue reads as its class's layout, not
    remembered (it holds no job: a push would have written the layout first).
    """
    pipe = client.pipeline(transaction=False)
    for name, _ in queues:
        pipe.hgetall(QueueKeys(name).layout_hash)
    found = list(pipe.execute())
    missing = [n for n, fields in enumerate(found) if b"count" not in fields]
    unwritten: set[int] = set()
    if missing:
        pipe = client.pipeline(transaction=False)
        for n in missing:
            name, default = queues[n]
            key = QueueKeys(name).layout_hash
            pipe.hsetnx(key, "base", 0)
            pipe.hsetnx(key, "count", default)
            pipe.hgetall(key)
        replies = pipe.execute(raise_on_error=False)
        for index, n in enumerate(missing):
            written, fields = replies[3 * index], replies[3 * index + 2]
            if isinstance(written, Exception) and is_out_of_memory(written):
                unwritten.add(n)
                fields = {b"base": b"0", b"count": str(queues[n][1]).encode()}
            elif isinstance(fields, Exception):
                raise fields
            found[n] = fields
    layouts = [parse(fields) for fields in found]
    at = time.monotonic()
    with _LOCK:
        known = _CACHE.setdefault(client, {})
        for n, ((name, _), layout) in enumerate(zip(queues, layouts, strict=True)):
            if n not in unwritten:
                known[name] = (layout, at)
    return layouts


def cached(client: Client, queue_name: str, default_count: int) -> Layout:
    """The queue's layout, read again when the one known is older than :data:`MAX_AGE`
    (kept while Redis cannot say: on a cluster the layout's master may be down while
    the shards' are up, and a stale layout is safe for an enqueue)."""
    with _LOCK:
        known = _CACHE.get(client, {}).get(queue_name)
    if known is not None and time.monotonic() - known[1] < MAX_AGE:
        return known[0]
    try:
        return read(client, queue_name, default_count)
    except (redis.RedisError, RedisClusterException):
        if known is None:
            raise
        return known[0]


_LOCK = threading.Lock()
_CACHE: weakref.WeakKeyDictionary[Client, dict[str, tuple[Layout, float]]] = (
    weakref.WeakKeyDictionary()
)
