"""Error pages: 400 with the message, 403, 404, 405, and 503 when Redis is unreachable.

Only errors of this blueprint's own requests come here; the host app's error
pages are left alone.
"""

from __future__ import annotations

import logging

import redis
from flask import g, render_template
from werkzeug.exceptions import HTTPException

import lowkiq
from lowkiq.clients.default_redis import unreachable_hint
from lowkiq.errors import InvalidQuery, RedisUnavailable
from lowkiq_web.blueprint import REDIS_UNREACHABLE, lowkiq_web

log = logging.getLogger("lowkiq_web")


def _page(status: int, title: str, message: str) -> tuple[str, int]:
    return render_template("lowkiq/error.html", status=status, title=title, message=message), status


@lowkiq_web.errorhandler(HTTPException)
def http_error(exc: HTTPException) -> tuple[str, int]:
    """4xx (and werkzeug's 5xx) as a page that says what went wrong."""
    return _page(exc.code or 500, exc.name, exc.description or "")


@lowkiq_web.errorhandler(InvalidQuery)
def invalid_query(exc: InvalidQuery) -> tuple[str, int]:
    """A filter Redis would reject: a 400 naming it."""
    return _page(400, "Bad Request", str(exc))


@lowkiq_web.errorhandler(redis.ConnectionError)
@lowkiq_web.errorhandler(redis.TimeoutError)
@lowkiq_web.errorhandler(RedisUnavailable)
def redis_unreachable(exc: Exception) -> tuple[str, int]:
    """Redis is down or too slow: a 503 that says so (details in the log, not the page)."""
    log.warning("lowkiq dashboard: Redis is unreachable: %s", exc)
    setattr(g, REDIS_UNREACHABLE, True)
    hint = unreachable_hint(lowkiq.settings.redis) or (
        "Check that the server is up and that REDIS_URL / lowkiq.settings.redis point at it"
    )
    return _page(
        503, "Redis is unreachable", f"The dashboard cannot reach Redis. {hint}; then reload."
    )
