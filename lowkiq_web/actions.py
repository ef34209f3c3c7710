"""The dashboard's actions: POST only, CSRF-checked (see :mod:`lowkiq_web.security`),
refused in read-only mode; a bad parameter is a 400 that changes nothing.

An htmx request gets a fragment back (a job's row disappears, the counts update
out of band; an action on the checked jobs, a bulk action or "perform now" re-renders
the list with a message; from the job page, the page reloads); a plain form POST is
redirected back to its list (or job page).
"""

from __future__ import annotations

from typing import Any

from flask import abort, redirect, render_template, request, url_for
from werkzeug.wrappers import Response

import lowkiq
from lowkiq_web import views
from lowkiq_web.blueprint import lowkiq_web, read_only
from lowkiq_web.bulk import JobAction, find_bulk_action, find_job_action
from lowkiq_web.listing import BadParameter, parse_query
from lowkiq_web.overview import find_worker, move_targets

#: The most ids one action on checked jobs takes (a list page shows at most 500).
MAX_CHECKED = 1000


@lowkiq_web.before_request
def refuse_when_read_only() -> None:
    """In read-only mode every POST is refused (the buttons are hidden too)."""
    if request.method == "POST" and read_only():
        abort(403, "the dashboard is read-only")


def _list_params(kind: str) -> dict[str, Any]:
    """The list's filter, sent along by htmx (hx-include) or a plain form; checked before
    anything changes (:class:`BadParameter`)."""
    params = {k: v for k, v in request.form.items() if k in ("by", "dir", "from", "per", "prefix")}
    parse_query(kind, params)
    return params


def _message(count: int, done: str) -> str:
    return f"{count} job{'s' if count != 1 else ''} {done}."


@lowkiq_web.post("/<worker>/<kind>/<action>")
def bulk(worker: str, kind: str, action: str) -> Response | str:
    """Run a bulk action on the worker's queue or morgue."""
    found = find_worker(worker)
    bulk_action = find_bulk_action(kind, action)
    if bulk_action is None:
        abort(404, f"no action {action!r} on the {kind} list")
    params = _list_params(kind)
    count = bulk_action.run(found.actions())
    if not request.headers.get("HX-Request"):
        return redirect(url_for(f"lowkiq_web.{kind}", worker=worker, **params), 303)
    context = views.list_context(worker, kind, params)
    message = _message(count, bulk_action.done)
    return render_template("lowkiq/_list_response.html", message=message, **context)


def _job_action(kind: str, action: str) -> JobAction:
    found = find_job_action(kind, action)
    if found is None:
        abort(404, f"no action {action!r} on a job of the {kind} list")
    return found


def _job_id(text: str | None) -> str:
    """A job id of a form, checked: not empty, without NUL."""
    if not text or "\0" in text:
        raise BadParameter("id is required (a job id, without NUL)")
    return text


def _checked_ids() -> list[str]:
    """The form's job ids (``id`` fields), checked: at least one, at most
    :data:`MAX_CHECKED`, none empty or with NUL."""
    ids = request.form.getlist("id")
    if not ids:
        raise BadParameter("check at least one job")
    if len(ids) > MAX_CHECKED:
        raise BadParameter(f"at most {MAX_CHECKED} jobs at a time, got {len(ids)}")
    return [_job_id(job_id) for job_id in ids]


def _back() -> str:
    """The form's ``back``: ``job`` (from the job page) or empty (from a list)."""
    back = request.form.get("back", "")
    if back not in ("", "job"):
        raise BadParameter(f"back must be job or empty, got {back!r}")
    return back


@lowkiq_web.post("/<worker>/<any(enqueued, retries, scheduled, dead):kind>/selected/<action>")
def checked_jobs(worker: str, kind: str, action: str) -> Response | str:
    """Run a job action on the jobs checked in a list (form fields ``id``); htmx gets the
    list back with a message."""
    found = find_worker(worker)
    job_action = _job_action(kind, action)
    checked = _checked_ids()
    params = _list_params(kind)
    count = job_action.run(found.actions(), checked)
    if not request.headers.get("HX-Request"):
        return redirect(url_for(f"lowkiq_web.{kind}", worker=worker, **params), 303)
    context = views.list_context(worker, kind, params)
    message = _message(count, job_action.done)
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
    return _one_job(worker, "dead", action)


