"""A worker's rate limit on its pages, and the form that changes it at run time.

POST only and CSRF-checked like every action (:mod:`lowkiq_web.security`),
refused in read-only mode (:mod:`lowkiq_web.actions`).  ``action`` is ``set``
(with ``limit``, e.g. ``100/s``, and an optional ``burst``), ``none`` (no limit)
or ``code`` (back to the class's ``rate_limit``); a bad value is a 400 that
changes nothing.
"""

from __future__ import annotations

from flask import redirect, render_template, request, url_for
from werkzeug.wrappers import Response

import lowkiq
from lowkiq.errors import ConfigurationError
from lowkiq.limits.rate_limit import RateLimit, rate_limit_overrides
from lowkiq_web.blueprint import lowkiq_web
from lowkiq_web.listing import BadParameter
from lowkiq_web.overview import find_worker


def limits_by_worker() -> dict[str, str]:
    """Worker name -> its rate limit in force, described, for the workers that have one
    (one round trip)."""
    overrides = rate_limit_overrides(lowkiq.settings.client())
    limits = {
        worker.__name__: overrides.get(worker.queue_name, worker.rate_limit)
        for worker in lowkiq.settings.workers
    }
    return {name: limit.describe() for name, limit in limits.items() if limit is not None}


def _burst(text: str) -> int | None:
    if not text:
        return None
    if not text.isdigit() or not text.isascii() or int(text) < 1:
        raise BadParameter(f"burst must be an integer >= 1, got {text!r}")
    return int(text)


@lowkiq_web.post("/<worker>/rate-limit")
def set_rate_limit(worker: str) -> Response | str:
    """Change the worker's rate limit on every process; htmx swaps the rate-limit
    control for the new state's."""
    found = find_worker(worker)
    action = request.form.get("action", "")
    if action == "set":
        try:
            limit = RateLimit.parse(
                request.form.get("limit", ""), _burst(request.form.get("burst", ""))
            )
        except ConfigurationError as exc:
            raise BadParameter(str(exc)) from None
        found.set_rate_limit(limit)
    elif action == "none":
        found.set_rate_limit(None)
    elif action == "code":
        found.clear_rate_limit()
    else:
        raise BadParameter(f"action must be set, none or code, got {action!r}")
    if not request.headers.get("HX-Request"):
        return redirect(url_for("lowkiq_web.enqueued", worker=worker), 303)
    return render_template(
        "lowkiq/_rate_limit.html", worker=found.__name__, rate=found.rate_limit_status()
    )
