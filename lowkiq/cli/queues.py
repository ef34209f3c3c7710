"""``lowkiq info`` and ``lowkiq enqueue``: look at the queues and put a job in one from
a shell.  Thin glue over :mod:`lowkiq.cli.info` and ``Worker.perform_async``; imported only
when one of them runs."""

from __future__ import annotations

import json
from typing import Any

import click

from lowkiq.cli.support import (
    embedded_redis_option,
    fail,
    find_worker_or_exit,
    load_app_or_exit,
    redis_call_or_exit,
    require_option,
)
from lowkiq.errors import LowkiqError


def _number(option: str, value: str | None) -> float | None:
    """``value`` as a float, or a one-line error (click's own takes three lines)."""
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        fail(f"{option} must be a number, got {value!r}")


_APP_HELP = "The app to load: a .py file or a dotted module name (it sets lowkiq.settings)."


@click.command("info")
@require_option(_APP_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print the figures as one JSON document.")
@embedded_redis_option()
def info(app: str, as_json: bool) -> None:
    """Show every worker's queue and the live worker processes.

    Per worker: queued jobs (fresh and retries), dead ones, busy ones, the lag
    (seconds since the earliest due job), processed and failed counts, and how
    many of its shards a live process serves.  Then each live process: threads,
    shards held, batches running, time up, quiet or running.
    """
    load_app_or_exit(app)
    from lowkiq.cli.info import read_info, render_info

    document = redis_call_or_exit(read_info)
    if as_json:
        click.echo(json.dumps(document, indent=2, sort_keys=True))
    else:
        click.echo(render_info(document))


@click.command("enqueue")
@click.argument("worker_name", metavar="WORKER")
@click.option("--id", "job_id", required=True, help="The job's id (stored as a string).")
@click.option(
    "--payload",
    metavar="JSON",
    help='The payload, as JSON: \'{"status": "paid"}\', \'42\', \'"text"\' [default: ""].',
)
@click.option(
    "--delay",
    callback=lambda ctx, param, value: _number("--delay", value),
    help="Seconds from now (on Redis's clock) before the job is due [default: due now].",
)
@click.option(
    "--score",
    callback=lambda ctx, param, value: _number("--score", value),
    help="The payload's score: a version or a time; orders the payloads of one id [default: now].",
)
@click.option("--group", help="The job's group (a tenant): groups take turns [default: none].")
@require_option("The app that defines WORKER: a .py file or a dotted module name.")
@embedded_redis_option()
def enqueue(
    worker_name: str,
    job_id: str,
    payload: str | None,
    delay: float | None,
    score: float | None,
    group: str | None,
    app: str,
) -> None:
    """Enqueue one job for WORKER (a class of the app's settings.workers).

    As WORKER.perform_async([{"id": ID, "payload": ..., "delay": ..., "score": ...,
    "group": ...}]):
    it merges with a queued job of the same id.  A bad job is refused and nothing
    is enqueued.
    """
    job: dict[str, Any] = {"id": job_id}
    if payload is not None:
        try:
            job["payload"] = json.loads(payload)
        except ValueError as exc:
            fail(f"--payload is not JSON: {exc}")
    if delay is not None:
        job["delay"] = delay
    if score is not None:
        job["score"] = score
    if group is not None:
        job["group"] = group
    worker = find_worker_or_exit(app, worker_name)

    def push() -> None:
        worker.perform_async([job])

    try:
        redis_call_or_exit(push)
    except LowkiqError as exc:  # InvalidJob, RedisUnavailable, RedisFull
        fail(str(exc))
    due = f"due in {delay:g}s" if delay else "due now"
    click.echo(f"enqueued {worker.__name__} id {job_id!r}, {due}")
