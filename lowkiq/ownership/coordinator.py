"""One process's ownership loop: heartbeat, assignment, lease acquisition.

The coordinator runs on a thread of its own.  Every ``heartbeat_interval``
seconds, and at once when nudged, it beats (:mod:`~lowkiq.ownership.membership`,
O(1) in Redis); when it holds the assigner role and the membership changed, it
recomputes and publishes the assignment (:mod:`~lowkiq.ownership.assigner`);
when the published assignment changed, it reads its own shards, asks the
process's dispatcher to give back the shards that moved away, and acquires the
ones that came to it once their previous owner released them (which wakes it)
or their lease expired.  On a single server a beat carries the lease renewals
in its round trip when they are due (:mod:`~lowkiq.ownership.renewer`), whose
own timer renews them when no beat did, so a slow or failing beat never lets
them lapse.  It
also re-reads which queues are paused and where their shards are when the
beat's config version moves (:mod:`lowkiq.storage.pausing`, :mod:`lowkiq.ownership.resharding`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic

import redis
from redis.exceptions import RedisClusterException

from lowkiq.clients.connection import Client
from lowkiq.ownership import leases
from lowkiq.ownership.assigner import Assigner, Published
from lowkiq.ownership.assignment import ShardKey
from lowkiq.ownership.events import Mailbox, Released
from lowkiq.ownership.holdings import DispatcherLike, Holdings, Shard
from lowkiq.ownership.leases import HeldLease, Term
from lowkiq.ownership.membership import Beat, Membership
from lowkiq.ownership.renewer import Renewer
from lowkiq.ownership.report import InfoReport, rss_bytes
from lowkiq.ownership.watchers import ConfigWatcher
from lowkiq.storage.queue import Queue

log = logging.getLogger("lowkiq.ownership")

#: Seconds to wait past a held lease's expiry before trying to take it again.
EXPIRY_MARGIN = 0.01


@dataclass
class Plan:
    """Which shards this process wants.

    A ``static`` plan (the shards a static splitter gave this process, in its order)
    never changes; an automatic one (``static`` is ``None``) follows the assignment of
    every beat.
    """

    static: tuple[ShardKey, ...] | None = None


class Coordinator(Generic[Shard]):
    """Keeps this process's leases in step with the membership and assignment."""

    def __init__(
        self,
        client: Client,
        membership: Membership,
        queues: Sequence[Queue],
        plan: Plan,
        dispatcher: DispatcherLike,
        make_handler: Callable[[str, int, str, Callable[[Any], None]], Shard],
        lease_ttl: float,
        heartbeat_interval: float,
        threads: int,
        *,
        renewal_client: Client | None = None,
        config_readers: Sequence[Callable[[Client], None]] = (),
        reports: Mailbox[Released] | None = None,
    ) -> None:
        """``dispatcher`` serves every shard this process leases, each through the handler
        ``make_handler(queue, shard, token, on_lost)`` makes when its lease is acquired
        (``on_lost(handler)``: the handler found its lease gone).
        ``config_readers``: called with the client when the config version moves (the
        paused queues and layouts are followed besides).
        ``reports``: where the dispatcher reports the leases it released (read at each
        round, and before the last leases are released).
        ``threads``: this process's weight in the assignment (its processing threads).

        ``renewal_client``: the client the renewer's own rounds use (``None``: ``client``).
        Give it a connection of its own, so that neither the coordinator's blocking wait
        for a nudge nor a slow round on ``client``'s pool ever holds a renewal up."""
        self.client = client
        self.membership = membership
        self.queues = {queue.name: queue for queue in queues}
        self.plan = plan
        self.dispatcher = dispatcher
        self.reports: Mailbox[Released] = reports or Mailbox()
        self.make_handler = make_handler
        self.lease_ttl = lease_ttl
        self.heartbeat_interval = heartbeat_interval
        self.threads = threads
        self.report = InfoReport(threads, self.queues, plan.static is not None)
        #: Follows paused queues, layouts and the readers added to ``watcher.others``.
        self.watcher = ConfigWatcher(
            client, self.queues, dispatcher, plan.static is not None, others=config_readers
        )
        self.quiet = False
        #: Set when the dashboard asked this process to stop.
        self.stop_requested = threading.Event()
        #: The leases held and the shards being given up.
        self.holdings: Holdings[Shard] = Holdings(dispatcher, lease_ttl)
        self._retry_at = 0.0
        self.assigner = Assigner(membership)
        self.renewer = Renewer(
            renewal_client or client, lease_ttl, self.holdings.leases, self._renewal_lost
        )
        # The heartbeat and the assigner run it may start, one at a time: the main thread's
        # close() does not race the coordinator thread's round (an older beat or
        # assignment landing after the stopping process's own).
        self._beating = threading.Lock()
        #: The assignment generation last read, and this process's shards in it.
        self.generation = -1
        self.assigned: list[ShardKey] = []
        #: The last beat (``None`` before the first).
        self.last_beat: Beat | None = None

    @property
    def closing(self) -> bool:
        """Whether the process is stopping: it wants no shard and takes none."""
        return self.holdings.stopping

    # -- what the dispatcher and the renewer report -----------------------------

    def take_reports(self) -> None:
        """Forget the leases the dispatcher reported released since the last look."""
        for report in self.reports.take():
            self.holdings.released(report.handlers)

    def _renewal_lost(self, held: HeldLease) -> None:
        if self.holdings.renewal_lost(held):
            lease = held.lease
            log.warning(
                "%s:%d: lease epoch %d expired before it was renewed",
                lease.queue.name,
                lease.shard,
                lease.epoch,
            )

    # -- the loop --------------------------------------------------------------

    def info(self) -> dict[str, object]:
        """What this process tells the others and the dashboard about itself."""
        return {
            **self.report.static,
            "rss": rss_bytes(),
            "busy": self.dispatcher.busy,
            "running": self.dispatcher.running_batches(),
            "shards": [f"{queue}:{shard}" for queue, shard in self.holdings.owned()],
            "quiet": self.quiet,
        }

    def beat(self) -> Beat:
        """One round: heartbeat, recompute the assignment when this process is the
        assigner and membership changed, then bring the leases in step; returns the beat."""
        self.take_reports()
        with self._beating:
            beat, published = self._beat_and_assign()
        self.last_beat = beat
        if beat.command == "quiet" and not self.quiet:
            log.info("quiet: taking no more batches; handing this process's shards over")
            self.quiet = True
        elif beat.command == "stop":
            log.info("stop requested from the dashboard")
            self.stop_requested.set()
        self.watcher.follow(beat.config_version)
        generation = beat.generation if published is None else published.generation
        if generation != self.generation:
            self.assigned = self.membership.assigned()
            self.generation = generation
        self._rebalance(self._wanted())
        return beat

    def _beat_and_assign(self) -> tuple[Beat, Published | None]:
        """Beat (weight 0 once closing), then recompute the assignment when the beat asks
        this process to; the caller holds ``_beating``."""
        weight = 0 if self.quiet or self.closing else self.threads
        rider = self.renewer.rider()
        beat = self.membership.beat(
            weight, self.announced(), self.report.due(self.info()), rider.call if rider else None
        )
        if rider is not None:
            self.renewer.confirm(rider, beat.carried)
        published = self.assigner.run() if self.assigner.due(beat) else None
        return beat, published

    def announced(self) -> dict[str, range]:
        """The queues this process offers to serve, with their shards (none when a static
        splitter decides its shards)."""
        if self.plan.static is not None:
            return {}
        return {name: queue.shards for name, queue in self.queues.items()}

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
        # The dispatcher is woken when it gains a shard or is asked to give one up (idle,
        # it would otherwise notice only when its wait ends).
        woken = self.holdings.give_up(set(wanted))
        retry_in = None
        for key in self.holdings.to_acquire(wanted):
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
            held = HeldLease(lease, Term(self.lease_ttl, sent))
            handler = self.make_handler(key[0], key[1], lease.token, self.holdings.lost)
            handler.term = held.term
            handler.exhausted = list(lease.buried)  # reported as it is granted
            self.holdings.add(key, held, handler)
            woken = True
        if woken:
            # A dispatcher blocked on its shards' wake lists takes the change now.
            try:
                self.dispatcher.wake(self.client)
            except (redis.RedisError, RedisClusterException) as exc:
                log.debug("could not wake the dispatcher: %s", exc)
        self._retry_at = 0.0 if retry_in is None else time.monotonic() + retry_in

    def next_wait(self) -> float:
        """Seconds until the next round: the heartbeat, or when a wanted lease expires."""
        wait = self.heartbeat_interval
        if self._retry_at:
            wait = min(wait, self._retry_at - time.monotonic())
        return max(wait, 0.0)

    def close(self) -> None:
        """The process is stopping: from now on it wants no shard and acquires none; its
        beat says so at once (weight 0), so the assigner moves its shards now (this
        process, when it holds the role: after the coordinator thread's round under way,
        if any, from a snapshot that has the weight 0)."""
        self.holdings.stopping = True
        try:
            with self._beating:
                self._beat_and_assign()
        except (redis.RedisError, RedisClusterException) as exc:
            log.debug("could not announce the stop: %s", exc)

    def release_remaining(self) -> int:
        """Give up any lease still held once the dispatcher has stopped; returns how many."""
        self.take_reports()
        return leases.release_many(self.holdings.forget_all())

    def leave(self) -> None:
        """Deregister (after the dispatcher released its leases) and nudge the others."""
        self.membership.leave()
