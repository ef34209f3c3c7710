"""What the dashboard shows of the schedules and its "run now" button.

:func:`status` reads each schedule in force (``settings.schedules`` with what was
changed at run time, :mod:`lowkiq.periodic.overrides`) and its state from Redis
(its last and next tick, the job it enqueued last, whether it or its worker is
paused); :func:`run_now` enqueues a schedule's job at once, outside its ticks.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime

from lowkiq.clients.connection import Client
from lowkiq.errors import LowkiqError
from lowkiq.periodic import ticks
from lowkiq.periodic.overrides import SETTINGS, Defined, Override, in_force
from lowkiq.periodic.schedule import Schedule
from lowkiq.settings import Settings, settings
from lowkiq.storage import schedules as store
from lowkiq.storage.pausing import paused_queues
from lowkiq.storage.queries import Queries
from lowkiq.storage.schedules import Enqueue


class UnknownSchedule(LowkiqError, KeyError):
    """No schedule in force has that name (id)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def read_entries(client: Client) -> dict[str, Override]:
    """What was changed of the schedules at run time, by name."""
    _, stored = store.read_overrides(client)
    return {name: Override.from_json(e.rev, e.document) for name, e in (stored or {}).items()}


def in_force_now(config: Settings = settings) -> dict[str, Defined]:
    """The schedules of ``config`` with what was changed at run time, by name, the
    removed ones included (``Defined.removed``)."""
    return in_force(config.schedules, read_entries(config.client()), config.workers).schedules


@dataclass(frozen=True)
class ScheduleStatus:
    """One schedule as Redis holds it; times in unix seconds (``None``: never).

    ``last_tick``: the last tick passed (enqueued, or skipped by its catch-up);
    ``next_tick``: the next one; ``enqueued_tick`` and ``enqueued_at``: the tick of the
    last job it enqueued and when; ``runs``: ticks enqueued; ``run_now_at``: the last
    run asked outside the ticks; ``queued``: whether a job of its id waits in the
    queue; ``paused``: whether its worker is paused (ticks are enqueued all the same).
    ``source``: ``settings`` or ``added`` at run time; ``schedule_paused``: the schedule
    itself paused at run time (no tick passed); ``removed``: a settings schedule removed
    at run time; ``changed``: a settings schedule whose ticks were changed at run time;
    ``next_tick`` is ``None`` while paused or removed.
    """

    schedule: Schedule
    last_tick: float | None
    next_tick: float | None
    enqueued_tick: float | None
    enqueued_at: float | None
    runs: int
    run_now_at: float | None
    queued: bool
    paused: bool
    log: list[Enqueue] = field(default_factory=list)
    source: str = SETTINGS
    schedule_paused: bool = False
    removed: bool = False
    changed: bool = False

    @property
    def id(self) -> str:
        """The schedule's id, also its jobs' id."""
        return self.schedule.id

    @property
    def worker(self) -> str:
        """The name of its worker class."""
        return self.schedule.worker.__name__


def _seconds(ms: int | None) -> float | None:
    return None if ms is None else ms / 1000


def find(schedule_id: str, config: Settings = settings) -> Schedule:
    """The schedule in force with this id (name), or :class:`UnknownSchedule`."""
    found = in_force_now(config).get(schedule_id)
    if found is None or found.removed:
        raise UnknownSchedule(f"no schedule named {schedule_id!r}")
    return found.schedule


def status(config: Settings = settings) -> list[ScheduleStatus]:
    """Every schedule of ``config`` (the removed ones included), then those added at
    run time, with what was changed at run time."""
    client = config.client()
    defined = list(in_force_now(config).values())
    paused = paused_queues(client) if defined else frozenset()
    now_ms = int(time.time() * 1000)
    found = []
    for each in defined:
        schedule = each.schedule
        queue = schedule.worker.queue(client, config)
        queue.refresh_layout()
        state = store.read_state(queue, schedule.id)
        anchor = now_ms if state.last is None else max(state.last, now_ms)
        next_tick = ticks.next_tick(schedule, anchor) / 1000 if each.ticking else None
        found.append(
            ScheduleStatus(
                schedule=schedule,
                # A revision sets `last` to its moment, which is no tick of it.
                last_tick=None if state.last == state.revised_at else _seconds(state.last),
                next_tick=next_tick,
                enqueued_tick=_seconds(state.enqueued),
                enqueued_at=_seconds(state.enqueued_at),
                runs=state.runs,
                run_now_at=_seconds(state.run_now_at),
                queued=bool(Queries(queue, 1).fetch([schedule.id])),
                paused=schedule.worker.queue_name in paused,
                log=state.log,
                source=each.source,
                schedule_paused=each.paused,
                removed=each.removed,
                changed=each.changed,
            )
        )
    return found


def run_now(schedule_id: str, config: Settings = settings, by: str = "") -> float:
    """Enqueue the schedule's job now (score now, merged by id as any enqueue), its ticks
    untouched; returns the score.  ``by`` names the caller in the schedule's log."""
    schedule = find(schedule_id, config)
    now = time.time()
    payload = config.dump_payload(schedule.payload_at(datetime.fromtimestamp(now, schedule.zone)))
    data = payload.encode() if isinstance(payload, str) else payload
    queue = schedule.worker.queue(config.client(), config)
    store.run_now(queue, schedule.id, data, now, by)
    return now
