"""Cross-site request forgery protection of the dashboard's POSTs.

A POST passes only when it is same-origin (``Sec-Fetch-Site: same-origin``, or
an ``Origin`` equal to this host's or listed in ``LOWKIQ_WEB_TRUSTED_ORIGINS``)
**and** carries the CSRF token (``X-CSRF-Token`` header or ``csrf_token`` form
field) equal to the ``lowkiq_csrf`` cookie.  The cookie is HttpOnly,
SameSite=Strict and scoped to the dashboard's path; when the host app has a
``SECRET_KEY`` the token is also signed with it (itsdangerous), so a cookie
planted from a sibling sub-domain is refused.  No server state is kept, so it
works across gunicorn workers and behind any mounting.
"""

from __future__ import annotations

import hmac
import secrets

from flask import abort, current_app, g, request, url_for
from flask.wrappers import Response
from itsdangerous import BadSignature, Signer

COOKIE = "lowkiq_csrf"
HEADER = "X-CSRF-Token"
FIELD = "csrf_token"
_SALT = "lowkiq-web-csrf"


def _signer() -> Signer | None:
    key = current_app.secret_key
    return Signer(key, salt=_SALT) if key else None


def _valid(token: str) -> bool:
    signer = _signer()
    if signer is None:
        return len(token) >= 32
    try:
        signer.unsign(token)
    except BadSignature:
        return False
    return True


def csrf_token() -> str:
    """This client's token: the one in its cookie if valid, else a new one (set on the response)."""
    if "lowkiq_csrf" not in g:
        token = request.cookies.get(COOKIE, "")
        if not _valid(token):
            token = secrets.token_urlsafe(32)
            signer = _signer()
            if signer is not None:
                token = signer.sign(token).decode()
            g.lowkiq_csrf_new = True
        g.lowkiq_csrf = token
    current: str = g.lowkiq_csrf
    return current


def set_csrf_cookie(response: Response) -> None:
    """Send the token's cookie when this request made a new one."""
    if g.get("lowkiq_csrf_new"):
        response.set_cookie(
            COOKIE,
            g.lowkiq_csrf,
            httponly=True,
            samesite="Strict",
            secure=request.is_secure,
            path=url_for("lowkiq_web.dashboard"),
        )


def same_origin() -> bool:
    """Whether the request says it comes from a page of this site."""
    fetch_site = request.headers.get("Sec-Fetch-Site")
    if fetch_site is not None:
        return fetch_site == "same-origin"
    origin = request.headers.get("Origin")
    if not origin:
        return False
    trusted = {request.host_url.rstrip("/")}
    trusted.update(o.rstrip("/") for o in current_app.config.get("LOWKIQ_WEB_TRUSTED_ORIGINS", ()))
    return origin.rstrip("/") in trusted


def protect_post() -> None:
    """Refuse (403) a POST that is cross-site or lacks the cookie's token."""
    if request.method != "POST":
        return
    if not same_origin():
        abort(403, "cross-origin request refused (Origin / Sec-Fetch-Site)")
    cookie = request.cookies.get(COOKIE, "")
    sent = request.headers.get(HEADER) or request.form.get(FIELD, "")
    if not cookie or not _valid(cookie) or not hmac.compare_digest(cookie.encode(), sent.encode()):
        abort(403, "missing or invalid CSRF token; reload the page")
