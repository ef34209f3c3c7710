"""The lowkiq dashboard in a Django URLconf, behind Django's authentication.

::

    from django.urls import path
    from lowkiq.contrib.django.dashboard import dashboard_urls

    urlpatterns = [
        path("lowkiq/", dashboard_urls()),                       # staff only
        # path("lowkiq/", dashboard_urls(allow=lambda user: user.is_superuser)),
    ]

Every request under the prefix goes to the dashboard's Flask app
(:func:`lowkiq_web.create_app`) as a WSGI call, the prefix as its ``SCRIPT_NAME``, once
Django's authentication let it through: an anonymous visitor is redirected to
``settings.LOGIN_URL`` (302), a signed-in user whom ``allow`` refuses gets 403.  The
dashboard's POSTs carry its own CSRF token (:mod:`lowkiq_web.security`), signed with
Django's ``SECRET_KEY``; Django's CSRF middleware leaves them to it.
"""

from __future__ import annotations

import io
import sys
import threading
from collections.abc import Callable, Iterable
from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.urls import URLPattern, re_path
from django.views.decorators.csrf import csrf_exempt

#: Who may see the dashboard by default: staff users (``user.is_staff``).
Allow = Callable[[Any], bool]


def is_staff(user: Any) -> bool:
    """The default ``allow``: an active staff user."""
    return bool(user.is_active and user.is_staff)


def dashboard_urls(
    allow: Allow = is_staff,
    *,
    read_only: bool = False,
    login_url: str | None = None,
    namespace: str = "lowkiq",
) -> tuple[list[URLPattern], str, str]:
    """What ``path("lowkiq/", ...)`` includes: the dashboard under that prefix, its URL
    ``{namespace}:dashboard``.  ``allow(user)`` says who may see it (default: staff);
    ``read_only`` hides and refuses every action; ``login_url`` (default
    ``settings.LOGIN_URL``) is where anonymous visitors are sent; ``namespace`` tells two
    mounts apart."""
    view = dashboard_view(allow, read_only=read_only, login_url=login_url)
    return [re_path(r"^(?P<rest>.*)$", view, name="dashboard")], "lowkiq", namespace


def dashboard_view(
    allow: Allow = is_staff, *, read_only: bool = False, login_url: str | None = None
) -> Callable[..., HttpResponse]:
    """A Django view serving the dashboard; its URL pattern must capture the path under
    the dashboard's prefix as ``rest`` (see :func:`dashboard_urls`)."""
    if not callable(allow):
        raise TypeError(f"dashboard_urls: allow must be a function of the user, got {allow!r}")
    app = _LazyApp(read_only)

    def lowkiq_dashboard(request: HttpRequest, rest: str = "") -> HttpResponse:
        user = getattr(request, "user", None)
        if user is None:
            raise PermissionDenied(
                "the lowkiq dashboard needs django.contrib.auth's AuthenticationMiddleware"
            )
        if not user.is_authenticated:
            from django.contrib.auth.views import redirect_to_login

            return redirect_to_login(request.get_full_path(), login_url)
        if not allow(user):
            raise PermissionDenied("not allowed to see the lowkiq dashboard")
        return call_wsgi(app.get(), request, rest)

    # The dashboard checks its POSTs itself (lowkiq_web.security).
    exempt: Callable[..., HttpResponse] = csrf_exempt(lowkiq_dashboard)
    return exempt


class _LazyApp:
    """The dashboard's Flask app, made at the first request (after the apps are ready)."""

    def __init__(self, read_only: bool) -> None:
        self._read_only = read_only
        self._lock = threading.Lock()
        self._app: Any = None

    def get(self) -> Any:
        with self._lock:
            if self._app is None:
                from lowkiq_web import create_app

                self._app = create_app(self._read_only, SECRET_KEY=settings.SECRET_KEY)
            return self._app


def call_wsgi(app: Callable[..., Iterable[bytes]], request: HttpRequest, rest: str) -> HttpResponse:
    """Call the WSGI ``app`` with ``request``, mounted where the URL's ``rest`` begins,
    and return its answer as a Django response."""
    body = request.body
    mount = request.path_info[: len(request.path_info) - len(rest)].rstrip("/")
    environ = {key: value for key, value in request.META.items() if isinstance(key, str)}
    environ.update(
        {
            "REQUEST_METHOD": request.method or "GET",
            "SCRIPT_NAME": request.META.get("SCRIPT_NAME", "").rstrip("/") + _wsgi_text(mount),
            "PATH_INFO": "/" + _wsgi_text(rest),
            "QUERY_STRING": request.META.get("QUERY_STRING", ""),
            "CONTENT_LENGTH": str(len(body)),
            "SERVER_NAME": request.META.get("SERVER_NAME", "localhost"),
            "SERVER_PORT": str(request.META.get("SERVER_PORT", "80")),
            "wsgi.version": (1, 0),
            "wsgi.url_scheme": request.scheme,
            "wsgi.input": io.BytesIO(body),
            "wsgi.errors": sys.stderr,
            "wsgi.multithread": True,
            "wsgi.multiprocess": True,
            "wsgi.run_once": False,
        }
    )
    answer: dict[str, Any] = {}

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
        answer["status"], answer["headers"] = status, headers
        return lambda data: None

    chunks = app(environ, start_response)
    try:
        content = b"".join(chunks)
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()
    code, _, reason = answer["status"].partition(" ")
    response = HttpResponse(content, status=int(code), reason=reason or None)
    for name, value in answer["headers"]:
        if name.lower() == "set-cookie":
            response.cookies.load(value)
        elif name in response.headers and name.lower() != "content-type":
            response.headers[name] = f"{response.headers[name]}, {value}"
        else:
            response.headers[name] = value
    return response


def _wsgi_text(path: str) -> str:
    """A decoded URL path as WSGI carries it: its UTF-8 bytes read as Latin-1."""
    return path.encode("utf-8").decode("latin-1")
