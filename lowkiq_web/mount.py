"""Where the dashboard may be mounted: a URL prefix a browser sends back as given, and
the check run whenever the blueprint is registered (a bad prefix, static files that
another route would answer)."""

from __future__ import annotations

import logging
import re
from typing import cast

from flask import Blueprint
from flask.blueprints import BlueprintSetupState
from werkzeug.exceptions import HTTPException

from lowkiq.errors import ConfigurationError

log = logging.getLogger("lowkiq_web")

#: A prefix's segment: the characters a browser sends as typed (RFC 3986's unreserved).
#: ``;`` would end the CSRF cookie's path, ``<x>`` is a Flask route variable, ``%``,
#: space and non-ASCII text come back percent-encoded: every page or action would fail.
SEGMENT = re.compile(r"[A-Za-z0-9._~-]+")

#: The path, under the prefix, of the dashboard's CSS and JavaScript files: not ``/static``,
#: which a host app's own static files take when the dashboard is mounted at its root.
STATIC_URL_PATH = "/lowkiq-static"
#: Their former path, still served where nothing else answers it (health probes ask for
#: ``/static/lowkiq.css``).
OLD_STATIC_URL_PATH = "/static"


def prefix_problem(prefix: str) -> str | None:
    """Why a browser could not use ``prefix`` (already without its trailing ``/``) as the
    dashboard's path, or ``None`` when it can."""
    if not prefix.startswith("/"):
        return "it must start with /"
    for segment in prefix[1:].split("/"):
        if not segment:
            return "it has an empty segment (//)"
        if segment in (".", ".."):
            return f"a browser removes the segment {segment!r} before sending the path"
        if not SEGMENT.fullmatch(segment):
            return (
                f"the segment {segment!r} has a character a browser would not send back "
                "as given (use letters, digits and - . _ ~)"
            )
    return None


def check_prefix(value: str, source: str) -> str | None:
    """``value`` as a blueprint's ``url_prefix``: ``/lowkiq`` for ``/lowkiq/``, ``None``
    for the root; a :class:`ConfigurationError` naming ``source`` when a browser could
    not reach the dashboard there."""
    prefix = value.strip().rstrip("/")
    if not prefix:
        return None
    problem = prefix_problem(prefix)
    if problem is not None:
        raise ConfigurationError(
            f"{source} must be a path such as /lowkiq, got {value!r}: {problem}"
        )
    return prefix


def _endpoint_of(state: BlueprintSetupState, path: str) -> str | None:
    """The endpoint the app routes a GET of ``path`` to, if any."""
    try:
        endpoint, _ = state.app.url_map.bind("localhost").match(path)
    except HTTPException:  # a redirect or no match
        return None
    return str(endpoint)


def check_mount(state: BlueprintSetupState) -> None:
    """Run at ``register_blueprint``: refuse a prefix no browser could reach, log an
    error when another route of the host app answers the dashboard's static files, and
    serve them at their old path too where the host has no route of its own there."""
    prefix = check_prefix(state.url_prefix or "", "lowkiq_web's url_prefix") or ""
    if _endpoint_of(state, f"{prefix}{OLD_STATIC_URL_PATH}/lowkiq.css") is None:
        state.add_url_rule(
            f"{OLD_STATIC_URL_PATH}/<path:filename>",
            "static_at_old_path",
            cast(Blueprint, state.blueprint).send_static_file,
        )
    stylesheet = f"{prefix}{STATIC_URL_PATH}/lowkiq.css"
    endpoint = _endpoint_of(state, stylesheet)
    expected = f"{state.name}.static"
    if endpoint is not None and endpoint != expected:
        log.error(
            "lowkiq dashboard: %s is answered by the host app's %r, not %r: the pages will "
            "have no style, chart or live updates; mount the dashboard under a url_prefix",
            stylesheet,
            endpoint,
            expected,
        )
