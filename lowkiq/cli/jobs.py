"""``lowkiq jobs ...``: act on the jobs of one worker's queue or morgue from a shell, as the
dashboard's buttons do.  Thin glue over :meth:`lowkiq.Worker.actions`; imported only when
one of them runs."""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

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
    from lowkiq.storage.job_events import JobEvent
    from lowkiq.worker import Worker

_APP_HELP = "The app that defines WORKER: a .py file or a dotted module name."


def _options(command: Callable[..., Any]) -> Callable[..., Any]:
    """WORKER, ``-r/--require`` and ``--embedded-redis``: what every jobs command takes."""
    command = embedded_redis_option()(command)
    command = require_option(_APP_HELP)(command)
    return click.argument("worker_name", metavar="WORKER")(command)


def _ids_argument(command: Callable[..., Any]) -> Callable[..., Any]:
    return click.argument("ids", nargs=-1, metavar="[IDS]...")(command)


def _ids(given: Sequence[str], every: bool = False) -> list[str]:
    """The ids given (``-``: also those read from stdin, one a line), or a one-line error
    when there are none (and ``--all`` was not given instead)."""
    ids: list[str] = []
    for job_id in given:
        if job_id == "-":
            ids.extend(line.strip() for line in sys.stdin if line.strip())
        else:
            ids.append(job_id)
    if every and ids:
        fail("give IDS or --all, not both")
    if not ids and not every:
        fail("give the ids of the jobs (or - to read them from stdin, one a line)")
    return ids


def _run(worker: type[Worker], action: Callable[[Actions], int]) -> int:
    """``action(worker.actions())``, or a one-line error (Redis away, a bad id)."""
    try:
        return redis_call_or_exit(lambda: action(worker.actions()))
    except LowkiqError as exc:
        fail(str(exc))


def _run_all_or_given(
    worker: type[Worker],
    every: bool,
    on_all: Callable[[Actions], int],
    on_given: Callable[[Actions], int],
) -> int:
    """:func:`_run` of ``on_all`` with ``--all``, else of ``on_given``."""
    return _run(worker, on_all if every else on_given)


def _report(worker: type[Worker], count: int, done: str, ids: Sequence[str], where: str) -> None:
    jobs = f"{count} job{'s' if count != 1 else ''}"
    unmatched = len(set(ids)) - count
    note = f" ({unmatched} of the ids given {where})" if ids and unmatched > 0 else ""
    click.echo(f"{worker.__name__}: {jobs} {done}{note}")


@click.group("jobs")
def jobs() -> None:
    """Act on the jobs of one worker: delete, cancel, kill, perform now, retry, move,
    clear; read a tracked worker's job events (history, events).

    Queued jobs are changed, never a batch being performed (a running id's queued
    part is, its running batch is not), but by cancel, which asks the running
    perform to stop.  IDS may be `-` to read ids from stdin.
    """


@jobs.command("delete")
@_options
@_ids_argument
def delete(worker_name: str, ids: tuple[str, ...], app: str) -> None:
    """Delete these queued jobs of WORKER (fresh, retries, scheduled) with their payloads."""
    given = _ids(ids)
    worker = find_worker_or_exit(app, worker_name)
    count = _run(worker, lambda actions: actions.delete(given))
    _report(worker, count, "deleted", given, "are not queued")


@jobs.command("cancel")
@_options
@_ids_argument
def cancel(worker_name: str, ids: tuple[str, ...], app: str) -> None:
    """Cancel these ids of WORKER: their queued jobs are deleted, and their running
    perform, on whatever process runs it, sees current_batch().should_stop() within
    about a second; its cancelled jobs then end as cancelled (not failed, not retried)."""
    given = _ids(ids)
    worker = find_worker_or_exit(app, worker_name)
    count = _run(worker, lambda actions: actions.cancel(given))
    _report(worker, count, "cancelled", given, "are neither queued nor running")


@jobs.command("kill")
@_options
@_ids_argument
def kill(worker_name: str, ids: tuple[str, ...], app: str) -> None:
    """Move these queued jobs of WORKER, whole, to the morgue (its dead jobs)."""
    given = _ids(ids)
    worker = find_worker_or_exit(app, worker_name)
    count = _run(worker, lambda actions: actions.kill(given))
    _report(worker, count, "moved to the morgue", given, "are not queued")


