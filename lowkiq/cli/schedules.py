"""``lowkiq schedules ...``: list the periodic jobs and change them at run time, on every
process, as the dashboard's Schedules page does.  Thin glue over
:mod:`lowkiq.periodic.control`; imported only when one of them runs."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar

import click

from lowkiq.cli.support import (
    embedded_redis_option,
    fail,
    load_app_or_exit,
    redis_call_or_exit,
    require_option,
)
from lowkiq.errors import LowkiqError

T = TypeVar("T")

_APP_HELP = (
    "The app that sets settings.workers and settings.schedules: a .py file or a dotted module name."
)


def _options(command: Callable[..., Any]) -> Callable[..., Any]:
    """``-r/--require`` and ``--embedded-redis``: what every schedules command takes."""
    command = embedded_redis_option()(command)
    command = require_option(_APP_HELP)(command)
    return command


def _run(app: str, call: Callable[[], T]) -> T:
    """Load ``app``, then ``call()``, or a one-line error (a bad value, an unknown
    schedule or worker, Redis away)."""
    load_app_or_exit(app)
    try:
        return redis_call_or_exit(call)
    except LowkiqError as exc:
        fail(str(exc))


def _every(value: str | None) -> timedelta | None:
    from lowkiq.periodic.control import ScheduleError, parse_every

    if value is None:
        return None
    try:
        return parse_every(value)
    except ScheduleError as exc:
        fail(f"--every: {exc}")


def _when(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(seconds))


def _ticks(info: Any) -> str:
    if info.every is not None:
        return f"every {info.every}"
    return f"cron {info.cron} ({info.timezone or 'UTC'})"


def _state(info: Any) -> str:
    if info.removed:
        return "removed"
    state = "paused" if info.paused else "active"
    if info.changed:
        state += ", changed"
    return state


@click.group("schedules", invoke_without_command=True)
@click.pass_context
@embedded_redis_option()
@require_option(_APP_HELP, required=False)
@click.option("--json", "as_json", is_flag=True, help="Print the list as one JSON document.")
def schedules(ctx: click.Context, app: str | None, as_json: bool) -> None:
    """List the periodic jobs, or change one on every process without a restart.

    Without a command: every schedule (settings.schedules with what was changed
    at run time, then those added at run time), its worker, ticks, state, next
    and last run, and where it comes from.  A change is stored in Redis, wins
    over settings.schedules, and is followed by every worker process within a
    second; each tick is still enqueued once.
    """
    if ctx.invoked_subcommand is not None:
        return
    if not app:
        fail("give the app: -r/--require PATH_OR_MODULE, or set LOWKIQ_APP")
    import lowkiq

    listed = _run(app, lowkiq.schedules)
    if as_json:
        document = [
            {
                "name": info.name,
                "worker": info.worker,
                "cron": info.cron,
                "every_seconds": None if info.every is None else info.every.total_seconds(),
                "timezone": info.timezone,
                "catch_up": info.catch_up,
                "paused": info.paused,
                "removed": info.removed,
                "source": info.source,
                "changed": info.changed,
                "next_run": info.next_run,
                "last_run": info.last_run,
            }
            for info in listed
        ]
        click.echo(json.dumps(document, indent=2))
        return
    if not listed:
        click.echo("no schedules (settings.schedules is empty and none was added)")
        return
    rows = [("NAME", "WORKER", "TICKS", "STATE", "NEXT RUN", "LAST RUN", "SOURCE")]
    for info in listed:
        rows.append(
            (
                info.name,
                info.worker,
                _ticks(info),
                _state(info),
                _when(info.next_run),
                _when(info.last_run),
                info.source,
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        click.echo(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        )


@schedules.command("pause")
@click.argument("name")
@_options
def pause(name: str, app: str) -> None:
    """Pause schedule NAME on every process: it enqueues nothing until resumed."""
    from lowkiq.periodic import control

    changed = _run(app, lambda: control.pause(name))
    click.echo(f"schedule {name!r} {'paused' if changed else 'was already paused'}")


@schedules.command("resume")
@click.argument("name")
@_options
def resume(name: str, app: str) -> None:
    """Resume schedule NAME: it ticks again from its first tick after now (the ticks
    while it was paused are not caught up)."""
    from lowkiq.periodic import control

    changed = _run(app, lambda: control.resume(name))
    click.echo(f"schedule {name!r} {'resumed' if changed else 'was not paused'}")


def _timing_options(command: Callable[..., Any]) -> Callable[..., Any]:
    command = click.option(
        "--timezone", help="The IANA timezone the cron expression is read in [default: UTC]."
    )(command)
    command = click.option(
        "--every",
        metavar="PERIOD",
        help="A period: seconds (90) or a number with a unit (500ms, 30s, 5min, 2h, 1d); "
        "at least 1 second.",
    )(command)
    return click.option(
        "--cron", metavar="EXPR", help="A 5-field cron expression or an @alias (@hourly...)."
    )(command)


@schedules.command("change")
@click.argument("name")
@_timing_options
@_options
def change(name: str, cron: str | None, every: str | None, timezone: str | None, app: str) -> None:
    """Change when schedule NAME ticks (--cron or --every), on every process, from the
    first tick of the new timing after now."""
    from lowkiq.periodic import control

    period = _every(every)
    _run(app, lambda: control.change(name, cron=cron, every=period, timezone=timezone))
    ticks = f"every {period}" if period is not None else f"cron {cron} ({timezone or 'UTC'})"
    click.echo(f"schedule {name!r} now ticks {ticks}")


@schedules.command("add")
@click.argument("name")
@click.argument("worker_name", metavar="WORKER")
@_timing_options
@click.option(
    "--payload",
    metavar="JSON",
    help='The job\'s payload, as JSON: \'{"kind": "daily"}\' [default: ""].',
)
@click.option(
    "--catch-up",
    type=click.Choice(["last", "none", "all"]),
    default="last",
    show_default=True,
    help="What the ticks missed while no worker process ran get.",
)
@_options
def add(
    name: str,
    worker_name: str,
    cron: str | None,
    every: str | None,
    timezone: str | None,
    payload: str | None,
    catch_up: str,
    app: str,
) -> None:
    """Add schedule NAME: a job of WORKER (a class of settings.workers) at every tick,
    from the first one after now, on every process that serves WORKER."""
    from lowkiq.periodic import control

    value: Any = ""
    if payload is not None:
        try:
            value = json.loads(payload)
        except ValueError as exc:
            fail(f"--payload is not JSON: {exc}")
    period = _every(every)
    _run(
        app,
        lambda: control.add(
            name,
            worker_name,
            cron=cron,
            every=period,
            timezone=timezone,
            payload=value,
            catch_up=catch_up,
        ),
    )
    click.echo(f"schedule {name!r} added on {worker_name}")


@schedules.command("remove")
@click.argument("name")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@_options
def remove(name: str, yes: bool, app: str) -> None:
    """Remove schedule NAME on every process.  A schedule of settings.schedules stays
    removed until `lowkiq schedules reset NAME`.  Asks first, unless --yes."""
    from lowkiq.periodic import control

    if not yes:
        click.confirm(f"Remove schedule {name!r} on every worker process?", abort=True)
    _run(app, lambda: control.remove(name))
    click.echo(f"schedule {name!r} removed")


@schedules.command("reset")
@click.argument("name", required=False)
@click.option("--all", "every", is_flag=True, help="Every schedule changed at run time.")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@_options
def reset(name: str | None, every: bool, yes: bool, app: str) -> None:
    """Drop what was changed at run time of schedule NAME (or of all, --all): a schedule
    of settings.schedules ticks as the settings say again (a removed one is back),
    one added at run time is gone.  Asks first, unless --yes."""
    from lowkiq.periodic import control

    if (name is None) == (not every):
        fail("give NAME or --all (not both)")
    if not yes:
        what = "every schedule" if every else f"schedule {name!r}"
        click.confirm(f"Reset {what} to settings.schedules?", abort=True)
    names = _run(app, lambda: control.reset(name))
    click.echo(f"reset: {', '.join(names)}" if names else "nothing was changed at run time")
