"""What an operator changes at run time, followed by every process: paused queues,
the queues' layouts (a reshard) and whatever else registers (the rate limits).

Each such change bumps the config version in the membership state and wakes
every process once (``lua/membership_nudge.lua``); a beat returns the version,
and only when it moved (or every :data:`CONFIG_REFRESH` seconds, a safety net)
does a process read them again.  Between changes they cost nothing.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

import redis
from redis.exceptions import RedisClusterException

from lowkiq.clients.connection import Client
from lowkiq.storage import layout as layouts
from lowkiq.storage.layout import Layout
from lowkiq.storage.pausing import paused_queues
from lowkiq.storage.queue import Queue

log = logging.getLogger("lowkiq.ownership")

#: Seconds between two full readings even when the config version did not move.
CONFIG_REFRESH = 30.0


class Pausable(Protocol):
    """What the watcher asks of the process's dispatcher."""

    def pause(self, queues: frozenset[str]) -> None:
        """Take no new batch of these queues' shards (all the paused ones), keeping them."""

    def wake(self, client: Client) -> None:
        """Interrupt the dispatcher's idle wait."""


class ConfigWatcher:
    """Follows the run-time configuration for one process."""

    def __init__(
        self,
        client: Client,
        queues: Mapping[str, Queue],
        dispatcher: Pausable,
        static: bool,
        others: Sequence[Callable[[Client], None]] = (),
    ) -> None:
        self.client = client
        self.queues = queues
        self.dispatcher = dispatcher
        #: Whether a static splitter decides the shards (layouts are then not followed).
        self.static = static
        #: Further readers of run-time settings, called with the client on every change.
        self.others = list(others)
        #: The paused queues among this process's, as last told to the dispatcher.
        self.paused: frozenset[str] = frozenset()
        self._layouts: dict[str, Layout] = {}
        self._version = -1
        self._read_at = 0.0

    def follow(self, version: int) -> None:
        """Read everything again when ``version`` moved (or the last reading is old)."""
        now = time.monotonic()
        if version == self._version and now - self._read_at < CONFIG_REFRESH:
            return
        self._follow_pauses()
        self._follow_layouts()
        for other in self.others:
            other(self.client)
        self._version, self._read_at = version, now

    def _follow_pauses(self) -> None:
        """Tell the dispatcher which of this process's queues are paused, when that changed."""
        paused = paused_queues(self.client) & self.queues.keys()
        if paused == self.paused:
            return
        for name in sorted(paused - self.paused):
            log.info("%s is paused: its shards take no new batch", name)
        for name in sorted(self.paused - paused):
            log.info("%s is resumed", name)
        self.paused = frozenset(paused)
        self.dispatcher.pause(self.paused)
        # A dispatcher blocked on its other shards' wake lists takes the change now.
        self.dispatcher.wake(self.client)

    def _follow_layouts(self) -> None:
        """Read where each queue's shards are, in one round trip (a reshard adds and
        later drops a range)."""
        if self.static:
            return
        queues = list(self.queues.values())
        try:
            found = layouts.read_many(
                self.client, [(queue.name, queue.default_shards_count) for queue in queues]
            )
        except (redis.RedisError, RedisClusterException) as exc:
            if not self._layouts:
                raise
            # A layout's master may be failing over: the shards go on as they are.
            log.debug("could not read the queues' layouts: %s", exc)
            return
        for queue, after in zip(queues, found, strict=True):
            before = self._layouts.get(queue.name)
            self._layouts[queue.name] = queue.refresh_layout(after)
            if before is None and after.count != queue.default_shards_count:
                log.warning(
                    "%s: the class says %d shards, the queue has %d (its layout in Redis, "
                    "which decides); `lowkiq reshard` changes it",
                    queue.name,
                    queue.default_shards_count,
                    after.count,
                )
            elif before is not None and after != before:
                log.info(
                    "%s: its shards are now %d..%d",
                    queue.name,
                    after.shards.start,
                    after.shards.stop - 1,
                )
