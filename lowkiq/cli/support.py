"""What the ``lowkiq`` commands share: the ``-r`` option, the ``--embedded-redis`` flag,
loading the app, finding a worker and calling Redis, or exiting with a one-line error
(exit status 2)."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click

from lowkiq.cli.app_loader import AppLoadError, load_app
from lowkiq.clients.connection import check_url
from lowkiq.clients.default_redis import EMBEDDED_ENV, unreachable_hint
from lowkiq.errors import ConfigurationError

if TYPE_CHECKING:
    from lowkiq.worker import Worker

T = TypeVar("T")


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


def check_redis_url_or_exit() -> None:
    """A one-line error and exit 2 when ``REDIS_URL`` is set but is no Redis URL (a wrong
    scheme, a database or port that is no number): before anything connects."""
    url = os.environ.get("REDIS_URL")
    if url:
        try:
            check_url(url)
        except ConfigurationError as exc:
            fail(str(exc))


def load_app_or_exit(app: str) -> None:
    """:func:`~lowkiq.cli.app_loader.load_app`, or a one-line error naming the app and exit 2;
    a bad ``REDIS_URL`` is refused first (:func:`check_redis_url_or_exit`)."""
    check_redis_url_or_exit()
    try:
        load_app(app)
    except AppLoadError as exc:
        fail(str(exc))


def find_worker_or_exit(app: str, name: str) -> type[Worker]:
    """Load ``app`` and return its worker class ``name`` (a class of ``settings.workers``,
    by class or queue name), or a one-line error listing the workers."""
    load_app_or_exit(app)
    return select_workers_or_exit([name])[0]


def select_workers_or_exit(names: Sequence[str]) -> list[type[Worker]]:
    """The workers of ``settings.workers`` named ``names`` (class or queue names), in
    ``names``' order, or a one-line error naming the unknown ones and the workers."""
    import lowkiq

    workers = lowkiq.settings.workers
    by_name = {worker.__name__: worker for worker in workers}
    for worker in workers:
        by_name.setdefault(worker.queue_name, worker)
    unknown = [name for name in names if name not in by_name]
    if unknown:
        known = ", ".join(w.__name__ for w in workers) or "none: the app sets no settings.workers"
        listed = ", ".join(map(repr, unknown))
        fail(f"no worker {listed} in settings.workers (workers: {known})")
    return list(dict.fromkeys(by_name[name] for name in names))


def redis_call_or_exit(call: Callable[[], T]) -> T:
    """``call()``, or a one-line error when Redis does not answer or refuses."""
    import redis as redis_client

    try:
        return call()
    except redis_client.ConnectionError as exc:
        import lowkiq

        hint = unreachable_hint(lowkiq.settings.redis)
        fail(f"Redis did not answer: {exc}" + (f" ({hint})" if hint else ""))
    except redis_client.RedisError as exc:
        fail(f"Redis refused: {type(exc).__name__}: {exc}")
    except ConfigurationError as exc:
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
