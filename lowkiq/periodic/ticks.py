"""When a periodic job's ticks are, and which of the due ones to enqueue.

Pure functions of the schedule and two instants, in integer milliseconds since
the Unix epoch (Redis's clock), tested without Redis.

- ``every=``: the multiples of the period since the epoch (UTC): every process
  computes the same ticks, and a 5-minute period ticks at :00, :05, ...
- ``cron=``: the expression's times in the schedule's timezone (croniter).
  Across a daylight-saving change a tick is never doubled nor dropped the way
  Debian's cron does it: a wall-clock time skipped when clocks go forward
  ticks at the first time after the gap, and when clocks go back an
  expression with a fixed hour (``30 2 * * *``) ticks at the first of the
  repeated times only, while one whose hour is ``*`` ticks at both (they are
  an hour apart).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from croniter import croniter

if TYPE_CHECKING:
    from lowkiq.periodic.schedule import Schedule

#: Seconds after its time a tick still counts as on time: an older one that no process
#: passed was *missed* (no process ran), and its schedule's ``catch_up`` decides.
ON_TIME_SECONDS = 60.0
#: At most this many missed ticks, the latest, are enqueued with ``catch_up="all"``.
CATCH_UP_LIMIT = 100

#: The hour field each ``@`` alias stands for (``*``: every hour).
_ALIAS_HOURS = {
    "@yearly": "0",
    "@annually": "0",
    "@monthly": "0",
    "@weekly": "0",
    "@daily": "0",
    "@midnight": "0",
    "@hourly": "*",
}


def hour_field(cron: str) -> str:
    """The hour field of a 5-field expression or of an ``@`` alias."""
    alias = _ALIAS_HOURS.get(cron.strip().lower())
    return alias if alias is not None else cron.split()[1]


def _to_ms(moment: datetime) -> int:
    return round(moment.timestamp() * 1000)


def _repeated(moment: datetime) -> bool:
    """Whether ``moment`` is the second occurrence of a wall-clock time (clocks went back)."""
    if not moment.fold:
        return False
    return moment.replace(fold=0).utcoffset() != moment.utcoffset()


class _Cron:
    """The ticks of a cron expression in a timezone."""

    def __init__(self, schedule: Schedule) -> None:
        self.cron = schedule.cron or ""
        self.tz = schedule.zone
        self.skip_repeated = hour_field(self.cron) != "*"

    def _moment(self, ms: int) -> datetime:
        return datetime.fromtimestamp(ms / 1000, self.tz)

    def after(self, ms: int) -> int:
        it = croniter(self.cron, self._moment(ms))
        while True:
            moment: datetime = it.get_next(datetime)
            if not (self.skip_repeated and _repeated(moment)):
                return _to_ms(moment)

    def latest(self, until: int, after: int, limit: int) -> list[int]:
        """The latest ``limit`` ticks in ``(after, until]``, newest first."""
        it = croniter(self.cron, self._moment(until + 1))
        found: list[int] = []
        while len(found) < limit:
            moment: datetime = it.get_prev(datetime)
            ms = _to_ms(moment)
            if ms <= after:
                break
            if not (self.skip_repeated and _repeated(moment)):
                found.append(ms)
        return found


class _Every:
    """The ticks of a fixed period: its multiples since the epoch."""

    def __init__(self, period: timedelta) -> None:
        self.period = round(period.total_seconds() * 1000)

    def after(self, ms: int) -> int:
        return (ms // self.period + 1) * self.period

    def latest(self, until: int, after: int, limit: int) -> list[int]:
        newest = until // self.period * self.period
        found: list[int] = []
        tick = newest
        while tick > after and len(found) < limit:
            found.append(tick)
            tick -= self.period
        return found


def _ticks(schedule: Schedule) -> _Cron | _Every:
    if schedule.every is not None:
        return _Every(schedule.every)
    return _Cron(schedule)


def next_tick(schedule: Schedule, after_ms: int) -> int:
    """The schedule's first tick strictly after ``after_ms``."""
    return _ticks(schedule).after(after_ms)


def latest_ticks(schedule: Schedule, after_ms: int, until_ms: int, limit: int) -> list[int]:
    """The latest ``limit`` (at most) of the schedule's ticks in ``(after_ms, until_ms]``,
    ascending."""
    return sorted(_ticks(schedule).latest(until_ms, after_ms, limit))


@dataclass(frozen=True)
class Step:
    """What to do with a schedule's due ticks: pass every tick up to ``last`` and
    enqueue the jobs of ``enqueue`` (ticks in ms, ascending)."""

    last: int
    enqueue: list[int]


def step(schedule: Schedule, last_ms: int | None, now_ms: int) -> Step | None:
    """The ticks to pass and enqueue at ``now_ms`` after the last passed tick
    ``last_ms``; ``None`` when no tick is due.

    A schedule seen for the first time (``last_ms`` ``None``) starts at now: it
    passes the ticks up to now and enqueues nothing.  A due tick at most
    :data:`ON_TIME_SECONDS` old is on time and always enqueued.  Older ones were
    missed, and ``catch_up`` says what to do with them: ``"last"`` one job (the
    latest missed tick) unless an on-time tick is enqueued anyway; ``"none"``
    nothing; ``"all"`` one job each, the latest :data:`CATCH_UP_LIMIT`.
    """
    if last_ms is None:
        start = latest_ticks(schedule, -(2**62), now_ms, 1)
        return Step(start[0] if start else now_ms, [])
    # The newest CATCH_UP_LIMIT due ticks hold every on-time one: a schedule ticks
    # at most once a second (see Schedule), so at most 61 are on time.
    due = latest_ticks(schedule, last_ms, now_ms, CATCH_UP_LIMIT)
    if not due:
        return None
    on_time = [tick for tick in due if tick >= now_ms - ON_TIME_SECONDS * 1000]
    if schedule.catch_up == "all":
        return Step(due[-1], due)
    if schedule.catch_up == "none" or on_time:
        return Step(due[-1], on_time)
    return Step(due[-1], [due[-1]])
