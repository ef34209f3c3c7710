"""Change a queue's ``shards_count`` while jobs are enqueued and processed.

``lowkiq reshard -r app.py OrderWorker --shards 32`` runs :func:`reshard`:

1. **Begin.** The new shards are numbered after the old ones (8 shards
   ``0..7`` get new shards ``8..39``) and *closed*: they take pushes but no
   pop.  Then the layout (:mod:`lowkiq.storage.layout`) names them, so new
   jobs go there, and the worker processes are nudged to serve both ranges.
2. **Retire each old shard**, one at a time: it is marked *retired* (in its
   own slot, so atomically with every push and pop of it): from then on a
   push into it is refused and sent again to the new shards, and nothing is
   popped from it.  Its running batch finishes (or, when no process holds the
   shard, the command takes its lease, which restores the batch).  Then its
   queued and dead jobs are merged, a chunk at a time, into their new shards
   and removed from it: merge first, remove after, and merging a job twice
   changes nothing, so an interrupted command can simply run again.
3. **Open** each new shard once every old shard that can hold jobs of its ids
   is emptied (for 8 → 32 shards that is one old shard; in general those whose
   number is congruent modulo ``gcd(old, new)``).  Until then none of its ids
   runs, so a job moved late merges with the jobs pushed meanwhile and the
   id's payloads still run in score order, by one thread at a time.  A lease of
   it taken under an epoch not above its old shards' is revoked as it opens, so
   a moved job's fence grows (``lua/reshard_open.lua``).
4. **Finish**: the layout forgets the old range; the processes release it.

Only one command reshards a queue at a time (a lock with a TTL).  Retired old
shards keep their ``hold`` key for good: a process that still knows the old
layout is refused, not lost.
"""

from __future__ import annotations

import math
import os
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from lowkiq.errors import LowkiqError
from lowkiq.ownership import leases
from lowkiq.storage import schedules
from lowkiq.storage.keys import OWNERSHIP_PREFIX
from lowkiq.storage.layout import Layout
from lowkiq.storage.queue import Queue, shard_of

#: Jobs read, merged and removed per round trip.
CHUNK = 200
#: Seconds between two looks at a retired shard's running batch.
BATCH_POLL = 0.02
#: The lock's lifetime, ms; it is renewed every chunk.
LOCK_TTL_MS = 30_000
#: The lease a command takes on an old shard nobody serves, seconds.
LEASE_TTL = 30.0


#: Fields of one job record of ``reshard_take`` (kind, id, time, retry_count, has an
#: error, error, payloads, group).
RECORD_FIELDS = 8


class ReshardError(LowkiqError):
    """A reshard cannot start or go on (one runs already, or nothing would change)."""


@dataclass(frozen=True)
class Progress:
    """How far a reshard is."""

    layout: Layout
    #: Old shards emptied.
    retired: int
    #: Jobs moved so far (queued and dead, by this and earlier runs).
    moved: int
    #: Seconds since this command started.
    elapsed: float
    #: What just happened, for people.
    event: str

    def __str__(self) -> str:
        old = len(self.layout.old_shards) or self.retired
        return (
            f"{self.elapsed:7.2f}s  {self.retired}/{old} old shards emptied, "
            f"{self.moved} job(s) moved: {self.event}"
        )


def status(queue: Queue) -> str:
    """One line on the queue's layout: its shards, and a running reshard's progress."""
    layout = queue.refresh_layout()
    shards = layout.new_shards
    line = f"{queue.name}: {layout.count} shard(s), numbers {shards.start}..{shards.stop - 1}"
    if layout.previous is None:
        return line
    old = layout.old_shards
    fields = queue.client.hgetall(queue.keys.layout_hash)
    retired = queue.client.scard(queue.keys.retired_set)
    return (
        f"{line}; resharding from {len(old)} shard(s) ({old.start}..{old.stop - 1}): "
        f"{retired}/{len(old)} emptied, {int(fields.get(b'moved', 0))} job(s) moved"
    )


def reshard(
    queue: Queue, shards: int, on_progress: Callable[[Progress], None] = lambda p: None
) -> Layout:
    """Change ``queue`` to ``shards`` shards (or finish the reshard to ``shards`` that an
    interrupted command began); returns the final layout."""
    if shards < 1:
        raise ReshardError("the number of shards must be at least 1")
    owner = f"reshard:{socket.gethostname()}:{os.getpid()}"
    with _locked(queue, owner) as keep_lock:
        return _Resharding(queue, owner, keep_lock, on_progress).run(shards)


