"""One processing thread's shards: their handlers, lag metrics and the idle wait.

The idle wait blocks on the shards' wake lists (pushed by every script that
makes a job due), so an enqueue wakes the thread within milliseconds, while
the timeout (the next scheduled ``perform_in``, at most ``poll_interval``)
picks up jobs scheduled for later on time.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

import redis

from lowkiq.shard_handler import DeferredAck, ShardHandler
from lowkiq.storage.queue import Queue

# Below this many seconds a blocking wait is not worth it (and BLPOP 0 would block forever).
MIN_BLOCK = 0.001


class Lane:
    """The shards one thread serves, on the thread's own Redis connection."""

    def __init__(
        self,
        client: redis.Redis,
        handlers: Sequence[ShardHandler],
        deferred: DeferredAck,
        poll_interval: float,
        stop: threading.Event,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.client = client
        self.handlers = list(handlers)
        self.deferred = deferred
        self.poll_interval = poll_interval
        self.stop = stop
        self.clock = clock
        self.wake_keys = [h.queue.keys.wake_list(h.shard) for h in self.handlers]
        # Consecutive handlers of one queue, so earliest() asks each queue once.
        self._shards_by_queue: list[tuple[Queue, list[int]]] = []
        for handler in self.handlers:
            if self._shards_by_queue and self._shards_by_queue[-1][0].name == handler.queue.name:
                self._shards_by_queue[-1][1].append(handler.shard)
            else:
                self._shards_by_queue.append((handler.queue, [handler.shard]))
        # A blocking read must end before the socket times out.
        socket_timeout = getattr(client, "socket_timeout", None)
        self.max_block = (
            min(poll_interval, socket_timeout * 0.8) if socket_timeout else poll_interval
        )

    def earliest(self) -> list[float | None]:
        """The earliest ``perform_in`` queued in each shard (``None``: empty), a call per queue."""
        heads: list[float | None] = []
        for queue, shards in self._shards_by_queue:
            heads += queue.earliest_perform_in(shards)
        return heads

    def wait(self) -> None:
        """Ack any finished batch, then block until a wake-up, the next due job or poll_interval."""
        self.deferred.settle()
        timeout = self.max_block
        scheduled = [at for at in self.earliest() if at is not None]
        if scheduled:
            timeout = min(timeout, min(scheduled) - self.clock())
        if timeout < MIN_BLOCK or self.stop.is_set():
            return
        self.client.blpop(self.wake_keys, timeout=timeout)

    def stopping(self) -> bool:
        """Whether the server asked the threads to stop taking batches."""
        return self.stop.is_set()

    def wake(self, client: redis.Redis) -> None:
        """Interrupt this lane's blocking wait from another connection."""
        client.rpush(self.wake_keys[0], "1")

    def settle(self) -> None:
        """Ack the lane's finished batch, if one is waiting for its ack."""
        self.deferred.settle()

    def describe(self) -> str:
        """The shards of this lane, e.g. ``OrderWorker:0 OrderWorker:3``."""
        return " ".join(handler.name for handler in self.handlers)
