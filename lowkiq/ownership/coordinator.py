"""One process's ownership loop: heartbeat, assignment, lease acquisition.

The coordinator runs on a thread of its own.  Every ``heartbeat_interval``
seconds, and at once when nudged, it beats (:mod:`~lowkiq.ownership.membership`,
O(1) in Redis); when it holds the assigner role and the membership changed, it
recomputes and publishes the assignment (:mod:`~lowkiq.ownership.assigner`);
when the published assignment changed, it reads its own shards, asks the
processing threads to give back the shards that moved away, and acquires the
ones that came to it once their previous owner released them (which wakes it)
or their lease expired.  On a single server a beat carries the lease renewals
in its round trip when they are due (:mod:`~lowkiq.ownership.renewer`), whose
own timer renews them when no beat did, so a slow or failing beat never lets
them lapse.  It
also re-reads which queues are paused and where their shards are when the
beat's config version moves (:mod:`lowkiq.pausing`, :mod:`lowkiq.resharding`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import redis
from redis.exceptions import RedisClusterException

from lowkiq.connection import Client
from lowkiq.ownership import leases
from lowkiq.ownership.assigner import Assigner
from lowkiq.ownership.assignment import ShardKey, deal_to_threads
from lowkiq.ownership.leases import HeldLease, Term
from lowkiq.ownership.membership import Beat, Membership
from lowkiq.ownership.renewer import Renewer
from lowkiq.ownership.report import InfoReport, rss_bytes
from lowkiq.ownership.watchers import ConfigWatcher
from lowkiq.shard_handler import ShardHandler
from lowkiq.storage.queue import Queue

log = logging.getLogger("lowkiq.ownership")

#: Seconds to wait past a held lease's expiry before trying to take it again.
EXPIRY_MARGIN = 0.01


class ThreadLike(Protocol):
    """What the coordinator asks of a processing thread
    (:class:`~lowkiq.processing_thread.ProcessingThread`)."""

    def add(self, handler: ShardHandler) -> None:
        """Serve ``handler``'s shard from the next step on."""

    def remove(self, key: ShardKey, release: bool) -> None:
        """Stop serving a shard after its running batch; ``release``: give its lease up."""

    def pause(self, queues: frozenset[str]) -> None:
        """Take no new batch of these queues' shards (all the paused ones), keeping them."""

    def wake(self, client: Client) -> None:
        """Interrupt the thread's idle wait."""

    @property
    def busy(self) -> int:
        """How many of the thread's shards are in ``perform`` now."""


@dataclass
class Plan:
    """Which shards this process wants and which thread serves each.

    ``static`` plans (a splitter thread_of the shards) never change; automatic
    plans follow the assignment of every beat.
    """

    lanes: int
    static: dict[ShardKey, int] | None = None


