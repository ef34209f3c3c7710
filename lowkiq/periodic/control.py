"""Change the schedules at run time, on every process: pause, resume, change the ticks,
add, remove, reset to ``settings.schedules``; and :func:`schedules`, every schedule.

A change is stored in Redis (:mod:`lowkiq.periodic.overrides`) and wins over
``settings.schedules``; every worker process's schedule thread reads the changes
at least once a second.  The change's revision is also recorded in the state of
the schedule's id, where the tick script reads it, so a process that has not read
the change yet passes no tick (a paused schedule fires nothing once :func:`pause`
returned), and a tick is still passed once across processes.  A new or changed
schedule starts at its first tick after the change.  Bad input is a
:class:`ScheduleError` (or :class:`UnknownSchedule`) and changes nothing.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from lowkiq.errors import ConfigurationError, LowkiqError
from lowkiq.periodic import status as periodic_status
from lowkiq.periodic.overrides import (
    Added,
    Defined,
    Merged,
    Override,
    Timing,
    build,
    find_worker,
    in_force,
)
from lowkiq.periodic.schedule import CATCH_UP
from lowkiq.periodic.status import UnknownSchedule, read_entries
from lowkiq.settings import Settings, settings
from lowkiq.storage import schedules as store
from lowkiq.storage.config_version import nudge_all

if TYPE_CHECKING:
    from lowkiq.worker import Worker

#: How many times a change is tried again when another change of the same schedule
#: came in between its read and its write.
ATTEMPTS = 5
#: The longest schedule name accepted at run time.
MAX_NAME = 200

__all__ = [
    "ScheduleError",
    "ScheduleInfo",
    "UnknownSchedule",
    "add",
    "change",
    "parse_every",
    "pause",
    "remove",
    "reset",
    "resume",
    "schedules",
]


class ScheduleError(LowkiqError, ValueError):
    """A run-time change of the schedules was refused (a bad cron expression or period,
    an unknown worker, a name in use...); nothing was changed."""


@dataclass(frozen=True)
class ScheduleInfo:
    """One schedule as every process follows it now.

    ``cron`` (with ``timezone``) or ``every``; ``paused``: paused at run time (no tick
    is passed); ``removed``: a settings schedule removed at run time (listed so that
    it can be reset); ``source``: ``"settings"`` or ``"added"`` (at run time);
    ``changed``: a settings schedule whose ticks were changed at run time;
    ``next_run``: its next tick (Unix seconds; ``None`` while paused or removed);
    ``last_run``: when its last job was enqueued, by a tick or a run now (Unix
    seconds, Redis's clock; ``None``: never).
    """

    name: str
    worker: str
    cron: str | None
    every: timedelta | None
    timezone: str | None
    catch_up: str
    paused: bool
    removed: bool
    source: str
    changed: bool
    next_run: float | None
    last_run: float | None


def schedules(config: Settings = settings) -> list[ScheduleInfo]:
    """Every schedule: those of ``settings.schedules`` (with what was changed at run time,
    the removed ones included) and those added at run time."""
    found = []
    for row in periodic_status.status(config):
        schedule = row.schedule
        runs = [at for at in (row.enqueued_at, row.run_now_at) if at is not None]
        found.append(
            ScheduleInfo(
                name=schedule.id,
                worker=schedule.worker.__name__,
                cron=schedule.cron,
                every=schedule.every,
                timezone=schedule.timezone,
                catch_up=schedule.catch_up,
                paused=row.schedule_paused,
                removed=row.removed,
                source=row.source,
                changed=row.changed,
                next_run=row.next_tick,
                last_run=max(runs) if runs else None,
            )
        )
    return found


def _check_name(name: Any) -> str:
    if not isinstance(name, str) or not name.strip() or "\0" in name or len(name) > MAX_NAME:
        raise ScheduleError(
            f"a schedule name is a non-empty string without NUL, at most {MAX_NAME} "
            f"characters, got {name!r}"
        )
    return name


def _timing(cron: str | None, every: timedelta | float | None, timezone: str | None) -> Timing:
    if (cron is None) == (every is None):
        raise ScheduleError("give exactly one of cron and every")
    if every is None:
        return Timing(cron=cron, timezone=timezone or None)
    if not isinstance(every, timedelta):
        every = timedelta(seconds=every)
    if every <= timedelta(0):
        raise ScheduleError(f"every must be a positive period (at least 1 second), got {every}")
    return Timing(every_ms=round(every.total_seconds() * 1000), timezone=timezone or None)


def _checked(name: str, worker: type[Worker], timing: Timing, payload: Any, catch_up: str) -> None:
    """Refuse a timing that :class:`~lowkiq.Schedule` refuses (a cron that never fires,
    a period under a second, an unknown timezone...)."""
    try:
        build(name, worker, timing, payload, catch_up)
    except ConfigurationError as exc:
        raise ScheduleError(str(exc)) from None


def _in_force(merged: Merged, name: str) -> Defined:
    """The schedule ``name`` in force (removed ones are not), or :class:`UnknownSchedule`."""
    found = merged.schedules.get(name)
    if found is None or found.removed:
        raise UnknownSchedule(f"no schedule named {name!r}")
    return found


def _write(
    name: str,
    make: Callable[[Merged, Override | None], Override | None],
    config: Settings,
) -> bool:
    """Store the entry ``make`` returns for ``name`` (``None``: nothing to change) and
    record its revision in the shard of the schedule's id, before and after; ``True``
    when something changed."""
    client = config.client()
    for _ in range(ATTEMPTS):
        entries = read_entries(client)
        before = in_force(config.schedules, entries, config.workers)
        current = entries.get(name)
        new = make(before, current)
        if new is None:
            return False
        rev = store.write_override(
            client, name, 0 if current is None else current.rev, new.to_json()
        )
        if rev is None:
            continue  # changed meanwhile: read again
        after = in_force(config.schedules, {**entries, name: replace(new, rev=rev)}, config.workers)
        workers = []
        for merged in (before, after):
            defined = merged.schedules.get(name)
            if defined is not None and defined.schedule.worker not in workers:
                workers.append(defined.schedule.worker)
        for worker in workers:
            store.revise(worker.queue(client, config), name, rev)
        nudge_all(client)  # every process reads the change now
        return True
    raise LowkiqError(f"schedule {name!r} was changed by others during {ATTEMPTS} attempts")


def pause(name: str, config: Settings = settings) -> bool:
    """Pause schedule ``name`` on every process: no tick is passed (and none caught up
    on :func:`resume`).  ``False`` when it was paused already."""

    def make(merged: Merged, current: Override | None) -> Override | None:
        if _in_force(merged, name).paused:
            return None
        return replace(current or Override(), paused=True)

    return _write(name, make, config)


def resume(name: str, config: Settings = settings) -> bool:
    """Resume schedule ``name``: it ticks again from its first tick after now.  ``False``
    when it was not paused."""

    def make(merged: Merged, current: Override | None) -> Override | None:
        if not _in_force(merged, name).paused:
            return None
        return replace(current or Override(), paused=False)

    return _write(name, make, config)


def change(
    name: str,
    *,
    cron: str | None = None,
    every: timedelta | float | None = None,
    timezone: str | None = None,
    config: Settings = settings,
) -> None:
    """Change when schedule ``name`` ticks: a ``cron`` expression (in ``timezone``) or a
    period ``every`` (a ``timedelta`` or seconds).  It takes effect at the first tick
    of the new timing after now, on every process, once."""
    timing = _timing(cron, every, timezone)

    def make(merged: Merged, current: Override | None) -> Override:
        schedule = _in_force(merged, name).schedule
        _checked(name, schedule.worker, timing, schedule.payload, schedule.catch_up)
        return replace(current or Override(), timing=timing)

    _write(name, make, config)


def add(
    name: str,
    worker: type[Worker] | str,
    *,
    cron: str | None = None,
    every: timedelta | float | None = None,
    timezone: str | None = None,
    payload: Any = "",
    catch_up: str = "last",
    config: Settings = settings,
) -> None:
    """Add schedule ``name``: a job of ``worker`` (a class of ``settings.workers`` or its
    name) with ``payload`` (a JSON value) at every tick, from the first one after now.
    A name in use (in ``settings.schedules`` or added) is refused."""
    _check_name(name)
    timing = _timing(cron, every, timezone)
    found = find_worker(config.workers, worker if isinstance(worker, str) else worker.__name__)
    if found is None or (not isinstance(worker, str) and found is not worker):
        known = ", ".join(w.__name__ for w in config.workers) or "none"
        raise ScheduleError(f"unknown worker {worker!r} (settings.workers: {known})")
    if catch_up not in CATCH_UP:
        raise ScheduleError(f"catch_up must be one of {', '.join(CATCH_UP)}, got {catch_up!r}")
    try:
        json.dumps(payload)
        config.dump_payload(payload)
    except Exception as exc:  # noqa: BLE001 - any serializer's error
        raise ScheduleError(
            f"the payload of a schedule added at run time must be JSON: {exc}"
        ) from None
    _checked(name, found, timing, payload, catch_up)

    def make(merged: Merged, current: Override | None) -> Override:
        taken = merged.schedules.get(name)
        if taken is not None and not taken.removed:
            raise ScheduleError(f"a schedule named {name!r} exists already ({taken.source})")
        added = Added(found.__name__, payload, catch_up)
        return Override(timing=timing, added=added)

    _write(name, make, config)


def remove(name: str, config: Settings = settings) -> None:
    """Remove schedule ``name`` on every process; a settings schedule stays removed
    (the settings are not read for it) until :func:`reset`."""

    def make(merged: Merged, current: Override | None) -> Override:
        _in_force(merged, name)
        return Override(removed=True)

    _write(name, make, config)


def reset(name: str | None = None, config: Settings = settings) -> list[str]:
    """Drop what was changed at run time of schedule ``name`` (every schedule when
    ``None``): a settings schedule ticks as the settings say again (a removed one is
    back), an added one is gone.  Returns the names reset."""
    if name is None:
        names = [
            n for n, entry in read_entries(config.client()).items() if entry != Override(entry.rev)
        ]
    else:
        entries = read_entries(config.client())
        in_settings = any(schedule.id == name for schedule in config.schedules)
        if name not in entries and not in_settings:
            raise UnknownSchedule(f"no schedule named {name!r}")
        names = [name]
    done = []
    for each in names:

        def make(merged: Merged, current: Override | None) -> Override | None:
            return None if current is None or current == Override(current.rev) else Override()

        if _write(each, make, config):
            done.append(each)
    return done


def parse_every(text: str) -> timedelta:
    """A period as typed: seconds (``90``, ``1.5``) or a number with a unit (``500ms``,
    ``30s``, ``5m``/``5min``, ``2h``, ``1d``)."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|min|h|d)?\s*", text or "")
    if match is None:
        raise ScheduleError(
            f"a period is a number of seconds or a number with a unit (ms, s, min, h, d), "
            f"got {text!r}"
        )
    number, unit = float(match.group(1)), match.group(2) or "s"
    seconds = {"ms": 0.001, "s": 1, "m": 60, "min": 60, "h": 3600, "d": 86400}[unit]
    return timedelta(seconds=number * seconds)
