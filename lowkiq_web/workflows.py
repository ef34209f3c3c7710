"""The Workflows pages (SPEC §12): every workflow, newest first, a page at a time, and one
workflow's page (its counts, members by state, callbacks and the calls of jobs held
``after=`` it), with its actions, each a POST (CSRF-checked, refused read-only,
confirmed first): cancel it, release its held calls, delete them.

A bad ``page`` or ``limit`` is a 400 with its message; an unknown workflow a 404;
nothing is changed then.  An htmx action gets the workflow's part of the page back,
with a message; a plain form POST is redirected to the workflow's page.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flask import abort, redirect, render_template, request, url_for
from werkzeug.wrappers import Response

import lowkiq
from lowkiq.errors import WorkflowError
from lowkiq.workflows import summary
from lowkiq_web.blueprint import lowkiq_web
from lowkiq_web.listing import BadParameter

#: Workflows per page of the list: the default and the most a ``limit`` may ask.
PER_PAGE = 50
MAX_PER_PAGE = 500
#: Members shown per state on a workflow's page: the default and the most.
MEMBERS_SHOWN = 100
MAX_MEMBERS_SHOWN = 1000
#: Job ids of one held call shown.
HELD_IDS_SHOWN = 10

#: The actions on one workflow (the last part of their URL).
ACTIONS = ("cancel", "release-held", "delete-held")


def _whole(args: Mapping[str, str], name: str, default: int, most: int | None = None) -> int:
    """An integer parameter >= 1 (at most ``most``), or :class:`BadParameter`."""
    text = args.get(name) or str(default)
    if not text.isascii() or not text.isdigit() or int(text) < 1:
        raise BadParameter(f"{name} must be an integer >= 1, got {text!r}")
    value = int(text)
    if most is not None and value > most:
        raise BadParameter(f"{name} must be at most {most}, got {value}")
    return value


def _workflow_id(text: str | None) -> str:
    """A workflow id of a request, checked: not empty, without NUL."""
    if not text or "\0" in text:
        raise BadParameter("id is required (a workflow id, without NUL)")
    return text


def worker_of_queue() -> dict[str, str]:
    """Queue name -> the name of its worker class, of ``lowkiq.settings.workers`` (a
    member's job page is its worker's)."""
    return {worker.queue_name: worker.__name__ for worker in lowkiq.settings.workers}


@lowkiq_web.get("/workflows")
def workflows() -> str:
    """Every workflow, newest first: its status, counts, age and held calls."""
    page = _whole(request.args, "page", 1)
    limit = _whole(request.args, "limit", PER_PAGE, MAX_PER_PAGE)
    client = lowkiq.settings.client()
    total = summary.count(client)
    rows = summary.page(client, (page - 1) * limit, limit)
    return render_template(
        "lowkiq/workflows.html",
        workflows=rows,
        page=page,
        limit=limit,
        total=total,
        pages=max(1, -(-total // limit)),
    )


def _workflow_context(workflow_id: str, shown: int, message: str = "") -> dict[str, Any]:
    """What ``_workflow.html`` needs; a 404 for an unknown workflow."""
    client = lowkiq.settings.client()
    found = summary.summary(client, workflow_id)
    if found is None:
        abort(404, f"no workflow {workflow_id!r} (never opened, or expired)")
    members, every_member = summary.members_by_state(client, workflow_id)
    return {
        "wf": found,
        "members": members,
        "every_member": every_member,
        "members_read": summary.MEMBERS_READ,
        "shown": shown,
        "held_calls": summary.held_calls(client, workflow_id),
        "held_ids_shown": HELD_IDS_SHOWN,
        "workers": worker_of_queue(),
        "message": message,
    }


@lowkiq_web.get("/workflow")
def workflow() -> str:
    """One workflow by id: counts, members by state, callbacks, held calls, actions."""
    workflow_id = _workflow_id(request.args.get("id"))
    shown = _whole(request.args, "limit", MEMBERS_SHOWN, MAX_MEMBERS_SHOWN)
    return render_template("lowkiq/workflow.html", **_workflow_context(workflow_id, shown))


def _act(ref: lowkiq.WorkflowRef, action: str) -> str:
    """Run ``action`` on the workflow; the message to show."""
    if action == "cancel":
        dropped = ref.cancel()
        return (
            f"Workflow {ref.id} cancelled: {dropped} queued member payload"
            f"{'s' if dropped != 1 else ''} deleted."
        )
    if action == "release-held":
        count = ref.release_held()
        return f"{count} held call{'s' if count != 1 else ''} of {ref.id} enqueued."
    count = ref.delete_held()
    return f"{count} held call{'s' if count != 1 else ''} of {ref.id} deleted."


@lowkiq_web.post("/workflow/<action>")
def workflow_action(action: str) -> Response | str:
    """Cancel the form's workflow, or release or delete the calls it holds; htmx swaps
    the workflow's part of the page for the new one, with a message."""
    if action not in ACTIONS:
        abort(404, f"no workflow action {action!r}: one of {', '.join(ACTIONS)}")
    workflow_id = _workflow_id(request.form.get("id"))
    shown = _whole(request.form, "limit", MEMBERS_SHOWN, MAX_MEMBERS_SHOWN)
    client = lowkiq.settings.client()
    found = summary.summary(client, workflow_id)
    if found is None:
        abort(404, f"no workflow {workflow_id!r} (never opened, or expired)")
    if action == "cancel" and found.phase in ("complete", "expired"):
        raise BadParameter(f"workflow {workflow_id!r} is {found.label}: nothing to cancel")
    try:
        message = _act(lowkiq.workflow(workflow_id), action)
    except WorkflowError as exc:  # it expired meanwhile
        abort(404, str(exc))
    gone = summary.summary(client, workflow_id) is None  # expired, and held nothing more
    if not request.headers.get("HX-Request"):
        page = (
            url_for("lowkiq_web.workflows")
            if gone
            else url_for("lowkiq_web.workflow", id=workflow_id)
        )
        return redirect(page, 303)
    if gone:
        return render_template(
            "lowkiq/_workflow_gone.html", workflow_id=workflow_id, message=message
        )
    return render_template(
        "lowkiq/_workflow.html", **_workflow_context(workflow_id, shown, message)
    )
