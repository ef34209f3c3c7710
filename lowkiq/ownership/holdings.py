"""The leases one process holds and the shards its dispatcher was asked to give up.

Three threads share it: the coordinator (acquires leases, asks the dispatcher to
give shards up), the dispatcher (reports a lease released or found lost) and the
renewer (reads the leases, reports those Redis says are gone).  One lock guards
it; no Redis call is made under it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from typing import Any, Generic, Protocol, TypeVar

from lowkiq.clients.connection import Client
from lowkiq.ownership.assignment import ShardKey
from lowkiq.ownership.events import Change, Grant, Lost, Revoke
from lowkiq.ownership.leases import HeldLease, Lease, Term

log = logging.getLogger("lowkiq.ownership")


class ServedShard(Protocol):
    """What ownership asks of a shard the runtime serves under a lease (the runtime's
    shard handler is one): which shard, under which token, and until when."""

    @property
    def key(self) -> ShardKey:
        """The shard: its queue's name and number."""

    @property
    def token(self) -> str:
        """The token of the lease it is served under."""

    #: When the lease runs out by this process's clock (given when the lease is granted).
    term: Term | None
    #: Jobs the acquisition moved to the morgue, reported (``retries_exhausted``) as the
    #: shard is granted to the dispatcher.
    exhausted: list[dict[str, Any]]


#: The runtime's kind of served shard, which ownership makes and hands back unchanged.
Shard = TypeVar("Shard", bound=ServedShard)


class DispatcherLike(Protocol):
    """What ownership asks of the process's dispatcher
    (:class:`~lowkiq.runtime.dispatcher.Dispatcher`): it serves every shard the process
    leases."""

    def tell(self, change: Change) -> None:
        """Take in a shard granted, revoked or lost (:mod:`lowkiq.ownership.events`)."""

    def pause(self, queues: frozenset[str]) -> None:
        """Take no new batch of these queues' shards (all the paused ones), keeping them."""

    def wake(self, client: Client) -> None:
        """Interrupt the dispatcher's idle wait."""

    @property
    def busy(self) -> int:
        """How many of its shards are in ``perform`` now."""

    def running_batches(self) -> list[dict[str, object]]:
        """The batches in ``perform`` now: ``shard``, ``thread``, ``started_at``,
        ``stopping``."""


class Holdings(Generic[Shard]):
    """One process's leases, whose shards its dispatcher serves."""

    def __init__(self, dispatcher: DispatcherLike, lease_ttl: float) -> None:
        self.dispatcher = dispatcher
        self.lease_ttl = lease_ttl
        #: Set when the process is stopping: its dispatcher gives every lease up, so a
        #: lease a renewal finds gone was released, not lost.
        self.stopping = False
        self._lock = threading.Lock()
        self._held: dict[ShardKey, HeldLease] = {}
        # Shards the dispatcher was asked to give up, and when (time.monotonic).
        self._releasing: dict[ShardKey, float] = {}

    def leases(self) -> list[HeldLease]:
        """The leases held now (for the renewer)."""
        with self._lock:
            return list(self._held.values())

    def owned(self) -> list[ShardKey]:
        """The shards whose lease this process holds now."""
        with self._lock:
            return sorted(self._held)

    def add(self, key: ShardKey, held: HeldLease, handler: Shard) -> None:
        """A lease was acquired: the dispatcher serves ``handler`` from its next step on."""
        with self._lock:
            self._held[key] = held
        self.dispatcher.tell(Grant(handler))

    def lost(self, handler: ServedShard) -> None:
        """The dispatcher found ``handler``'s lease gone: forget it (maybe reacquire)."""
        with self._lock:
            held = self._held.get(handler.key)
            if held and held.lease.token == handler.token:
                del self._held[handler.key]
                self.dispatcher.tell(Lost(handler.key))

    def released(self, handlers: Iterable[ServedShard]) -> None:
        """The dispatcher gave these leases up."""
        with self._lock:
            for handler in handlers:
                self._releasing.pop(handler.key, None)
                held = self._held.get(handler.key)
                if held and held.lease.token == handler.token:
                    del self._held[handler.key]

    def renewal_lost(self, held: HeldLease) -> bool:
        """A renewal found ``held`` gone: forget it and take it from the dispatcher;
        ``False`` when it was given up meanwhile (released, not lost) and nothing changed."""
        key = (held.lease.queue.name, held.lease.shard)
        with self._lock:
            # A lease the dispatcher gave up since the list was read (a hand-over, or the
            # process stopping) was released, not lost.
            if self.stopping or key in self._releasing or self._held.get(key) is not held:
                return False
            del self._held[key]
            self.dispatcher.tell(Lost(key))
        return True

    def give_up(self, wanted: set[ShardKey]) -> bool:
        """Ask the dispatcher to give up the held shards not in ``wanted`` (once each);
        returns whether it was asked to.  A shard whose batch is still running is given up
        once that batch ends: its lease is renewed until then (its perform sees
        ``should_stop()``), so the next owner never runs the batch beside it."""
        asked = False
        now = time.monotonic()
        with self._lock:
            for key in self._held:
                if key not in wanted and key not in self._releasing:
                    self._releasing[key] = now
                    self.dispatcher.tell(Revoke(key))
                    asked = True
        return asked

    def to_acquire(self, wanted: list[ShardKey]) -> list[ShardKey]:
        """The wanted shards neither held nor being given up, in ``wanted``'s order."""
        with self._lock:
            return [k for k in wanted if k not in self._held and k not in self._releasing]

    def forget_all(self) -> list[Lease]:
        """Forget every lease still held (the dispatcher has stopped): to release them."""
        with self._lock:
            held = [entry.lease for entry in self._held.values()]
            self._held.clear()
        return held
