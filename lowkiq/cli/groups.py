"""``lowkiq groups ...``: operate one worker's groups (tenants) from a shell, as the
dashboard's groups table does: list them, pause, resume, delete one's queued jobs, give
one a concurrency cap and a rate of its own.  Thin glue over
:meth:`lowkiq.Worker.actions`; imported only when one of them runs."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from lowkiq.cli.support import (
    embedded_redis_option,
    fail,
    find_worker_or_exit,
    redis_call_or_exit,
    require_option,
)
from lowkiq.errors import LowkiqError

if TYPE_CHECKING:
    from lowkiq.storage.actions import Actions
    from lowkiq.storage.group_actions import GroupSettings, GroupState
    from lowkiq.worker import Worker

T = TypeVar("T")

_APP_HELP = "The app that defines WORKER: a .py file or a dotted module name."


def _options(command: Callable[..., Any]) -> Callable[..., Any]:
    """WORKER GROUP, ``-r/--require`` and ``--embedded-redis``."""
    command = embedded_redis_option()(command)
    command = require_option(_APP_HELP)(command)
    command = click.argument("group")(command)
    return click.argument("worker_name", metavar="WORKER")(command)


def _run(worker: type[Worker], action: Callable[[Actions], T]) -> T:
    """``action(worker.actions())``, or a one-line error (Redis away, an unknown group, a
    bad value)."""
    try:
        return redis_call_or_exit(lambda: action(worker.actions()))
    except LowkiqError as exc:
        fail(str(exc))


def _limits(worker: type[Worker], settings: GroupSettings) -> str:
    """A group's cap and rate, each its own or the worker's."""
    if settings.concurrency is not None:
        cap = f"at most {settings.concurrency} batches at once (its own)"
    elif worker.group_concurrency is not None:
        cap = f"at most {worker.group_concurrency} batches at once (the worker's)"
    else:
        cap = "no cap"
    if settings.rate is not None:
        rate = f"rate {settings.rate.describe()} (its own)"
    else:
        code = worker.current_rate_limit()
        rate = (
            f"rate {code.describe()} (the worker's)"
            if code is not None and code.per_group
            else "no rate limit"
        )
    return f"{cap}, {rate}"


def _state_line(worker: type[Worker], state: GroupState) -> str:
    status = "paused" if state.paused else "running"
    return (
        f"{worker.__name__} group {state.group!r}: {status}; {state.queued} queued, "
        f"{state.in_flight} in flight; {_limits(worker, state)}"
    )


@click.group("groups")
def groups() -> None:
    """Operate the groups (tenants) of one worker: list, pause, resume, delete, limits.

    Every worker process obeys a change within a second.  A group is named as its
    jobs name it; a group the worker does not know (no queued or running job,
    nothing set for it) is refused, and nothing changes.
    """


@groups.command("list")
@click.argument("worker_name", metavar="WORKER")
@require_option(_APP_HELP)
@embedded_redis_option()
@click.option(
    "--limit",
    type=click.IntRange(min=1),
    default=20,
    show_default=True,
    help="The groups with the most queued jobs to show.",
)
def list_groups(worker_name: str, app: str, limit: int) -> None:
    """List WORKER's groups with the most queued jobs, then those with a setting of
    their own (paused, a cap, a rate)."""
    worker = find_worker_or_exit(app, worker_name)
    rows = redis_call_or_exit(lambda: worker.queries().groups(limit))
    settings = _run(worker, lambda actions: actions.group_settings())
    shown: set[str] = set()
    for row in rows:
        name = row["name"]
        if name is None:
            click.echo(f"(no group): {row['length']} queued, {row['in_flight']} in flight")
            continue
        shown.add(name)
        own = settings.get(name)
        status = "paused" if own is not None and own.paused else "running"
        extra = f"; {_limits(worker, own)}" if own is not None and own != _plain(own) else ""
        click.echo(f"{name}: {status}; {row['length']} queued, {row['in_flight']} in flight{extra}")
    for name, own in settings.items():
        if name not in shown:
            status = "paused" if own.paused else "running"
            click.echo(f"{name}: {status}; {_limits(worker, own)}")
    if not rows and not settings:
        click.echo(f"{worker.__name__}: no groups")


def _plain(settings: GroupSettings) -> GroupSettings:
    """Settings with no cap and no rate of their own (for "is there more to show")."""
    return type(settings)(settings.paused, None, None)


@groups.command("show")
@_options
def show(worker_name: str, group: str, app: str) -> None:
    """Show GROUP of WORKER: paused or not, its queued and running jobs, its limits."""
    worker = find_worker_or_exit(app, worker_name)
    state = _run(worker, lambda actions: actions.group_state(group))
    click.echo(_state_line(worker, state))


@groups.command("pause")
@_options
def pause(worker_name: str, group: str, app: str) -> None:
    """Pause GROUP of WORKER: no new batch of it starts on any process (within a
    second); running batches finish, and its jobs stay queued until resumed."""
    worker = find_worker_or_exit(app, worker_name)
    changed = _run(worker, lambda actions: actions.pause_group(group))
    click.echo(f"{worker.__name__} group {group!r}: {'paused' if changed else 'already paused'}")


@groups.command("resume")
@_options
def resume(worker_name: str, group: str, app: str) -> None:
    """Resume GROUP of WORKER: its jobs start again."""
    worker = find_worker_or_exit(app, worker_name)
    changed = _run(worker, lambda actions: actions.resume_group(group))
    click.echo(f"{worker.__name__} group {group!r}: {'resumed' if changed else 'was not paused'}")


@groups.command("delete")
@_options
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def delete(worker_name: str, group: str, app: str, yes: bool) -> None:
    """Delete the queued jobs of GROUP of WORKER (fresh, retries, scheduled).

    Its running batches finish; dead jobs stay.  Asks first, unless --yes.
    """
    worker = find_worker_or_exit(app, worker_name)
    state = _run(worker, lambda actions: actions.group_state(group))
    if not yes:
        click.confirm(
            f"Delete the {state.queued} queued job(s) of group {group!r} of "
            f"{worker.__name__}? This cannot be undone.",
            abort=True,
        )
    count = _run(worker, lambda actions: actions.delete_group(group))
    click.echo(f"{worker.__name__} group {group!r}: {count} job{'s' if count != 1 else ''} deleted")


@groups.command("limits")
@_options
@click.option(
    "--concurrency",
    type=int,
    metavar="N",
    help="At most N batches of the group at once, over every process.",
)
@click.option(
    "--rate",
    metavar="LIMIT",
    help="At most LIMIT jobs of the group started: 10/s, 100/1.5s, 600/min, 5/h.",
)
@click.option("--burst", type=int, metavar="N", help="With --rate: jobs that may start at once.")
@click.option("--clear", is_flag=True, help="Back to the worker's cap and per-group rate.")
def limits(
    worker_name: str,
    group: str,
    app: str,
    concurrency: int | None,
    rate: str | None,
    burst: int | None,
    clear: bool,
) -> None:
    """Show or change GROUP's own concurrency cap and rate limit (instead of WORKER's
    group_concurrency and per-group rate_limit); an option left out stays as it is."""
    from lowkiq.limits.rate_limit import RateLimit

    worker = find_worker_or_exit(app, worker_name)
    if clear and (concurrency is not None or rate is not None):
        fail("give --clear alone, or --concurrency/--rate")
    if burst is not None and rate is None:
        fail("--burst goes with --rate")
    parsed = None
    if rate is not None:
        try:
            parsed = RateLimit.parse(rate, burst)
        except LowkiqError as exc:
            fail(str(exc))
    if clear:
        _run(worker, lambda actions: actions.clear_group_limits(group))
    state = _run(worker, lambda actions: actions.group_limits(group, concurrency, parsed))
    click.echo(_state_line(worker, state))
