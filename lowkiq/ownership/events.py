"""What ownership and the runtime tell each other about the shards a process serves.

Ownership (the coordinator's and the renewer's threads) grants the dispatcher a shard
whose lease it acquired (:class:`Grant`), asks it to give one up (:class:`Revoke`: its
lease is released once its batch in flight is settled), or tells it a lease is gone
(:class:`Lost`: it stops serving the shard and releases nothing).  The dispatcher
reports the leases it released (:class:`Released`) through a :class:`Mailbox` that
ownership reads on its own thread.  They are values: neither side calls into the
other, and neither makes a Redis call on the other's thread.
"""

from __future__ import annotations

import threading
from typing import Any, Generic, NamedTuple, TypeVar

from lowkiq.ownership.assignment import ShardKey

T = TypeVar("T")


class Grant(NamedTuple):
    """Serve this shard handler's shard: its lease was just acquired."""

    handler: Any


class Revoke(NamedTuple):
    """Give this shard up: stop popping it, and release its lease once its batch in
    flight (if any) is settled."""

    key: ShardKey


class Lost(NamedTuple):
    """This shard's lease is gone (taken over, or expired): stop serving it at once and
    release nothing; its batch in flight, if any, is left to the next owner."""

    key: ShardKey


#: What ownership tells the dispatcher.
Change = Grant | Revoke | Lost


class Released(NamedTuple):
    """The dispatcher gave up these shard handlers' leases (in one step)."""

    handlers: tuple[Any, ...]


class Mailbox(Generic[T]):
    """Values one thread posts and another takes, in the order posted."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: list[T] = []

    def post(self, item: T) -> None:
        """Leave ``item`` for the reader."""
        with self._lock:
            self._items.append(item)

    def take(self) -> list[T]:
        """Every item posted since the last take, oldest first."""
        with self._lock:
            items, self._items = self._items, []
        return items
