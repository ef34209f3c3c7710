"""What the ``lowkiq`` commands share: the ``-r`` option (or ``LOWKIQ_APP``), the
``--traceback`` and ``--embedded-redis`` flags, loading the app, finding a worker and
calling Redis, or exiting with a one-line error (exit status 2)."""

from __future__ import annotations

import difflib
import errno
import importlib
import logging
import os
import socket
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click

from lowkiq.cli.app_loader import APP_ENV, AppLoadError, load_app
from lowkiq.clients.connection import check_url
from lowkiq.clients.default_redis import EMBEDDED_ENV, unreachable_hint
from lowkiq.errors import ConfigurationError

if TYPE_CHECKING:
    from lowkiq.worker import Worker

T = TypeVar("T")


def _app_given(ctx: click.Context, param: click.Parameter, value: str | None) -> str:
    if not value:
        fail(f"give the app: -r/--require PATH_OR_MODULE, or set {APP_ENV}")
    return value


def require_option(help_text: str, required: bool = True) -> Callable[[Any], Any]:
    """The ``-r/--require PATH_OR_MODULE`` option (else ``LOWKIQ_APP``) of the commands
    that load an app, with their ``--traceback`` flag."""
    option = click.option(
        "-r",
        "--require",
        "app",
        callback=_app_given if required else None,
        envvar=APP_ENV,
        show_envvar=True,
        metavar="PATH_OR_MODULE",
        help=help_text,
    )

    def decorate(command: Any) -> Any:
        return option(traceback_option()(command))

    return decorate


#: The key of ``click.Context.meta`` that holds whether ``--traceback`` was given.
TRACEBACK_META = "lowkiq.traceback"


def _ask_for_traceback(ctx: click.Context, param: click.Parameter, value: bool) -> bool:
    ctx.meta[TRACEBACK_META] = value
    return value


def _traceback_asked() -> bool:
    ctx = click.get_current_context(silent=True)
    return bool(ctx is not None and ctx.meta.get(TRACEBACK_META))


def traceback_option() -> Callable[[Any], Any]:
    """``--traceback``: when the app fails to load, print its full traceback too."""
    return click.option(
        "--traceback",
        is_flag=True,
        expose_value=False,
        callback=_ask_for_traceback,
        help="When the app raises while it is loaded, print the full traceback before the "
        "one-line error (also shown at --log-level debug).",
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


def check_port_free_or_exit(host: str, port: int, what: str) -> None:
    """A one-line error and exit 2 when ``host:port`` cannot be listened on (a port in use,
    an address not of this host), before a server retries binding it for seconds."""
    if port == 0:
        return
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(address)
    except OSError as exc:
        hint = "another with --port" if exc.errno == errno.EADDRINUSE else "--host"
        fail(f"cannot serve {what} on {host}:{port}: {exc.strerror or exc} (check {hint})")


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
        shown = exc.traceback_text()
        if shown and (_traceback_asked() or logging.getLogger().isEnabledFor(logging.DEBUG)):
            click.echo(shown.rstrip("\n"), err=True)
        elif shown:
            fail(f"{exc}; --traceback shows the full traceback")
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
        guesses = [guess for name in unknown if (guess := closest_worker(name, by_name))]
        guessed = f"did you mean {' or '.join(map(repr, guesses))}? " if guesses else ""
        fail(f"no worker {listed} in settings.workers ({guessed}workers: {known})")
    return list(dict.fromkeys(by_name[name] for name in names))


def closest_worker(name: str, by_name: dict[str, type[Worker]]) -> str | None:
    """The class name of the worker whose class or queue name is closest to ``name``
    (case aside; a name it begins is close), or ``None`` when none is close."""
    lowered = {known.lower(): worker.__name__ for known, worker in by_name.items()}
    given = name.lower()
    found = difflib.get_close_matches(given, list(lowered), n=1, cutoff=0.6)
    found = found or [known for known in lowered if given and known.startswith(given)][:1]
    return lowered[found[0]] if found else None


def redis_call_or_exit(call: Callable[[], T]) -> T:
    """``call()``, or a one-line error when Redis does not answer or refuses."""
    import redis as redis_client
    from redis.exceptions import RedisClusterException

    try:
        return call()
    except (redis_client.ConnectionError, RedisClusterException) as exc:
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
