"""The ``lowkiq_web`` Blueprint object, where its templates and static files are, and
what every one of its responses carries (template helpers, security headers)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from flask import Blueprint, Response, current_app, g

from lowkiq_web import formatting, security, unserved
from lowkiq_web.mount import STATIC_URL_PATH, check_mount
from lowkiq_web.no_app import served_elsewhere
from lowkiq_web.overview import eviction_warning, on_embedded_redis, redis_full

_PACKAGE = Path(__file__).resolve().parent

#: Version of the vendored htmx in ``static/lowkiq/``.
HTMX_VERSION = "2.0.11"
#: Version of the vendored uPlot (chart library, MIT) in ``static/lowkiq/``.
UPLOT_VERSION = "1.6.32"

#: The Content-Security-Policy of every dashboard response: no inline script or style.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)


def asset_dir(name: str) -> Path:
    """``templates`` or ``static``: in the package (a wheel), else at the top level (a checkout)."""
    inside = _PACKAGE / name
    return inside if inside.is_dir() else _PACKAGE.parent / name


lowkiq_web = Blueprint(
    "lowkiq_web",
    __name__,
    template_folder=str(asset_dir("templates")),
    static_folder=str(asset_dir("static") / "lowkiq"),
    static_url_path=STATIC_URL_PATH,
)
"""The dashboard blueprint: ``app.register_blueprint(lowkiq_web, url_prefix="/lowkiq")``
(or without a prefix: its static files have a path of their own, not the app's ``/static``)."""

lowkiq_web.record(check_mount)


#: Set on ``flask.g`` by the page that says Redis is unreachable.
REDIS_UNREACHABLE = "lowkiq_redis_unreachable"


def read_only() -> bool:
    """Whether the host app set ``LOWKIQ_WEB_READ_ONLY``: actions hidden and refused."""
    return bool(current_app.config.get("LOWKIQ_WEB_READ_ONLY", False))


@lowkiq_web.context_processor
def template_helpers() -> dict[str, Any]:
    """Names every lowkiq template may use (only in this blueprint's requests).  The
    page saying Redis is unreachable asks Redis nothing (its banners left out)."""
    reachable = not g.get(REDIS_UNREACHABLE, False)
    return {
        "fmt": formatting,
        "read_only": read_only(),
        "embedded_redis": on_embedded_redis(),
        "eviction_warning": eviction_warning() if reachable else None,
        "redis_full": redis_full() if reachable else None,
        "unserved_shards": unserved.unserved_shards if reachable else list,
        "served_elsewhere": served_elsewhere,
        "csrf_token": security.csrf_token(),
        "htmx_file": f"htmx-{HTMX_VERSION}.min.js",
        "uplot_file": f"uPlot-{UPLOT_VERSION}.min",
    }


@lowkiq_web.after_request
def secure_headers(response: Response) -> Response:
    """CSP without inline script, no framing, no sniffing; set the CSRF cookie."""
    response.headers.setdefault("Content-Security-Policy", CONTENT_SECURITY_POLICY)
    response.headers.setdefault("X-Content-Type-Options", "nosniff")
    response.headers.setdefault("X-Frame-Options", "DENY")
    response.headers.setdefault("Referrer-Policy", "same-origin")
    security.set_csrf_cookie(response)
    return response


lowkiq_web.before_request(security.protect_post)
