"""What the standalone dashboard (``create_app``, ``lowkiq web``) takes from its
arguments or the environment: the app to load (``LOWKIQ_APP``) and the URL prefix
(``LOWKIQ_WEB_URL_PREFIX``)."""

from __future__ import annotations

import os

from flask import Flask, Response, redirect, url_for

from lowkiq.cli.app_loader import load_app
from lowkiq_web.mount import check_prefix

#: The app to load, as ``-r`` takes it: a ``.py`` path or a dotted module name.
APP_ENV = "LOWKIQ_APP"
#: The path the standalone dashboard is served under, e.g. ``/lowkiq``.
URL_PREFIX_ENV = "LOWKIQ_WEB_URL_PREFIX"


def load_lowkiq_app(target: str | None) -> None:
    """Import ``target``, else ``LOWKIQ_APP`` when set, so that ``lowkiq.settings``
    names the app's workers; :class:`~lowkiq.cli.app_loader.AppLoadError` when it fails."""
    target = target or os.environ.get(APP_ENV)
    if target:
        load_app(target)


def url_prefix_of(value: str | None, source: str = "url_prefix") -> str | None:
    """``value`` (else ``LOWKIQ_WEB_URL_PREFIX``) as a blueprint's ``url_prefix``:
    ``/lowkiq`` for ``/lowkiq/``, ``None`` for the root; a path a browser would not send
    back as given raises :class:`~lowkiq.errors.ConfigurationError` naming ``source``
    (or the variable)."""
    if value is None:
        value, source = os.environ.get(URL_PREFIX_ENV, ""), URL_PREFIX_ENV
    return check_prefix(value, source)


def add_root_redirect(app: Flask) -> None:
    """Send ``/`` to the dashboard when it lives under a prefix."""

    def to_dashboard() -> Response:
        return redirect(url_for("lowkiq_web.dashboard"))  # type: ignore[return-value]

    app.add_url_rule("/", "lowkiq_root", to_dashboard)
