"""The dashboard's actions: POST only, CSRF-checked (see :mod:`lowkiq_web.security`).

An htmx request gets a fragment back (a dead job's row disappears, the counts
update out of band, a bulk action re-renders the list); a plain form POST is
redirected back to its list.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flask import abort, redirect, render_template, request, url_for
from werkzeug.wrappers import Response

import lowkiq
from lowkiq_web import views
from lowkiq_web.blueprint import lowkiq_web, read_only
from lowkiq_web.bulk import find_bulk_action
from lowkiq_web.listing import BadParameter
from lowkiq_web.overview import find_worker

#: Actions on one dead job: URL name → (what it does, past tense).
ONE: dict[str, tuple[Callable[[type[lowkiq.Worker], str], int], str]] = {
    "queue_up": (lambda w, i: w.actions().morgue_queue_up([i]), "queued up"),
    "delete": (lambda w, i: w.actions().morgue_delete([i]), "deleted"),
}


@lowkiq_web.before_request
def refuse_when_read_only() -> None:
    """In read-only mode every POST is refused (the buttons are hidden too)."""
    if request.method == "POST" and read_only():
        abort(403, "the dashboard is read-only")


def _list_params() -> dict[str, Any]:
    """The list's filter, sent along by htmx (hx-include) or a plain form."""
    return {k: v for k, v in request.form.items() if k in ("by", "dir", "from", "per")}


@lowkiq_web.post("/<worker>/<kind>/<action>")
def bulk(worker: str, kind: str, action: str) -> Response | str:
    """Run a bulk action on the worker's queue or morgue."""
    found = find_worker(worker)
    bulk_action = find_bulk_action(kind, action)
    if bulk_action is None:
        abort(404, f"no action {action!r} on the {kind} list")
    count = bulk_action.run(found.actions())
    params = _list_params()
    if not request.headers.get("HX-Request"):
        return redirect(url_for(f"lowkiq_web.{kind}", worker=worker, **params), 303)
    context = views.list_context(worker, kind, params)
    message = f"{count} job{'s' if count != 1 else ''} {bulk_action.done}."
    return render_template("lowkiq/_list_response.html", message=message, **context)


@lowkiq_web.post("/<worker>/<any(pause, resume):action>")
def pause_or_resume(worker: str, action: str) -> Response | str:
    """Pause the worker on every process (its shards take no new batches), or resume it;
    htmx swaps the pause control for the new state's."""
    found = find_worker(worker)
    if action == "pause":
        found.pause()
    else:
        found.resume()
    if not request.headers.get("HX-Request"):
        return redirect(url_for("lowkiq_web.enqueued", worker=worker), 303)
    return render_template(
        "lowkiq/_pause.html", worker=found.__name__, worker_paused=found.paused()
    )


@lowkiq_web.post("/<worker>/dead/job/<action>")
def dead_job(worker: str, action: str) -> Response | str:
    """Queue up or delete one dead job; htmx swaps its row for nothing."""
    found = find_worker(worker)
    if action not in ONE:
        abort(404, f"no action {action!r} on a dead job")
    job_id = request.form.get("id", "")
    if not job_id or "\0" in job_id:
        raise BadParameter("id is required (a job id, without NUL)")
    run, _ = ONE[action]
    run(found, job_id)
    if not request.headers.get("HX-Request"):
        return redirect(url_for("lowkiq_web.dead", worker=worker, **_list_params()), 303)
    return render_template(
        "lowkiq/_row_gone.html", worker=found.__name__, kind="dead", metrics=found.metrics()
    )
