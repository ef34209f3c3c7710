"""The Schedules page: every periodic job of ``settings.schedules`` (its last and next
tick, the job it enqueued last, its worker paused or not) and its "run now" button
(POST, confirmed, CSRF-checked, refused read-only)."""

from __future__ import annotations

import time
from typing import Any

from flask import abort, redirect, render_template, request, url_for
from werkzeug.wrappers import Response

from lowkiq.periodic import status as periodic
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
    }


@lowkiq_web.get("/schedules")
def schedules() -> str:
    """Every schedule: when it ticks, its last and next tick, the job it enqueued last."""
    return render_template("lowkiq/schedules.html", **_context())


@lowkiq_web.get("/schedules/live")
def schedules_live() -> str:
    """The Schedules page's live part alone, for htmx polling."""
    return render_template("lowkiq/_schedules.html", **_context())


@lowkiq_web.post("/schedules/run")
def run_schedule_now() -> Response | str:
    """Enqueue the job of the schedule named by the form's ``id`` now, outside its ticks."""
    schedule_id = request.form.get("id", "")
    if not schedule_id or "\0" in schedule_id:
        raise BadParameter("id is required (a schedule id, without NUL)")
    try:
        periodic.run_now(schedule_id, by="dashboard")
    except periodic.UnknownSchedule:
        abort(404, f"no schedule with the id {schedule_id!r}")
    if not request.headers.get("HX-Request"):
        return redirect(url_for("lowkiq_web.schedules"), 303)
    return render_template("lowkiq/_schedules.html", **_context(f"{schedule_id}: job enqueued."))
