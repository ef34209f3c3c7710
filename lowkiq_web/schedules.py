"""The Schedules page: every periodic job (``settings.schedules`` with what was changed at
run time, and those added at run time: its last and next tick, the job it enqueued
last, its worker paused or not) and its actions, each a POST (CSRF-checked, refused
read-only; the destructive ones confirmed): run now, pause, resume, change the ticks,
add, remove, reset to the settings.  A bad value is a 400 with its message, an unknown
schedule a 404; nothing is changed then."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from flask import abort, redirect, render_template, request, url_for
from werkzeug.wrappers import Response

import lowkiq
from lowkiq.periodic import control
from lowkiq.periodic import status as periodic
from lowkiq.periodic.schedule import CATCH_UP
from lowkiq_web.blueprint import lowkiq_web
from lowkiq_web.listing import BadParameter
from lowkiq_web.views import INTERVALS, live_controls


def _context(message: str = "") -> dict[str, Any]:
    interval, paused = live_controls(request.values)
    return {
        "schedules": periodic.status(),
        "now": time.time(),
        "interval": interval,
        "paused": paused,
        "intervals": sorted(INTERVALS),
        "message": message,
        "workers": [worker.__name__ for worker in lowkiq.settings.workers],
        "catch_ups": CATCH_UP,
    }


@lowkiq_web.get("/schedules")
def schedules() -> str:
    """Every schedule: when it ticks, its last and next tick, the job it enqueued last."""
    return render_template("lowkiq/schedules.html", **_context())


@lowkiq_web.get("/schedules/live")
def schedules_live() -> str:
    """The Schedules page's live part alone, for htmx polling."""
    return render_template("lowkiq/_schedules.html", **_context())


def _name() -> str:
    """The form's ``id``: the schedule acted on."""
    name = request.form.get("id", "")
    if not name or "\0" in name:
        raise BadParameter("id is required (a schedule name, without NUL)")
    return name


def _text(field: str) -> str | None:
    """A form field, stripped; ``None`` when empty or absent."""
    value = request.form.get(field, "").strip()
    return value or None


def _timing() -> dict[str, Any]:
    """``cron`` (with ``timezone``) or ``every`` from the form, as control's keywords."""
    cron, every = _text("cron"), _text("every")
    if (cron is None) == (every is None):
        raise BadParameter("give either a cron expression or a period (every), not both")
    return {
        "cron": cron,
        "every": None if every is None else control.parse_every(every),
        "timezone": _text("timezone"),
    }


def _acted(name: str, action: Callable[[], object], done: str) -> Response | str:
    """Run ``action`` for schedule ``name``: a bad value is a 400, an unknown schedule a
    404 (nothing changed either way); then the page (htmx: its live part) with ``done``."""
    try:
        action()
    except control.UnknownSchedule:
        abort(404, f"no schedule named {name!r}")
    except control.ScheduleError as exc:
        raise BadParameter(str(exc)) from None
    if not request.headers.get("HX-Request"):
        return redirect(url_for("lowkiq_web.schedules"), 303)
    return render_template("lowkiq/_schedules.html", **_context(f"{name}: {done}."))


@lowkiq_web.post("/schedules/run")
def run_schedule_now() -> Response | str:
    """Enqueue the job of the schedule named by the form's ``id`` now, outside its ticks."""
    name = _name()
    return _acted(name, lambda: periodic.run_now(name, by="dashboard"), "job enqueued")


@lowkiq_web.post("/schedules/pause")
def pause_schedule() -> Response | str:
    """Pause the schedule on every process: it passes no tick until resumed."""
    name = _name()
    return _acted(name, lambda: control.pause(name), "paused on every worker process")


@lowkiq_web.post("/schedules/resume")
def resume_schedule() -> Response | str:
    """Resume the schedule: it ticks again from its first tick after now."""
    name = _name()
    return _acted(name, lambda: control.resume(name), "resumed from its next tick")


@lowkiq_web.post("/schedules/change")
def change_schedule() -> Response | str:
    """Change when the schedule ticks (``cron`` with ``timezone``, or ``every``)."""
    name = _name()
    try:
        timing = _timing()
    except control.ScheduleError as exc:
        raise BadParameter(str(exc)) from None
    return _acted(name, lambda: control.change(name, **timing), "ticks changed")


@lowkiq_web.post("/schedules/add")
def add_schedule() -> Response | str:
    """Add a schedule: ``id``, ``worker``, ``cron``/``every`` (``timezone``), ``payload``
    (JSON, default ``""``) and ``catch_up``."""
    name = _name()
    worker = _text("worker")
    if worker is None:
        raise BadParameter("worker is required (a worker of settings.workers)")
    payload_text = _text("payload")
    try:
        payload = "" if payload_text is None else json.loads(payload_text)
    except ValueError as exc:
        raise BadParameter(f"payload is not JSON: {exc}") from None
    try:
        timing = _timing()
    except control.ScheduleError as exc:
        raise BadParameter(str(exc)) from None
    catch_up = _text("catch_up") or "last"

    def add() -> None:
        control.add(name, worker, payload=payload, catch_up=catch_up, **timing)

    return _acted(name, add, f"added on {worker}")


@lowkiq_web.post("/schedules/remove")
def remove_schedule() -> Response | str:
    """Remove the schedule on every process (a settings one until reset)."""
    name = _name()
    return _acted(name, lambda: control.remove(name), "removed on every worker process")


@lowkiq_web.post("/schedules/reset")
def reset_schedule() -> Response | str:
    """Drop what was changed at run time of the schedule: back to the settings."""
    name = _name()
    return _acted(name, lambda: control.reset(name), "reset to settings.schedules")