@lowkiq_web.post("/<worker>/<any(enqueued, retries, scheduled):kind>/job/<action>")
def queued_job(worker: str, kind: str, action: str) -> Response | str:
    """Perform now, kill or delete one queued job; htmx swaps its row for nothing (after
    "perform now", the list with a message)."""
    return _one_job(worker, kind, action)


def _one_job(worker: str, kind: str, action: str) -> Response | str:
    """Run a job action on the job of the form's ``id``; ``back=job``: from the job page,
    which is then shown again."""
    found = find_worker(worker)
    job_action = _job_action(kind, action)
    job_id = _job_id(request.form.get("id"))
    back = _back()
    params = _list_params(kind)
    count = job_action.run(found.actions(), [job_id])
    htmx = bool(request.headers.get("HX-Request"))
    if back == "job":
        job_page = url_for("lowkiq_web.job", worker=worker, id=job_id)
        if htmx:
            return Response("", 200, {"HX-Redirect": job_page})
        return redirect(job_page, 303)
    if not htmx:
        return redirect(url_for(f"lowkiq_web.{kind}", worker=worker, **params), 303)
    if action == "perform_now":
        context = views.list_context(worker, kind, params)
        message = _message(count, job_action.done)
        return render_template("lowkiq/_list_response.html", message=message, **context)
    done = f"Job {job_id} {job_action.done}." if count else f"Job {job_id} was already gone."
    return render_template(
        "lowkiq/_row_gone.html",
        worker=found.__name__,
        kind=kind,
        metrics=found.metrics(),
        message=done,
    )


def _move_target(worker: str, name: str | None) -> type[lowkiq.Worker]:
    """The worker a move's ``to`` names, checked (:class:`BadParameter`)."""
    if not name:
        raise BadParameter("to is required: the worker to move the jobs to")
    if name not in move_targets(worker):
        if name == worker:
            raise BadParameter(f"to must be another worker than {worker}, got {name!r}")
        raise BadParameter(f"to must be another worker of lowkiq.settings.workers, got {name!r}")
    return find_worker(name)


#: Seconds a move from the dashboard waits for the running batches of its ids (then it
#: moves the others and says which still run): well inside a web worker's request
#: timeout (gunicorn's 30 s), unlike :data:`lowkiq.storage.actions.MOVE_WAIT`.
MOVE_WAIT = 5.0


# The same converter as checked_jobs' rule: the two share their route up to ``move``.
@lowkiq_web.post("/<worker>/<any(enqueued, retries, scheduled, dead):kind>/selected/move")
def move(worker: str, kind: str) -> Response | str:
    """Move the queued jobs of the form's ``id`` fields to the queue of the worker named
    by ``to`` (:meth:`lowkiq.Actions.move`: due now, retry count -1); htmx gets the list
    back with a message; ``back=job`` (one id): the job page, in its new worker."""
    found = find_worker(worker)
    if kind == "dead":
        abort(404, "no action 'move' on a job of the dead list (queue it up first)")
    ids = _checked_ids()
    target = _move_target(found.__name__, request.form.get("to"))
    back = _back()
    if back == "job" and len(ids) != 1:
        raise BadParameter(f"back=job moves one job, got {len(ids)} ids")
    params = _list_params(kind)
    count = found.actions().move(ids, to=target, wait=MOVE_WAIT)
    htmx = bool(request.headers.get("HX-Request"))
    if back == "job":
        job_page = url_for("lowkiq_web.job", worker=target.__name__, id=ids[0])
        if htmx:
            return Response("", 200, {"HX-Redirect": job_page})
        return redirect(job_page, 303)
    if not htmx:
        return redirect(url_for(f"lowkiq_web.{kind}", worker=worker, **params), 303)
    context = views.list_context(worker, kind, params)
    message = _message(count, f"moved to {target.__name__}")
    return render_template("lowkiq/_list_response.html", message=message, **context)
