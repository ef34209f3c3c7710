"""The batches of this process that ``Worker.actions().cancel`` cancelled.

A cancel adds an entry per running batch it found to the cancels stream (queue, shard,
the batch's number, the ids) and bumps the config version (:mod:`lowkiq.storage.cancels`).
The coordinator's beat, which reads that version anyway, calls
:meth:`CancelReader.follow` when it moved: the new entries of this process's queues are
read and kept in :data:`CANCELLED`, where a running batch looks itself up
(``current_batch().should_stop()``) and where the executor looks, once a perform
ended, for the jobs to settle as cancelled (:mod:`lowkiq.runtime.performing`).
A batch is named by its queue, shard and pop number, so an id's later batches (its
payloads enqueued after the cancel) are never taken for it.  While no cancel is made,
this costs one read of the (absent) stream per full config reading (every 30 s).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Collection, Iterable
from typing import Any

import redis
from redis.exceptions import RedisClusterException

from lowkiq.clients.connection import Client
from lowkiq.storage.keys import OwnershipKeys

log = logging.getLogger("lowkiq.ownership")

#: ``(queue, shard, batch number)`` of a batch.
BatchKey = tuple[str, int, int]

#: Seconds a cancelled batch is remembered (a perform that ignores ``should_stop`` may
#: run long; its cancelled jobs are settled as cancelled when it ends within this).
REMEMBER_SECONDS = 24 * 3600.0
#: Most cancelled batches remembered at once (the oldest go first).
REMEMBER_BATCHES = 10_000
#: Entries read from the cancels stream per round trip.
READ_COUNT = 1000

_KEYS = OwnershipKeys()


class Cancelled:
    """Cancelled batches of this process's queues: which of their ids were cancelled.
    Written by the coordinator's thread, read by the performing threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: batch -> (its cancelled ids, when they were noted: time.monotonic).  Empty
        #: while no cancel was heard, the common case: a batch tests it (no call, no lock).
        self.batches: dict[BatchKey, tuple[frozenset[str], float]] = {}

    def ids(self, batch: BatchKey) -> frozenset[str]:
        """The cancelled ids of ``batch`` (empty: none)."""
        found = self.batches.get(batch)
        return found[0] if found is not None else frozenset()

    def add(self, batch: BatchKey, ids: Iterable[str]) -> None:
        """Note ``ids`` of ``batch`` as cancelled."""
        now = time.monotonic()
        with self._lock:
            known = self.batches.get(batch)
            joined = frozenset(ids) | (known[0] if known is not None else frozenset())
            self.batches[batch] = (joined, now)
            self._prune(now)

    def forget(self, batch: BatchKey, ids: Collection[str]) -> None:
        """``ids`` of ``batch`` were settled: forget them."""
        with self._lock:
            known = self.batches.get(batch)
            if known is None:
                return
            left = known[0] - frozenset(ids)
            if left:
                self.batches[batch] = (left, known[1])
            else:
                del self.batches[batch]

    def clear(self) -> None:
        """Forget every cancelled batch."""
        with self._lock:
            self.batches.clear()

    def __len__(self) -> int:
        return len(self.batches)

    def _prune(self, now: float) -> None:
        old = [key for key, (_, at) in self.batches.items() if now - at > REMEMBER_SECONDS]
        for key in old:
            del self.batches[key]
        while len(self.batches) > REMEMBER_BATCHES:
            del self.batches[next(iter(self.batches))]


#: This process's cancelled batches.
CANCELLED = Cancelled()


class CancelReader:
    """Reads the cancels stream's new entries for this process's queues into
    :data:`CANCELLED`; a config reader of the coordinator (called when the config
    version moved, and on its periodic full reading)."""

    def __init__(self, queue_names: Iterable[str], cancelled: Cancelled = CANCELLED) -> None:
        self.queue_names = frozenset(queue_names)
        self.cancelled = cancelled
        #: The id of the last entry read (``-``: none yet; the first reading takes what
        #: the stream keeps, which names batches popped before this process started:
        #: they never match its own).
        self.cursor = "-"

    def follow(self, client: Client) -> None:
        """Read the entries added since the last reading; a Redis error leaves them for
        the next one."""
        try:
            self._read(client)
        except (redis.RedisError, RedisClusterException) as exc:
            log.debug("could not read the cancels: %s", exc)

    def _read(self, client: Client) -> None:
        while True:
            start = self.cursor if self.cursor == "-" else f"({self.cursor}"
            entries: Any = client.xrange(_KEYS.cancels_stream, start, "+", READ_COUNT)
            for entry_id, fields in entries:
                self.cursor = _text(entry_id)
                self._note({_text(k): _text(v) for k, v in fields.items()})
            if len(entries) < READ_COUNT:
                return

    def _note(self, fields: dict[str, str]) -> None:
        queue = fields.get("queue", "")
        if queue not in self.queue_names:
            return
        try:
            key = (queue, int(fields["shard"]), int(fields["batch"]))
        except (KeyError, ValueError):
            return
        ids = [i for i in fields.get("ids", "").split("\0") if i]
        if ids:
            log.debug("%s:%d: batch %d: cancelled %s", queue, key[1], key[2], ", ".join(ids[:10]))
            self.cancelled.add(key, ids)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
