"""``lowkiq.Schedule``: a job enqueued on a worker at every tick of a cron expression or
of a fixed period (``settings.schedules``).

A schedule is checked when it is made (cron expression, timezone, period,
catch-up policy) and again when a ``lowkiq worker`` starts (distinct ids,
its worker in ``settings.workers``, its payload serializable): a bad one is a
:class:`~lowkiq.errors.ConfigurationError` naming it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter

from lowkiq.errors import ConfigurationError

if TYPE_CHECKING:
    from lowkiq.worker import Worker

#: The catch-up policies (see :func:`lowkiq.periodic.ticks.step`).
CATCH_UP = ("last", "none", "all")
#: The shortest period of ``every=``.
MIN_EVERY = timedelta(seconds=1)


class Schedule:
    """A job ``{id, payload, score=the tick}`` enqueued on ``worker`` at every tick.

    ``cron``: a 5-field cron expression (or ``@daily``, ``@hourly``...) read in
    ``timezone`` (an IANA name, default UTC); or ``every``: a period of at least a
    second, ticking at its multiples since the Unix epoch (no timezone).
    ``payload``: the job's payload, or a function of the tick (a timezone-aware
    ``datetime``) returning it.  ``catch_up``: what happens to ticks missed while no
    process ran: ``"last"`` one job for them, ``"none"`` nothing, ``"all"`` one job
    each (the latest 100).
    """

    def __init__(
        self,
        worker: type[Worker],
        *,
        id: str,  # noqa: A002 - the public name, as in perform_async's job dicts
        cron: str | None = None,
        every: timedelta | None = None,
        timezone: str | None = None,
        payload: Any = "",
        catch_up: str = "last",
    ) -> None:
        base: type | None = getattr(sys.modules.get("lowkiq.worker"), "Worker", None)
        if base is None or not (isinstance(worker, type) and issubclass(worker, base)):
            raise ConfigurationError(f"Schedule: {worker!r} is not a lowkiq.Worker subclass")
        if not isinstance(id, str) or not id or "\0" in id:
            raise ConfigurationError(
                f"Schedule: id must be a non-empty string without NUL, got {id!r}"
            )
        where = f"Schedule {id!r}"
        if (cron is None) == (every is None):
            raise ConfigurationError(f"{where}: give exactly one of cron= and every=")
        if catch_up not in CATCH_UP:
            raise ConfigurationError(
                f"{where}: catch_up must be one of {', '.join(map(repr, CATCH_UP))}, "
                f"got {catch_up!r}"
            )
        self.worker = worker
        self.id = id
        self.cron = cron
        self.every = every
        self.timezone = timezone
        self.payload = payload
        self.catch_up = catch_up
        self.zone = _zone(where, timezone, every is not None)
        if every is not None:
            _check_every(where, every)
        else:
            _check_cron(where, cron, self.zone)

    def payload_at(self, tick: datetime) -> Any:
        """The payload of the job of ``tick``."""
        payload = self.payload
        return payload(tick) if callable(payload) else payload

    def tick_time(self, tick_ms: int) -> datetime:
        """A tick as a timezone-aware ``datetime`` in the schedule's timezone."""
        return datetime.fromtimestamp(tick_ms / 1000, self.zone)

    def describe(self) -> str:
        """``cron 0 7 * * * (Europe/Berlin)`` or ``every 0:05:00``."""
        if self.every is not None:
            return f"every {self.every}"
        return f"cron {self.cron} ({self.timezone or 'UTC'})"

    def __repr__(self) -> str:
        return f"Schedule({self.worker.__name__}, id={self.id!r}, {self.describe()})"


def _zone(where: str, name: str | None, periodic: bool) -> ZoneInfo | timezone:
    if name is None:
        return timezone.utc
    if periodic:
        raise ConfigurationError(
            f"{where}: timezone applies to cron= only (every= ticks at multiples of the "
            f"period since the Unix epoch)"
        )
    if not isinstance(name, str):
        raise ConfigurationError(f"{where}: timezone must be an IANA name, got {name!r}")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ConfigurationError(f"{where}: unknown timezone {name!r} ({exc})") from None


def _check_every(where: str, every: Any) -> None:
    if not isinstance(every, timedelta):
        raise ConfigurationError(f"{where}: every must be a datetime.timedelta, got {every!r}")
    if every < MIN_EVERY or every % timedelta(milliseconds=1):
        raise ConfigurationError(
            f"{where}: every must be at least 1 second, in whole milliseconds, got {every!r}"
        )


def _check_cron(where: str, cron: Any, zone: ZoneInfo | timezone) -> None:
    if not isinstance(cron, str):
        raise ConfigurationError(f"{where}: cron must be a string, got {cron!r}")
    fields = cron.split()
    if not (len(fields) == 5 or (len(fields) == 1 and fields[0].startswith("@"))):
        raise ConfigurationError(
            f"{where}: cron must have 5 fields (minute hour day month weekday) or be an "
            f"@alias such as @daily, got {cron!r}"
        )
    try:
        croniter(cron, datetime.now(zone)).get_next(datetime)
    except Exception as exc:  # croniter's errors: bad fields, a date that never comes
        raise ConfigurationError(f"{where}: bad cron expression {cron!r}: {exc}") from None


def schedule_list(name: str, value: Any) -> list[Schedule]:
    """The check of ``settings.schedules``: a list of :class:`Schedule` with distinct ids."""
    if not isinstance(value, (list, tuple)):
        raise ConfigurationError(f"setting {name} must be a list of lowkiq.Schedule, got {value!r}")
    seen: set[str] = set()
    for item in value:
        if not isinstance(item, Schedule):
            raise ConfigurationError(f"setting {name}: {item!r} is not a lowkiq.Schedule")
        if item.id in seen:
            raise ConfigurationError(f"setting {name}: two schedules have the id {item.id!r}")
        seen.add(item.id)
    return list(value)


def check_schedules(
    schedules: Sequence[Schedule],
    workers: Sequence[type[Worker]],
    dump: Callable[[Any], bytes | str],
    now: datetime | None = None,
) -> None:
    """The start-up check: distinct ids, each worker in ``workers``, and each payload
    (for a function of the tick: its payload now) serializable by ``dump``."""
    schedule_list("schedules", list(schedules))
    for schedule in schedules:
        if schedule.worker not in workers:
            raise ConfigurationError(
                f"Schedule {schedule.id!r}: its worker {schedule.worker.__name__} is not in "
                f"settings.workers"
            )
        tick = (now or datetime.now(timezone.utc)).astimezone(schedule.zone)
        try:
            dump(schedule.payload_at(tick))
        except Exception as exc:
            raise ConfigurationError(
                f"Schedule {schedule.id!r}: its payload cannot be serialized: {exc}"
            ) from exc