@jobs.command("perform-now")
@_options
@_ids_argument
@click.option("--all", "every", is_flag=True, help="Every queued job not due yet.")
def perform_now(worker_name: str, ids: tuple[str, ...], app: str, every: bool) -> None:
    """Make these queued jobs of WORKER due now (their retry counts stay)."""
    given = _ids(ids, every)
    worker = find_worker_or_exit(app, worker_name)
    count = _run_all_or_given(
        worker,
        every,
        lambda actions: actions.perform_all_jobs_now(),
        lambda actions: actions.perform_now(given),
    )
    _report(worker, count, "made due now", given, "are not queued")


@jobs.command("retry")
@_options
@_ids_argument
@click.option("--all", "every", is_flag=True, help="Every dead job of WORKER.")
def retry(worker_name: str, ids: tuple[str, ...], app: str, every: bool) -> None:
    """Queue these dead jobs of WORKER up again, due now (retry count -1, error kept)."""
    given = _ids(ids, every)
    worker = find_worker_or_exit(app, worker_name)
    count = _run_all_or_given(
        worker,
        every,
        lambda actions: actions.morgue_queue_up_all_jobs(),
        lambda actions: actions.morgue_queue_up(given),
    )
    _report(worker, count, "queued up", given, "are not dead")


@jobs.command("move")
@_options
@_ids_argument
@click.option("--to", "target_name", required=True, metavar="WORKER", help="The worker to move to.")
def move(worker_name: str, ids: tuple[str, ...], app: str, target_name: str) -> None:
    """Move these queued jobs of WORKER to another worker's queue, due now; payloads keep
    their scores and merge with a queued job of the same id there."""
    given = _ids(ids)
    worker = find_worker_or_exit(app, worker_name)
    target = find_worker_or_exit(app, target_name)
    count = _run(worker, lambda actions: actions.move(given, to=target))
    _report(worker, count, f"moved to {target.__name__}", given, "are not queued")


@jobs.command("clear")
@_options
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def clear(worker_name: str, app: str, yes: bool) -> None:
    """Delete every queued job of WORKER (fresh, retries, scheduled).

    Batches being performed finish; the morgue stays.  Asks first, unless --yes.
    """
    worker = find_worker_or_exit(app, worker_name)
    if not yes:
        length = redis_call_or_exit(lambda: worker.metrics()["length"])
        click.confirm(
            f"Delete all {length} queued job(s) of {worker.__name__}? This cannot be undone.",
            abort=True,
        )
    count = _run(worker, lambda actions: actions.clear())
    _report(worker, count, "deleted", (), "")


def _event_line(event: JobEvent) -> str:
    """One event as a line: UTC time, id, event, details, process and fence."""
    at = (
        time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(event.at))
        + f".{int(event.at * 1000) % 1000:03d}"
    )
    details = " ".join(f"{key}={value}" for key, value in event.details.items() if value != "")
    lease = f" by {event.process} (fence {event.fence})" if event.process else ""
    return f"{at} {event.id} {event.event}{' ' + details if details else ''}{lease}"


def _untracked(worker: type[Worker]) -> None:
    if not worker.track:
        fail(f"{worker.__name__} records no events: set track = True on it")


@jobs.command("history")
@_options
@click.argument("job_id", metavar="ID")
def history(worker_name: str, job_id: str, app: str) -> None:
    """Print the recorded events of job ID of WORKER, oldest first (Worker.track)."""
    worker = find_worker_or_exit(app, worker_name)
    _untracked(worker)
    events = redis_call_or_exit(lambda: worker.history(job_id))
    if not events:
        click.echo(f"{worker.__name__}: no events of {job_id!r} are kept")
    for event in events:
        click.echo(_event_line(event))


@jobs.command("events")
@_options
@click.option(
    "--since",
    type=float,
    default=None,
    metavar="SECONDS",
    help="Only the events of the last SECONDS seconds.",
)
@click.option("--follow", "-f", is_flag=True, help="Then print each new event as it comes.")
def events(worker_name: str, app: str, since: float | None, follow: bool) -> None:
    """Print the recorded events of every job of WORKER in time order (Worker.track)."""
    from lowkiq import events as read_events

    worker = find_worker_or_exit(app, worker_name)
    _untracked(worker)
    start = None if since is None else time.time() - since

    def echo_all() -> None:
        for event in read_events(worker, start, follow):
            click.echo(_event_line(event))

    with contextlib.suppress(KeyboardInterrupt):  # --follow ends on Ctrl-C
        redis_call_or_exit(echo_all)
