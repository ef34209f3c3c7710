"""What was changed of the schedules at run time, and the schedules in force.

``settings.schedules`` is the default set.  A change made at run time
(:mod:`lowkiq.periodic.control`) is stored in Redis as one entry per schedule name
(:class:`Override`, JSON), and wins over the settings: a settings schedule may be
paused, have its ticks changed (``cron``/``every``/``timezone``) or be removed; a
schedule may be added.  An entry with nothing in it (after a reset) leaves the
settings' schedule of that name as it is.  :func:`in_force` merges the two: a pure
function, tested without Redis.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from lowkiq.errors import ConfigurationError
from lowkiq.periodic.schedule import Schedule

if TYPE_CHECKING:
    from lowkiq.worker import Worker

log = logging.getLogger("lowkiq.periodic")

#: Where a schedule comes from: ``settings.schedules``, or added at run time.
SETTINGS, ADDED = "settings", "added"


@dataclass(frozen=True)
class Timing:
    """When a schedule ticks: ``cron`` (in ``timezone``) or ``every`` (ms)."""

    cron: str | None = None
    every_ms: int | None = None
    timezone: str | None = None

    @property
    def every(self) -> timedelta | None:
        """``every_ms`` as a ``timedelta``."""
        return None if self.every_ms is None else timedelta(milliseconds=self.every_ms)

    @classmethod
    def of(cls, schedule: Schedule) -> Timing:
        """The timing of ``schedule``."""
        every = schedule.every
        every_ms = None if every is None else round(every.total_seconds() * 1000)
        return cls(schedule.cron, every_ms, schedule.timezone)

    def to_json(self) -> dict[str, Any]:
        """The timing as a JSON object (its fields that are set)."""
        found = {"cron": self.cron, "every_ms": self.every_ms, "timezone": self.timezone}
        return {name: value for name, value in found.items() if value is not None}


@dataclass(frozen=True)
class Added:
    """A schedule added at run time: its worker (class name), payload (a JSON value) and
    catch-up policy; its timing is the :class:`Override`'s."""

    worker: str
    payload: Any = ""
    catch_up: str = "last"


@dataclass(frozen=True)
class Override:
    """The run-time entry of one schedule name, at revision ``rev``.

    ``removed``: the name is gone (a settings schedule of that name too);
    ``paused``: it passes no tick; ``timing``: its ticks, instead of the settings';
    ``added``: a schedule added at run time (with ``timing``).  Nothing set: the
    settings' schedule of that name as it is (what a reset leaves).
    """

    rev: int = 0
    removed: bool = False
    paused: bool = False
    timing: Timing | None = None
    added: Added | None = None

    def to_json(self) -> str:
        """The entry as stored (its revision apart)."""
        document: dict[str, Any] = {}
        if self.removed:
            document["removed"] = True
        if self.paused:
            document["paused"] = True
        if self.timing is not None:
            document["timing"] = self.timing.to_json()
        if self.added is not None:
            document["added"] = {
                "worker": self.added.worker,
                "payload": self.added.payload,
                "catch_up": self.added.catch_up,
            }
        return json.dumps(document, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, rev: int, text: str) -> Override:
        """An entry as stored; a malformed one reads as nothing changed."""
        try:
            document = json.loads(text)
            timing = document.get("timing")
            added = document.get("added")
            return cls(
                rev=rev,
                removed=bool(document.get("removed")),
                paused=bool(document.get("paused")),
                timing=None if timing is None else Timing(**timing),
                added=None if added is None else Added(**added),
            )
        except (ValueError, TypeError, AttributeError):
            log.warning("schedule entry at revision %d is malformed: %r", rev, text)
            return cls(rev=rev)


@dataclass(frozen=True)
class Defined:
    """A schedule in force (or removed at run time), as every process follows it.

    ``rev``: the revision of its entry (0: none); ``source``: :data:`SETTINGS` or
    :data:`ADDED`; ``changed``: a settings schedule whose ticks were changed at run
    time; ``removed``: a settings schedule removed at run time (it does not tick).
    """

    schedule: Schedule
    source: str = SETTINGS
    rev: int = 0
    paused: bool = False
    changed: bool = False
    removed: bool = False

    @property
    def ticking(self) -> bool:
        """Whether its ticks are enqueued: neither paused nor removed."""
        return not (self.paused or self.removed)


@dataclass
class Merged:
    """:func:`in_force`'s result: the schedules by name, in order (the settings' first,
    then the added ones by name), and the entries that could not be followed here, with
    why (an unknown worker, a timing this process refuses)."""

    schedules: dict[str, Defined] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)


def find_worker(workers: Sequence[type[Worker]], name: str) -> type[Worker] | None:
    """The worker of ``workers`` with this class or queue name."""
    for worker in workers:
        if name in (worker.__name__, worker.queue_name):
            return worker
    return None


def build(
    name: str,
    worker: type[Worker],
    timing: Timing,
    payload: Any,
    catch_up: str,
) -> Schedule:
    """A :class:`Schedule`; a bad timing is a :class:`ConfigurationError` naming it."""
    return Schedule(
        worker,
        id=name,
        cron=timing.cron,
        every=timing.every,
        timezone=timing.timezone,
        payload=payload,
        catch_up=catch_up,
    )


def in_force(
    defaults: Sequence[Schedule],
    entries: dict[str, Override],
    workers: Sequence[type[Worker]],
) -> Merged:
    """The schedules of ``defaults`` (``settings.schedules``) with the run-time
    ``entries`` applied, and the schedules added at run time whose worker is in
    ``workers``."""
    merged = Merged()
    for default in defaults:
        entry = entries.get(default.id, Override())
        if entry.added is not None:
            continue  # a run-time schedule of the same name replaces it, below
        schedule = default
        if entry.timing is not None and not entry.removed:
            try:
                schedule = build(
                    default.id, default.worker, entry.timing, default.payload, default.catch_up
                )
            except ConfigurationError as exc:
                merged.skipped[default.id] = str(exc)
                continue
        merged.schedules[default.id] = Defined(
            schedule,
            SETTINGS,
            entry.rev,
            paused=entry.paused,
            changed=entry.timing is not None,
            removed=entry.removed,
        )
    for name in sorted(entries):
        entry = entries[name]
        added = entry.added
        if added is None or entry.removed or entry.timing is None:
            continue
        worker = find_worker(workers, added.worker)
        if worker is None:
            merged.skipped[name] = f"its worker {added.worker} is not in settings.workers here"
            continue
        try:
            schedule = build(name, worker, entry.timing, added.payload, added.catch_up)
        except ConfigurationError as exc:
            merged.skipped[name] = str(exc)
            continue
        merged.schedules[name] = Defined(schedule, ADDED, entry.rev, paused=entry.paused)
    return merged