class Coordinator:
    """Keeps this process's leases in step with the membership and assignment."""

    def __init__(
        self,
        client: Client,
        membership: Membership,
        queues: Sequence[Queue],
        plan: Plan,
        lanes: Sequence[ThreadLike],
        make_handler: Callable[[int, str, int, str], ShardHandler],
        lease_ttl: float,
        heartbeat_interval: float,
        threads: int,
    ) -> None:
        self.client = client
        self.membership = membership
        self.queues = {queue.name: queue for queue in queues}
        self.plan = plan
        self.lanes = list(lanes)
        self.make_handler = make_handler
        self.lease_ttl = lease_ttl
        self.heartbeat_interval = heartbeat_interval
        self.threads = threads
        self.report = InfoReport(threads, self.queues, plan.static is not None)
        #: Follows paused queues, layouts and the readers added to ``watcher.others``.
        self.watcher = ConfigWatcher(client, self.queues, self.lanes, plan.static is not None)
        self.quiet = False
        # Set when the process is stopping: it wants no shard and takes none.
        self.closing = False
        #: Set when the dashboard asked this process to stop.
        self.stop_requested = threading.Event()
        self._lock = threading.Lock()
        self._held: dict[ShardKey, HeldLease] = {}
        # Shards a thread was asked to give up, and when (time.monotonic).
        self._releasing: dict[ShardKey, float] = {}
        self._thread_of: dict[ShardKey, int] = {}
        self._retry_at = 0.0
        self.assigner = Assigner(membership)
        self.renewer = Renewer(client, lease_ttl, self.held_leases, self._renewal_lost)
        #: The assignment generation last read, and this process's shards in it.
        self.generation = -1
        self.assigned: list[ShardKey] = []
        #: The last beat (``None`` before the first).
        self.last_beat: Beat | None = None

    # -- what the processing threads report ---------------------------------

    def lost(self, handler: ShardHandler) -> None:
        """A processing thread found ``handler``'s lease gone: forget it (maybe reacquire)."""
        with self._lock:
            held = self._held.get(handler.key)
            if held and held.lease.token == handler.token:
                del self._held[handler.key]
                self.lanes[held.thread].remove(handler.key, release=False)

    def released(self, handlers: list[ShardHandler]) -> None:
        """A processing thread gave these leases up: wake their new owners."""
        with self._lock:
            for handler in handlers:
                self._releasing.pop(handler.key, None)
                held = self._held.get(handler.key)
                if held and held.lease.token == handler.token:
                    del self._held[handler.key]
        try:
            self.membership.handoff(handler.key for handler in handlers)
        except (redis.RedisError, RedisClusterException) as exc:
            log.debug("could not wake the shards' new owners: %s", exc)

    def held_leases(self) -> list[HeldLease]:
        """The leases this process holds now (for the renewer)."""
        with self._lock:
            return list(self._held.values())

    def _renewal_lost(self, held: HeldLease) -> None:
        lease = held.lease
        key = (lease.queue.name, lease.shard)
        with self._lock:
            now_held = self._held.get(key)
            # A lease its thread gave up since the list was read (a hand-over, or the
            # process stopping) was released, not lost.
            if self.closing or key in self._releasing or now_held is not held:
                return
            del self._held[key]
            self.lanes[held.thread].remove(key, release=False)
        log.warning(
            "%s:%d: lease epoch %d expired before it was renewed",
            lease.queue.name,
            lease.shard,
            lease.epoch,
        )

    # -- the loop --------------------------------------------------------------

    def owned(self) -> list[ShardKey]:
        """The shards whose lease this process holds now."""
        with self._lock:
            return sorted(self._held)

    def info(self) -> dict[str, object]:
        """What this process tells the others and the dashboard about itself."""
        return {
            **self.report.static,
            "rss": rss_bytes(),
            "busy": sum(lane.busy for lane in self.lanes),
            "shards": [f"{queue}:{shard}" for queue, shard in self.owned()],
            "quiet": self.quiet,
        }

    def beat(self) -> Beat:
        """One round: heartbeat, recompute the assignment when this process is the
        assigner and membership changed, then bring the leases in step; returns the beat."""
        weight = 0 if self.quiet or self.closing else self.threads
        rider = self.renewer.rider()
        beat = self.membership.beat(
            weight, self.announced(), self.report.due(self.info()), rider.call if rider else None
        )
        if rider is not None:
            self.renewer.settle(rider, beat.carried)
        self.last_beat = beat
        if beat.command == "quiet" and not self.quiet:
            log.info("quiet: taking no more batches; handing this process's shards over")
            self.quiet = True
        elif beat.command == "stop":
            log.info("stop requested from the dashboard")
            self.stop_requested.set()
        self.watcher.follow(beat.config_version)
        generation = beat.generation
        if self.assigner.due(beat):
            published = self.assigner.run(beat.generation)
            if published is not None:
                generation = published.generation
        if generation != self.generation:
            self.assigned = self.membership.assigned()
            self.generation = generation
        self._expire_releasing()
        self._rebalance(self._wanted())
        return beat

    def announced(self) -> dict[str, range]:
        """The queues this process offers to serve, with their shards (none when a static
        splitter decides its shards)."""
        if self.plan.static is not None:
            return {}
        return {name: queue.shards for name, queue in self.queues.items()}

    def _expire_releasing(self) -> None:
        """Forget shards a thread was asked to give up a lease TTL ago and never reported
        released (their lease is no longer renewed: it lapses)."""
        now = time.monotonic()
        with self._lock:
            for key, asked_at in list(self._releasing.items()):
                if now - asked_at > self.lease_ttl:
                    del self._releasing[key]
                    held = self._held.pop(key, None)
                    log.warning("%s:%d: never reported released; its lease is left to lapse", *key)
                    if held is not None:
                        self.lanes[held.thread].remove(key, release=False)

    def _wanted(self) -> list[ShardKey]:
        if self.quiet or self.closing or self.stop_requested.is_set():
            return []
        if self.plan.static is not None:
            return list(self.plan.static)
        return [
            key
            for key in self.assigned
            if key[0] in self.queues and key[1] in self.queues[key[0]].shards
        ]

    def _rebalance(self, wanted: list[ShardKey]) -> None:
        wanted_set = set(wanted)
        # Threads to wake: those that gain a shard, and those asked to give one up (an idle
        # thread would otherwise notice only when its wait ends).
        woken: set[int] = set()
        with self._lock:
            for key, held in self._held.items():
                if key not in wanted_set and key not in self._releasing:
                    self._releasing[key] = time.monotonic()
                    self.lanes[held.thread].remove(key, release=True)
                    woken.add(held.thread)
            missing = [k for k in wanted if k not in self._held and k not in self._releasing]
            if self.plan.static is not None:
                thread_of = self.plan.static
            else:
                current = {
                    key: held.thread for key, held in self._held.items() if key in wanted_set
                }
                group = self._master_of if isinstance(self.client, redis.RedisCluster) else None
                thread_of = deal_to_threads(
                    wanted, {**self._thread_of, **current}, self.plan.lanes, group
                )
            self._thread_of = dict(thread_of)
        retry_in = None
        for key in missing:
            if self.closing:
                break
            queue = self.queues[key[0]]
            sent = time.monotonic()
            lease, restored, pttl = leases.acquire(
                queue, key[1], self.membership.process_id, self.lease_ttl
            )
            if lease is None:
                wait = max(pttl / 1000.0, 0.0) + EXPIRY_MARGIN
                retry_in = wait if retry_in is None else min(retry_in, wait)
                continue
            if restored:
                log.info(
                    "%s:%d: acquired (epoch %d), restored %d job(s) its previous owner left "
                    "in processing",
                    key[0],
                    key[1],
                    lease.epoch,
                    restored,
                )
            thread = thread_of[key]
            held = HeldLease(lease, thread, Term(self.lease_ttl, sent))
            handler = self.make_handler(thread, key[0], key[1], lease.token)
            handler.term = held.term
            handler.exhausted = list(lease.buried)  # reported on the handler's thread
            with self._lock:
                self._held[key] = held
            self.lanes[thread].add(handler)
            woken.add(thread)
        for thread in woken:
            # An idle thread blocked on its shards' wake lists takes the change now.
            try:
                self.lanes[thread].wake(self.client)
            except (redis.RedisError, RedisClusterException) as exc:
                log.debug("could not wake thread %d: %s", thread, exc)
        self._retry_at = 0.0 if retry_in is None else time.monotonic() + retry_in

    def _master_of(self, key: ShardKey) -> str | None:
        """The master serving a shard's slot on a Redis Cluster (``None`` while the slot
        has no master): the coordinator deals each thread shards of one master."""
        cluster: Any = self.client  # redis-py's cluster client is untyped in parts
        keys = self.queues[key[0]].keys
        try:
            name: str = cluster.get_node_from_key(keys.prefix(key[1])).name
        except RedisClusterException:
            return None
        return name

    def next_wait(self) -> float:
        """Seconds until the next round: the heartbeat, or when a wanted lease expires."""
        wait = self.heartbeat_interval
        if self._retry_at:
            wait = min(wait, self._retry_at - time.monotonic())
        return max(wait, 0.0)

    def close(self) -> None:
        """The process is stopping: from now on it wants no shard and acquires none; its
        beat says so at once (weight 0), so the assigner moves its shards now."""
        self.closing = True
        try:
            beat = self.membership.beat(0, self.announced(), None)
            if beat.assigner:
                self.assigner.run(beat.generation)
        except (redis.RedisError, RedisClusterException) as exc:
            log.debug("could not announce the stop: %s", exc)

    def release_remaining(self) -> int:
        """Give up any lease still held once the threads have stopped; returns how many."""
        with self._lock:
            held = [entry.lease for entry in self._held.values()]
            self._held.clear()
        return leases.release_many(held)

    def leave(self) -> None:
        """Deregister (after the threads released their leases) and nudge the others."""
        self.membership.leave()


def _ordered(shards: Mapping[str, Sequence[int]]) -> list[ShardKey]:
    return [(name, shard) for name, numbers in shards.items() for shard in numbers]
