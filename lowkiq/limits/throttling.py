"""A worker process applying the rate limits: which limit holds for each queue, and
when each shard may be popped again.

:class:`RateLimits` holds the limit in force per queue in this process: the worker
class's ``rate_limit``, unless one was set at run time (:mod:`lowkiq.limits.rate_limit`),
read again on every heartbeat.  A shard's :class:`ShardThrottle` gives its pops
their rate-limit arguments and keeps the time a pop said to come back: until
then the dispatcher does not pop the shard, and when every idle
shard waits it sleeps without a Redis call (:meth:`lowkiq.runtime.dispatcher.Dispatcher.wait`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import redis

from lowkiq.limits.rate_limit import RateLimit, rate_limit_overrides
from lowkiq.storage.queue import Popped, Queue
from lowkiq.storage.rate_bucket import Throttle, take, throttle_for

log = logging.getLogger("lowkiq.throttling")

#: Seconds before a shard whose tokens could not be reserved (Redis failed) asks again.
TAKE_RETRY = 0.1


class RateLimits:
    """The rate limit in force for each queue of this process (``None``: none)."""

    def __init__(self, class_limits: Mapping[str, RateLimit | None]) -> None:
        self.class_limits = dict(class_limits)
        self._current = dict(self.class_limits)
        #: +1 whenever a limit changes: shards waiting under the old one look again.
        self.version = 0
        #: Called with the client after each reading: the other limits set at run time
        #: (each worker's groups, :meth:`lowkiq.limits.group_caps.GroupCaps.follow`).
        self.followers: list[Callable[[Any], None]] = []

    def get(self, queue_name: str) -> RateLimit | None:
        """The limit of ``queue_name`` now."""
        return self._current.get(queue_name)

    def follow(self, client: Any) -> None:
        """Read the limits set at run time (then the followers' settings), and log what
        changed."""
        overrides = rate_limit_overrides(client)
        current = {name: overrides.get(name, limit) for name, limit in self.class_limits.items()}
        changed = False
        for name, limit in current.items():
            if limit != self._current.get(name):
                log.info("%s: rate limit %s", name, "none" if limit is None else limit.describe())
                changed = True
        self._current = current
        if changed:
            self.version += 1
        for follower in self.followers:
            follower(client)


class ShardThrottle:
    """The rate limit as one shard's handler applies it."""

    def __init__(self, limits: RateLimits, queue: Queue, batch_size: int) -> None:
        self.limits = limits
        self.queue = queue
        self.batch_size = batch_size
        #: Until when (time.monotonic) the shard is not popped.
        self.until = 0.0
        # Tokens reserved by rate_take for the next pop (Redis Cluster).
        self._grant = 0
        # The limit the last arguments were made for, and those arguments.
        self._made: tuple[RateLimit, Throttle] | None = None
        self._version = limits.version

    def waiting(self) -> bool:
        """Whether the shard must not be popped now.  After a change of the limits it may
        be popped again: a lifted limit lets it go at once, a new one answers its pop
        with the wait its budget holds."""
        if not self.until:
            return False
        if self._version != self.limits.version:
            self._version = self.limits.version
            self.until = 0.0
            return False
        return time.monotonic() < self.until

    def args(self, batches: int = 1) -> Throttle | None:
        """The next pop's rate-limit arguments (``None``: no limit), for a pop of up to
        ``batches`` batches (at most the tokens a reservation holds); they carry the tokens
        reserved for it, once."""
        limit = self.limits.get(self.queue.name)
        if limit is None or limit.per_group:  # a group's tokens are its batches' claims
            self._grant = 0
            return None
        made = self._made
        if made is None or made[0] is not limit:
            capacity = limit.capacity(self.batch_size)
            throttle = throttle_for(
                limit.per_second,
                capacity,
                self.batch_size,
                self.queue.cluster,
                self.queue.default_shards_count,
            )
            made = self._made = (limit, throttle)
        throttle = made[1]
        batches = max(1, min(batches, throttle.want // self.batch_size))
        if batches != throttle.batches:
            throttle = replace(throttle, batches=batches)
            self._made = (limit, throttle)
        if self._grant:
            grant, self._grant = self._grant, 0
            return replace(throttle, grant=grant)
        return throttle

    def after(self, popped: Popped, throttle: Throttle | None) -> None:
        """Keep when to pop again, from the pop's reply; on a Redis Cluster reserve the
        next pop's tokens when its budget ran out (one call to the bucket's slot)."""
        if throttle is None:
            return
        wait = popped.wait
        if popped.needs_tokens:
            try:
                self._grant, wait = take(self.queue, throttle)
            except redis.RedisError as exc:
                # The next pop finds no tokens and asks again.
                log.debug("%s: could not reserve rate-limit tokens: %s", self.queue.name, exc)
                wait = TAKE_RETRY
        self.until = time.monotonic() + wait if wait > 0 else 0.0
