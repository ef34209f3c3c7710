"""``lowkiq web``: serve the dashboard with gunicorn (added to the ``lowkiq`` command)."""

from __future__ import annotations

from typing import Any

import click
from flask import Flask
from gunicorn.app.base import BaseApplication  # type: ignore[import-untyped]

from lowkiq.cli_support import embedded_redis_option, fail, load_app_or_exit, require_option
from lowkiq.default_redis import check_local_redis
from lowkiq.errors import RedisUnavailable


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
@require_option("The app to load: a .py file or a dotted module name that sets lowkiq.settings.")
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
@embedded_redis_option()
def web(app: str, host: str, port: int, processes: int, read_only: bool) -> None:
    """Serve the dashboard of the workers defined by APP (gunicorn on lowkiq_web:create_app())."""
    load_app_or_exit(app)
    import lowkiq
    from lowkiq_web import create_app

    try:
        check_local_redis(lowkiq.settings.redis)
    except RedisUnavailable as exc:
        fail(str(exc))

    options = {"bind": f"{host}:{port}", "workers": processes, "accesslog": "-"}
    DashboardServer(create_app(read_only=read_only), options).run()
