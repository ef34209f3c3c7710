"""``lowkiq status`` and ``lowkiq quiet``: this host's worker processes, for probes that
exec a command, deploy scripts and a container's ``preStop`` hook.

Thin glue over :mod:`lowkiq.health.host`; imported only when one of them runs.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from functools import partial
from typing import Any, NoReturn, TypeVar

import click
from click.core import ParameterSource

from lowkiq.cli.support import embedded_redis_option, fail, load_app_or_exit, require_option
from lowkiq.health.host import (
    Status,
    Wanted,
    check_url,
    describe,
    select,
    settled,
    status,
    this_host,
)

T = TypeVar("T")

#: Seconds between two readings of the membership while ``lowkiq quiet --wait`` waits.
WAIT_STEP = 0.2

_APP_HELP = "The app to load: a .py file or a dotted module name (it sets lowkiq.settings)."


def _pid_option() -> Callable[[Any], Any]:
    return click.option(
        "--pid",
        type=click.IntRange(min=1),
        help="Only the process with this pid on this host (in a container whose "
        "entrypoint is the worker: 1).",
    )


def _process_id_option() -> Callable[[Any], Any]:
    return click.option(
        "--process-id",
        metavar="ID",
        help="Only the process with this membership id (host:pid:random, as the "
        "dashboard and the health endpoints show it), on any host.",
    )


def _from_environment(name: str) -> bool:
    """Whether the current command's parameter ``name`` came from the environment."""
    source = click.get_current_context().get_parameter_source(name)
    return source is ParameterSource.ENVIRONMENT


def _unhealthy(reason: str) -> NoReturn:
    click.echo(f"Error: {reason}", err=True)
    sys.exit(1)


def _read(call: Callable[[], T]) -> T:
    """``call()``, or exit 1 with a one-line error when Redis does not answer."""
    import redis

    try:
        return call()
    except redis.RedisError as exc:
        _unhealthy(f"Redis did not answer: {type(exc).__name__}: {exc}")


@click.command("status")
@require_option(_APP_HELP, required=False)
@_pid_option()
@_process_id_option()
@click.option(
    "--health-url",
    metavar="URL",
    help="Instead of reading the membership, GET a worker's health endpoint "
    "(e.g. http://127.0.0.1:8080/ready): 0 on 200.",
)
@click.option(
    "--processes",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="How many worker processes this host runs: fewer registered is exit 1.",
)
@embedded_redis_option()
def status_command(
    app: str | None,
    pid: int | None,
    process_id: str | None,
    health_url: str | None,
    processes: int,
) -> None:
    """Exit 0 when this host's worker processes are alive and registered.

    Reads the membership in Redis: a process is alive and registered while
    its heartbeat reaches Redis (within lease_ttl).  Prints one line per
    process; otherwise, or when Redis does not answer, prints the reason and
    exits 1.  --pid or --process-id checks one process; --processes N wants N
    of this host's.  For probes that exec a command and for scripts.
    """
    result: Status
    if health_url is not None:
        if _from_environment("app"):
            app = None  # LOWKIQ_APP is set for the other commands: --health-url needs no app
        if app is not None or pid is not None or process_id is not None or processes > 1:
            fail("--health-url goes without -r, --pid, --process-id and --processes")
        result = check_url(health_url)
    else:
        if app is None:
            fail("give -r/--require APP, or set LOWKIQ_APP (or --health-url URL)")
        load_app_or_exit(app)
        import lowkiq

        wanted = Wanted(this_host(), pid, process_id)
        if processes > 1 and (pid is not None or process_id is not None):
            fail("--processes counts this host's processes: not with --pid or --process-id")
        result = status(_read(lowkiq.processes), wanted, processes)
    for process in result.processes:
        click.echo(describe(process))
    if not result.ok:
        _unhealthy(result.reason)
    if health_url is not None:
        click.echo(f"{health_url}: 200")


@click.command("quiet")
@require_option(_APP_HELP)
@_pid_option()
@_process_id_option()
@click.option(
    "--wait",
    is_flag=True,
    help="Wait until they hold no shard and perform no batch (their shards handed over).",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0),
    default=60.0,
    show_default=True,
    help="Seconds --wait waits at most; exit 1 when they have not handed over by then.",
)
@embedded_redis_option()
def quiet_command(
    app: str, pid: int | None, process_id: str | None, wait: bool, timeout: float
) -> None:
    """Quiet this host's worker processes: they take no new batches, finish the
    running ones and hand their shards to the other processes, staying up.

    As the dashboard's quiet button.  For a Kubernetes preStop hook (with
    --pid 1 --wait) or a deploy script: TERM then stops a process that holds
    nothing.  --pid or --process-id quiets one process.  Exit 1 when no such
    process is registered, or --wait timed out.
    """
    load_app_or_exit(app)
    import lowkiq

    wanted = Wanted(this_host(), pid, process_id)
    chosen = select(_read(lowkiq.processes), wanted)
    if not chosen:
        _unhealthy(f"no {wanted.describe()} is registered")
    for process in chosen:
        if _read(partial(lowkiq.command_process, process.id, "quiet")):
            click.echo(f"quiet: {process.id}")
    if not wait:
        return
    deadline = time.monotonic() + timeout
    while True:
        found = _read(lowkiq.processes)
        busy = [p for p in chosen if not settled(found.find(p.id))]
        if not busy:
            click.echo("handed over: no shard held, no batch running")
            return
        if time.monotonic() >= deadline:
            still = "; ".join(describe(p) for p in map(found.find, (p.id for p in busy)) if p)
            _unhealthy(f"not handed over within {timeout:g}s: {still}")
        time.sleep(WAIT_STEP)
