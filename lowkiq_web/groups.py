"""A worker's groups table (on its Enqueued page) and the actions on one group: pause,
resume, delete its queued jobs, give it a concurrency cap and a rate of its own, or clear
them back to the worker's (``Worker.actions()``, :mod:`lowkiq.storage.group_actions`).

POST only and CSRF-checked like every action (:mod:`lowkiq_web.security`), refused in
read-only mode (:mod:`lowkiq_web.actions`).  The group is the form's ``group`` field (a
group's name may hold any character).  A bad value is a 400 that changes nothing; a group
the worker does not know, a 404.  An htmx request gets the groups table back, with a
message; a plain form POST is redirected to the Enqueued page.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from flask import abort, redirect, render_template, request, url_for
from werkzeug.wrappers import Response

import lowkiq
from lowkiq.errors import ConfigurationError, UnknownGroup
from lowkiq.limits.rate_limit import RateLimit
from lowkiq_web.blueprint import lowkiq_web
from lowkiq_web.listing import BadParameter
from lowkiq_web.overview import find_worker

if TYPE_CHECKING:
    from lowkiq.storage.group_actions import GroupSettings

#: The most groups with a setting of their own, not among the groups listed, that the
#: table adds (each costs a read).
EXTRA_GROUPS = 20

#: The actions on one group.
ACTIONS = ("pause", "resume", "delete", "limits", "clear")


class GroupTable(list[dict[str, Any]]):
    """The rows of the groups table (as ``Worker.queries().groups()`` gives them): the
    groups with the most queued jobs, then those with a setting of their own; with each
    group's settings and the worker's defaults."""

    #: Whether every group of every shard was counted (see ``queries().groups()``).
    complete: bool = True
    #: How many groups of each shard's turns and waits were read at most.
    scanned: int = 0
    #: Group -> its settings made at run time.
    settings: dict[str, GroupSettings]
    #: The worker's ``group_concurrency`` (``None``: none).
    default_cap: int | None = None
    #: The worker's per-group rate limit in force, described (``None``: none).
    default_rate: str | None = None


def group_table(worker: type[lowkiq.Worker], limit: int) -> GroupTable:
    """The groups table of ``worker``: its ``limit`` groups with the most queued jobs, then
    up to :data:`EXTRA_GROUPS` more with a setting of their own."""
    rows = worker.queries().groups(limit)
    actions = worker.actions()
    table = GroupTable(dict(row) for row in rows)
    table.complete, table.scanned = rows.complete, rows.scanned
    table.settings = actions.group_settings()
    listed = {row["name"] for row in rows}
    for name in [name for name in table.settings if name not in listed][:EXTRA_GROUPS]:
        try:
            state = actions.group_state(name)
        except UnknownGroup:  # its setting went meanwhile
            continue
        table.append(
            {"name": name, "length": state.queued, "oldest_due": None, "in_flight": state.in_flight}
        )
    table.default_cap = worker.group_concurrency
    rate = worker.current_rate_limit()
    table.default_rate = rate.describe() if rate is not None and rate.per_group else None
    return table


def _field(name: str) -> str:
    return request.form.get(name, "").strip()


def _concurrency(text: str) -> int | None:
    if not text:
        return None
    if not text.isascii() or not text.isdigit() or int(text) < 1:
        raise BadParameter(f"concurrency must be an integer >= 1, got {text!r}")
    return int(text)


def _rate(text: str, burst_text: str) -> RateLimit | None:
    if burst_text and not text:
        raise BadParameter("burst goes with a rate")
    if not text:
        return None
    burst = None
    if burst_text:
        if not burst_text.isascii() or not burst_text.isdigit() or int(burst_text) < 1:
            raise BadParameter(f"burst must be an integer >= 1, got {burst_text!r}")
        burst = int(burst_text)
    try:
        return RateLimit.parse(text, burst)
    except ConfigurationError as exc:
        raise BadParameter(str(exc)) from None


def _act(worker: type[lowkiq.Worker], action: str, group: str) -> str:
    """Run ``action`` on ``group``; the message to show."""
    actions = worker.actions()
    if action == "pause":
        done = actions.pause_group(group)
        return f"Group {group} paused." if done else f"Group {group} was paused already."
    if action == "resume":
        done = actions.resume_group(group)
        return f"Group {group} resumed." if done else f"Group {group} was not paused."
    if action == "delete":
        count = actions.delete_group(group)
        return f"{count} queued job{'s' if count != 1 else ''} of group {group} deleted."
    if action == "clear":
        actions.clear_group_limits(group)
        return f"Group {group} is back to the worker's limits."
    concurrency = _concurrency(_field("concurrency"))
    rate = _rate(_field("rate"), _field("burst"))
    if concurrency is None and rate is None:
        raise BadParameter("give a concurrency, a rate, or both")
    actions.group_limits(group, concurrency, rate)
    return f"Group {group}: limits changed."


@lowkiq_web.post("/<worker>/groups/<action>")
def group_action(worker: str, action: str) -> Response | str:
    """Pause, resume, delete, set or clear the limits of the form's group; htmx swaps the
    groups table for the new one, with a message."""
    found = find_worker(worker)
    if action not in ACTIONS:
        abort(404, f"no group action {action!r}: one of {', '.join(ACTIONS)}")
    group = request.form.get("group", "")
    if not group:
        raise BadParameter("group is required (the group's name)")
    try:
        message = _act(found, action, group)
    except UnknownGroup as exc:
        abort(404, str(exc))
    if not request.headers.get("HX-Request"):
        return redirect(url_for("lowkiq_web.enqueued", worker=worker), 303)
    return render_template("lowkiq/_groups.html", **groups_context(found), message=message)


def groups_context(worker: type[lowkiq.Worker], shown: int = 20) -> dict[str, Any]:
    """What ``_groups.html`` needs for ``worker``."""
    return {"worker": worker.__name__, "groups": group_table(worker, shown), "groups_shown": shown}
