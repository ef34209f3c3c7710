"""``lowkiq web``: serve the dashboard with gunicorn (added to the ``lowkiq`` command)."""

from __future__ import annotations

from typing import Any

import click
from flask import Flask
from gunicorn.app.base import BaseApplication  # type: ignore[import-untyped]

from lowkiq.cli.support import (
    check_port_free_or_exit,
    embedded_redis_option,
    fail,
    load_app_or_exit,
    traceback_option,
)
from lowkiq.clients.default_redis import check_local_redis, check_redis_accepts
from lowkiq.errors import LowkiqError
from lowkiq_web.basic_auth import ENV as BASIC_AUTH_ENV
from lowkiq_web.basic_auth import Credentials
from lowkiq_web.standalone import APP_ENV, URL_PREFIX_ENV, url_prefix_of


class DashboardServer(BaseApplication):  # type: ignore[misc]
    """gunicorn serving an already built Flask app (workers fork after the app is loaded)."""

    def __init__(self, app: Flask, options: dict[str, Any]) -> None:
        self.application = app
        self.options = options
        super().__init__()

    def load_config(self) -> None:
        """Apply the command's options to gunicorn's config."""
        for key, value in self.options.items():
            self.cfg.set(key, value)

    def load(self) -> Flask:
        """The app to serve."""
        return self.application


@click.command()
@click.option(
    "-r",
    "--require",
    "app",
    envvar=APP_ENV,
    show_envvar=True,
    metavar="PATH_OR_MODULE",
    help="The app to load: a .py file or a dotted module name that sets lowkiq.settings "
    "(its workers are the dashboard's).",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8000, show_default=True, type=click.IntRange(0, 65535))
@click.option(
    "--processes",
    default=2,
    show_default=True,
    type=click.IntRange(min=1),
    help="gunicorn workers.",
)
@click.option("--read-only", is_flag=True, help="Hide and refuse every action.")
@click.option(
    "--url-prefix",
    envvar=URL_PREFIX_ENV,
    show_envvar=True,
    metavar="PATH",
    help="Serve the dashboard under PATH (e.g. /lowkiq, behind a proxy that keeps the "
    "path); / redirects there.",
)
@click.option(
    "--basic-auth",
    envvar=BASIC_AUTH_ENV,
    show_envvar=True,
    metavar="USER:PASSWORD",
    help="Ask every request for this user and password (HTTP basic auth; serve it over "
    "HTTPS). Prefer the variable: a command line is visible to other users.",
)
@traceback_option()
@embedded_redis_option()
def web(
    app: str | None,
    host: str,
    port: int,
    processes: int,
    read_only: bool,
    url_prefix: str | None,
    basic_auth: str | None,
) -> None:
    """Serve the dashboard of the workers defined by APP (gunicorn on lowkiq_web:create_app())."""
    if not app:
        fail(f"give the app: -r/--require PATH_OR_MODULE, or set {APP_ENV}")
    try:
        url_prefix_of(url_prefix or "", f"--url-prefix ({URL_PREFIX_ENV})")
        if basic_auth:
            Credentials.parse(basic_auth, f"--basic-auth ({BASIC_AUTH_ENV})")
    except LowkiqError as exc:
        fail(str(exc))
    check_port_free_or_exit(host, port, "the dashboard")
    load_app_or_exit(app)
    import lowkiq
    from lowkiq_web import create_app

    try:
        check_local_redis(lowkiq.settings.redis)
        check_redis_accepts(lowkiq.settings.redis)
        dashboard = create_app(
            read_only=read_only,
            url_prefix=url_prefix or "",
            basic_auth=basic_auth or None,
            require=app,
        )
    except LowkiqError as exc:
        fail(str(exc))

    options = {"bind": f"{host}:{port}", "workers": processes, "accesslog": "-"}
    DashboardServer(dashboard, options).run()