@contextmanager
def _locked(queue: Queue, owner: str) -> Iterator[Callable[[], None]]:
    """Hold the queue's reshard lock; yields a function that renews it."""
    lock = queue.keys.reshard_lock

    def keep() -> None:
        if not queue.write("layout_lock", [lock], owner, LOCK_TTL_MS, "0"):
            holder: Any = queue.client.get(lock)
            raise ReshardError(
                f"{queue.name}: another command is resharding the queue "
                f"({holder.decode() if holder else 'gone'})"
            )

    keep()
    try:
        yield keep
    finally:
        queue.write("layout_lock", [lock], owner, LOCK_TTL_MS, "1")


class _Resharding:
    def __init__(
        self,
        queue: Queue,
        owner: str,
        keep_lock: Callable[[], None],
        on_progress: Callable[[Progress], None],
    ) -> None:
        self.queue = queue
        self.client = queue.client
        self.owner = owner
        self.keep_lock = keep_lock
        self.on_progress = on_progress
        self.started = time.monotonic()
        self.layout = queue.refresh_layout()
        self.retired: set[int] = set()
        #: New shards this command opened (or found open).
        self.opened: set[int] = set()
        self.moved = 0

    def report(self, event: str) -> None:
        self.on_progress(
            Progress(self.layout, len(self.retired), self.moved, self.elapsed(), event)
        )

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def run(self, shards: int) -> Layout:
        self.begin(shards)
        keys = self.queue.keys
        self.retired = {int(s) for s in self.client.smembers(keys.retired_set)}
        self.moved = int(self.client.hget(keys.layout_hash, "moved") or 0)
        self.open_ready()
        for old in self.layout.old_shards:
            if old not in self.retired:
                self.retire(old)
        return self.finish()

    def begin(self, shards: int) -> None:
        layout = self.layout
        if layout.previous is not None:
            if layout.count != shards:
                raise ReshardError(
                    f"{self.queue.name}: a reshard to {layout.count} shards is running; "
                    f"finish it first (lowkiq reshard ... --shards {layout.count})"
                )
            self.report("resuming")
            return
        if layout.count == shards:
            raise ReshardError(f"{self.queue.name} has {shards} shard(s) already")
        base = layout.base + layout.count
        # Closed before the layout names them: no job of theirs may run before its
        # older payloads, still in an old shard, have joined it.
        self._write_each([("reshard_hold", new, ("closed",)) for new in range(base, base + shards)])
        keys = self.queue.keys
        self.queue.write(
            "layout_begin",
            [keys.layout_hash, keys.retired_set],
            layout.base,
            layout.count,
            shards,
            time.time(),
        )
        self.layout = self.queue.refresh_layout()
        self._nudge()
        self.report(
            f"began: {layout.count} -> {shards} shard(s); new jobs go to shards "
            f"{base}..{base + shards - 1}"
        )

    def retire(self, old: int) -> None:
        running = self.queue.write("reshard_hold", [self.queue.keys.prefix(old)], "retired")
        if running:
            self._await_batch(old)
        while True:
            self.keep_lock()
            records = self.queue.run("reshard_take", old, CHUNK)
            if not records:
                break
            self._move(old, records)
        self._move_counts(old)
        schedules.carry_over(self.queue, old, self.layout)
        self.client.sadd(self.queue.keys.retired_set, old)
        self.retired.add(old)
        self.report(f"old shard {old} emptied")
        self.open_ready()

    def _await_batch(self, old: int) -> None:
        """Wait until the shard's running batch is acked, failed or restored."""
        keys = self.queue.keys
        said = 0.0
        while self.client.hlen(keys.processing_hash(old)):
            if self.client.get(keys.lease(old)) is None:
                # Nobody serves it: take it, which restores the batch, and let go.
                lease, _, _ = leases.acquire(self.queue, old, self.owner, LEASE_TTL)
                if lease is not None:
                    leases.release(self.queue, [lease])
                continue
            if self.elapsed() - said > 5:
                said = self.elapsed()
                self.report(f"waiting for the running batch of old shard {old}")
            self.keep_lock()
            time.sleep(BATCH_POLL)

    def _move(self, old: int, records: list[Any]) -> None:
        """Merge ``records`` (``reshard_take``'s) into their new shards, then drop them."""
        layout = self.layout
        by_new: dict[int, list[Any]] = {}
        dropped: list[Any] = []
        for i in range(0, len(records), RECORD_FIELDS):
            record = records[i : i + RECORD_FIELDS]
            job_id = record[1].decode()
            by_new.setdefault(shard_of(job_id, layout.count, layout.base), []).extend(record)
            dropped += (record[0], record[1])
        # "": now on Redis's clock, for the merges' restore rules.
        self._write_each([("reshard_put", new, ("", *args)) for new, args in by_new.items()])
        self.queue.write("reshard_drop", [self.queue.keys.prefix(old)], *dropped)
        count = len(dropped) // 2
        self.moved += count
        self.client.hincrby(self.queue.keys.layout_hash, "moved", count)

    def _move_counts(self, old: int) -> None:
        """Add the old shard's processed, failed, discarded, snoozed and cancelled counts
        to a new shard's."""
        counts = self.queue.write("reshard_counts", [self.queue.keys.prefix(old)])
        processed, failed, discarded, snoozed, cancelled = counts
        assert self.layout.previous is not None
        new = self.layout.base + (old - self.layout.previous[0]) % self.layout.count
        keys = self.queue.keys
        if processed:
            self.client.incrby(keys.processed_counter(new), processed)
        if failed:
            self.client.incrby(keys.failed_counter(new), failed)
        if discarded:
            self.client.incrby(keys.discarded_counter(new), discarded)
        if snoozed:
            self.client.incrby(keys.snoozed_counter(new), snoozed)
        if cancelled:
            self.client.incrby(keys.cancelled_counter(new), cancelled)

    def open_ready(self) -> None:
        """Open the new shards whose old shards are all emptied; a new shard's lease taken
        under an epoch not above its old shards' is revoked (see ``lua/reshard_open.lua``),
        so every fence a moved job runs under is above those it ran under before."""
        layout = self.layout
        if layout.previous is None:
            return
        old_base, old_count = layout.previous
        step = math.gcd(old_count, layout.count)
        sources = {
            new: [old_base + old for old in range((new - layout.base) % step, old_count, step)]
            for new in layout.new_shards
        }
        ready = [
            new
            for new, olds in sources.items()
            if new not in self.opened and all(old in self.retired for old in olds)
        ]
        if not ready:
            return
        epochs = self._epochs(sorted({old for new in ready for old in sources[new]}))
        calls = [
            ("reshard_open", new, (max(epochs[old] for old in sources[new]),)) for new in ready
        ]
        replies = self._write_each(calls)
        self.opened.update(ready)
        opened = sum(int(reply[0]) for reply in replies)
        if opened:
            self.report(f"opened {opened} new shard(s)")
        if any(int(reply[1]) for reply in replies):
            self._nudge()  # their holders take them again at once, under a higher epoch

    def _epochs(self, shards: list[int]) -> dict[int, int]:
        """The last epoch granted on each of ``shards`` (0: never leased)."""
        pipe = self.client.pipeline(transaction=False)
        for shard in shards:
            pipe.get(self.queue.keys.epoch_counter(shard))
        return {shard: int(value or 0) for shard, value in zip(shards, pipe.execute(), strict=True)}

    def finish(self) -> Layout:
        keys = self.queue.keys
        self.client.hset(
            keys.layout_hash,
            mapping={"finished_at": time.time(), "last_moved": self.moved},
        )
        self.client.hdel(keys.layout_hash, "from_base", "from_count", "started_at", "moved")
        self.layout = self.queue.refresh_layout()
        self._nudge()
        self.report("done")
        return self.layout

    def _write_each(self, calls: list[tuple[str, int, tuple[Any, ...]]]) -> list[Any]:
        """Run script calls on shards in one round trip (a round trip each, waiting
        for the replicas, when the queue waits for replicas)."""
        if not calls:
            return []
        if self.queue.replication is None:
            return self.queue.run_pipelined(calls)
        return [
            self.queue.write(name, [self.queue.keys.prefix(shard)], *args)
            for name, shard, args in calls
        ]

    def _nudge(self) -> None:
        """Tell every worker process to read the layout now."""
        self.queue.scripts.membership_nudge(keys=[OWNERSHIP_PREFIX], args=[self.owner])
