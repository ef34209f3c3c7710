"""What the ``lowkiq`` commands share: the ``-r`` option, the ``--embedded-redis`` flag,
and loading the app or exiting with a one-line error."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from typing import Any, NoReturn

import click

from lowkiq.app_loader import AppLoadError, load_app
from lowkiq.default_redis import EMBEDDED_ENV


def require_option(help_text: str) -> Callable[[Any], Any]:
    """The ``-r/--require PATH_OR_MODULE`` option of the commands that load an app."""
    return click.option(
        "-r", "--require", "app", required=True, metavar="PATH_OR_MODULE", help=help_text
    )


def _ask_for_embedded(ctx: click.Context, param: click.Parameter, value: bool) -> bool:
    if value:
        # The environment, so that processes this one starts use it as well.
        os.environ[EMBEDDED_ENV] = "1"
    return value


def embedded_redis_option() -> Callable[[Any], Any]:
    """``--embedded-redis``: with REDIS_URL unset, use the embedded development server."""
    return click.option(
        "--embedded-redis",
        is_flag=True,
        expose_value=False,
        is_eager=True,
        callback=_ask_for_embedded,
        help=f"With REDIS_URL unset, run on the embedded development Redis server in "
        f"./.lowkiq/ (needs lowkiq[embedded]) instead of redis://localhost:6379/0 "
        f"[env {EMBEDDED_ENV}=1].",
    )


def fail(message: str) -> NoReturn:
    """Print a one-line error and exit with status 2."""
    click.echo(f"Error: {message}", err=True)
    sys.exit(2)


def load_app_or_exit(app: str) -> None:
    """:func:`~lowkiq.app_loader.load_app`, or a one-line error naming the app and exit 2."""
    try:
        load_app(app)
    except AppLoadError as exc:
        fail(str(exc))


class LazyGroup(click.Group):
    """A command group whose ``lazy_commands`` (name -> ``"module:attribute"``) are imported
    only when run or listed, so ``lowkiq worker`` never loads the dashboard's Flask."""

    def __init__(self, *args: Any, lazy_commands: dict[str, str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy_commands = lazy_commands

    def list_commands(self, ctx: click.Context) -> list[str]:
        """Every command name, the lazy ones included."""
        return sorted({*super().list_commands(ctx), *self.lazy_commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        """The command ``cmd_name``, importing it when it is a lazy one."""
        target = self.lazy_commands.get(cmd_name)
        if target is None:
            return super().get_command(ctx, cmd_name)
        module, _, attribute = target.partition(":")
        command: click.Command = getattr(importlib.import_module(module), attribute)
        return command
