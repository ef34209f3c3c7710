"""Operating one group of a queue at run time (``Worker.actions()``): pause and resume
it, delete its queued jobs, give it a concurrency cap and a rate limit of its own, and
read what it has (BullMQ Pro's group pause, ``setGroupConcurrency``,
``setGroupRateLimit``).

The settings live in Redis (:mod:`lowkiq.storage.group_limits`) and every worker
process obeys them within a second: the change nudges them all.  A bad value, or a
group the queue does not know (no queued job, none running, nothing set for it),
raises and changes nothing.  Groups are named as jobs name them (``str(group)``, not
empty); the default group, jobs without one, has no name and is not operated here.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from lowkiq.errors import ConfigurationError, InvalidQuery, UnknownGroup
from lowkiq.limits.rate_limit import RateLimit
from lowkiq.storage import group_limits
from lowkiq.storage.group_limits import CAP, PAUSED, RATE, GroupLimits
from lowkiq.storage.processing import processing_group
from lowkiq.storage.queue import Queue
from lowkiq.storage.unreachable import public_calls_raise_unavailable

#: Jobs one script call of :meth:`GroupActions.delete_group` deletes at most.
DELETE_CHUNK = 1000


__all__ = ["GroupActions", "GroupSettings", "GroupState", "UnknownGroup"]


@dataclass(frozen=True)
class GroupSettings:
    """One group's run-time settings (``None``: the worker's own)."""

    #: Whether its jobs are kept from starting (running batches finish).
    paused: bool
    #: Its cap on batches running at once over the fleet, instead of
    #: ``Worker.group_concurrency``.
    concurrency: int | None
    #: Its rate limit (jobs of the group started per period over the fleet), instead
    #: of the worker's per-group ``rate_limit``.
    rate: RateLimit | None


@dataclass(frozen=True)
class GroupState(GroupSettings):
    """One group as :meth:`GroupActions.group_state` reads it."""

    #: The group's name.
    group: str
    #: How many of its jobs are queued (due or not).
    queued: int
    #: How many of its jobs are in processing areas (being performed).
    in_flight: int


def group_name(group: Any) -> str:
    """``group`` as jobs store it (a non-empty ``str``); :class:`InvalidQuery` otherwise."""
    if group is None or isinstance(group, (bool, bytes, bytearray)):
        raise InvalidQuery(f"a group is a non-empty string (or an int), got {group!r}")
    text = str(group)
    if not text:
        raise InvalidQuery("a group is a non-empty string: the default group has no name")
    if "\0" in text:
        raise InvalidQuery(f"a group must not contain NUL characters, got {text!r}")
    return text


def check_concurrency(value: Any) -> int:
    """A group's cap: an integer >= 1; :class:`InvalidQuery` otherwise."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidQuery(f"a group's concurrency must be an integer >= 1, got {value!r}")
    return value


def check_rate(value: Any) -> RateLimit:
    """A group's rate limit: a :class:`lowkiq.RateLimit`; :class:`InvalidQuery` otherwise."""
    if not isinstance(value, RateLimit):
        raise InvalidQuery(f"a group's rate must be a lowkiq.RateLimit, got {value!r}")
    return replace(value, per_group=False)  # a group's own rate is its group's anyway


def decode(limits: GroupLimits) -> GroupSettings:
    """Stored settings as values (a rate lowkiq cannot read counts as none)."""
    rate = None
    if limits.rate is not None:
        try:
            rate = RateLimit.decode(limits.rate)
        except (ValueError, ConfigurationError):
            rate = None
    return GroupSettings(limits.paused, limits.concurrency, rate)


