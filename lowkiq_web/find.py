"""Find a job by exact id in every worker, and the dashboard's own 404 page for a path
it does not have (under a URL prefix, or in the standalone app)."""

from __future__ import annotations

from flask import abort, current_app, redirect, render_template, request, url_for
from flask.blueprints import BlueprintSetupState
from werkzeug.exceptions import HTTPException
from werkzeug.wrappers import Response

import lowkiq
from lowkiq_web.blueprint import lowkiq_web
from lowkiq_web.listing import BadParameter

#: ``app.config`` key set by :func:`lowkiq_web.create_app`: the app is the dashboard's own.
STANDALONE = "LOWKIQ_WEB_STANDALONE"


def workers_holding(job_id: str) -> list[str]:
    """The names of the workers with a job ``job_id`` busy, queued or dead, in settings
    order."""
    found = []
    for worker in lowkiq.settings.workers:
        queries = worker.queries(payloads_limit=1)
        if (
            queries.fetch([job_id])
            or queries.morgue_fetch([job_id])
            or any(job["id"] == job_id for job in queries.processing_data())
        ):
            found.append(worker.__name__)
    return found


@lowkiq_web.get("/find")
def find() -> Response | tuple[str, int]:
    """The job page of the id in ``id``, in whichever worker has it; a page listing them
    when several do, a 404 naming the workers searched when none does."""
    job_id = request.args.get("id", "")
    if not job_id or "\0" in job_id:
        raise BadParameter("id is required (an exact job id, without NUL)")
    holders = workers_holding(job_id)
    if len(holders) == 1:
        return redirect(url_for("lowkiq_web.job", worker=holders[0], id=job_id))
    searched = [worker.__name__ for worker in lowkiq.settings.workers]
    status = 200 if holders else 404
    return render_template(
        "lowkiq/find.html", job_id=job_id, holders=holders, searched=searched
    ), status


def not_found(unknown: str) -> str:
    """A path under the dashboard that names no page: the dashboard's 404 page (which
    names the worker's lists when the path starts with a worker's name)."""
    _refuse_a_get_of_a_post_route()
    first = unknown.split("/", 1)[0]
    if any(worker.__name__ == first for worker in lowkiq.settings.workers):
        lists = url_for("lowkiq_web.enqueued", worker=first)
        abort(404, f"The dashboard has no page at /{unknown}. {first}'s jobs: {lists}.")
    abort(404, f"The dashboard has no page at /{unknown}.")


def _refuse_a_get_of_a_post_route() -> None:
    """A GET of an action's path (POST only) stays a 405, as without this page."""
    if request.method == "POST":
        return
    adapter = current_app.url_map.bind_to_environ(request.environ)
    try:
        endpoint, _ = adapter.match(method="POST")
    except HTTPException:
        return
    if not str(endpoint).endswith(".not_found"):
        abort(405, valid_methods=["POST"])


def add_not_found_page(state: BlueprintSetupState) -> None:
    """Run at ``register_blueprint``: answer unknown paths under the dashboard with its
    own 404 page, when the dashboard has a prefix or the app is its own (at the root of
    a host app, the host's 404 is left alone)."""
    if state.url_prefix or state.app.config.get(STANDALONE):
        state.add_url_rule(
            "/<path:unknown>", "not_found", not_found, methods=["GET", "POST", "HEAD"]
        )


lowkiq_web.record(add_not_found_page)