@public_calls_raise_unavailable("actions")
class GroupActions:
    """The per-group operations of :class:`lowkiq.storage.actions.Actions` (a mixin: it
    needs ``queue``)."""

    queue: Queue

    def pause_group(self, group: Any) -> bool:
        """Start no new batch of ``group``'s jobs on any process (within a second); its
        running batches finish, and its jobs stay queued.  ``False`` when it was paused."""
        name = self._known(group)
        return bool(group_limits.write(self.queue.client, self.queue.keys, name, {PAUSED: "1"}))

    def resume_group(self, group: Any) -> bool:
        """Let ``group``'s jobs start again; ``False`` when it was not paused."""
        name = self._known(group)
        return bool(group_limits.write(self.queue.client, self.queue.keys, name, {}, [PAUSED]))

    def delete_group(self, group: Any) -> int:
        """Delete ``group``'s queued jobs (due or not) with their payloads, a chunk at a
        time; a running batch of it is not touched.  Returns how many were deleted."""
        name = self._known(group)
        total = 0
        for shard in self.queue.shards:
            more = 1
            while more:
                deleted, more = self.queue.run("group_delete", shard, name, DELETE_CHUNK)
                total += int(deleted)
        return total

    def group_limits(
        self, group: Any, concurrency: int | None = None, rate: RateLimit | None = None
    ) -> GroupState:
        """Give ``group`` a cap on its batches running at once over the fleet
        (``concurrency``), and a rate limit of its own (``rate``), instead of the worker's
        ``group_concurrency`` and per-group ``rate_limit``; ``None`` leaves a setting as
        it is (:meth:`clear_group_limits` goes back to the worker's).  Returns the
        group's state."""
        name = group_name(group)
        put: dict[str, str] = {}
        if concurrency is not None:
            put[CAP] = str(check_concurrency(concurrency))
        if rate is not None:
            put[RATE] = check_rate(rate).encode()
        self._known(name)
        if put:
            group_limits.write(self.queue.client, self.queue.keys, name, put)
        return self.group_state(name)

    def clear_group_limits(self, group: Any, concurrency: bool = True, rate: bool = True) -> bool:
        """Put ``group`` back under the worker's ``group_concurrency`` (``concurrency``)
        and per-group ``rate_limit`` (``rate``); ``False`` when it had none of its own."""
        name = self._known(group)
        drop = [setting for setting, chosen in ((CAP, concurrency), (RATE, rate)) if chosen]
        return bool(group_limits.write(self.queue.client, self.queue.keys, name, {}, drop))

    def group_settings(self) -> dict[str, GroupSettings]:
        """Every group with a run-time setting: group -> its settings."""
        stored = group_limits.read_limits(self.queue.client, self.queue.keys)
        return {name: decode(limits) for name, limits in sorted(stored.items())}

    def group_state(self, group: Any) -> GroupState:
        """``group``'s settings and how many of its jobs are queued and running;
        :class:`UnknownGroup` when the queue does not know it."""
        name = group_name(group)
        state = self._state(name)
        if not (state.queued or state.in_flight) and state == _bare(name):
            raise UnknownGroup(f"{self.queue.name} has no group {name!r}: none of its jobs "
                               "is queued or running, and nothing is set for it")  # fmt: skip
        return state

    def _known(self, group: Any) -> str:
        """``group``'s name, checked; :class:`UnknownGroup` when the queue does not know it."""
        return self.group_state(group).group

    def _state(self, name: str) -> GroupState:
        """The group's settings and counts: one pipelined round trip for the shards, one
        read of the settings."""
        keys, client = self.queue.keys, self.queue.client
        shards = list(self.queue.shards)
        pipe = client.pipeline(transaction=False)
        for shard in shards:
            pipe.zcard(keys.group_ids_zset(shard, name))
            pipe.get(keys.group_base(shard))
            pipe.exists(keys.group_turns_zset(shard), keys.group_waits_zset(shard))
            pipe.zcard(keys.perform_in_zset(shard))
            pipe.hvals(keys.processing_hash(shard))
        replies = pipe.execute()
        queued = in_flight = 0
        for n in range(len(shards)):
            indexed_count, base, indexed, length, area = replies[5 * n : 5 * n + 5]
            if indexed:
                queued += int(indexed_count)
            elif base is not None and _text(base) == name:
                queued += int(length)
            in_flight += sum(1 for value in area if processing_group(value)[0] == name)
        stored = group_limits.read_limits(client, keys).get(name, GroupLimits())
        settings = decode(stored)
        return GroupState(
            settings.paused, settings.concurrency, settings.rate, name, queued, in_flight
        )


def _bare(name: str) -> GroupState:
    """A group with nothing set and no job: what an unknown group reads as."""
    return GroupState(False, None, None, name, 0, 0)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
