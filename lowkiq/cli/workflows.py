"""``lowkiq workflows [ID]``: the workflows from a shell, as the dashboard's Workflows
pages show them (the list, newest first; one workflow's status, counts, callbacks and
held calls), and its actions: ``--cancel``, ``--release-held``, ``--delete-held``.
Thin glue over :mod:`lowkiq.workflows.summary` and :class:`lowkiq.WorkflowRef`;
imported only when it runs."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import click

from lowkiq.cli.support import (
    embedded_redis_option,
    fail,
    load_app_or_exit,
    redis_call_or_exit,
    require_option,
)
from lowkiq.errors import LowkiqError

if TYPE_CHECKING:
    from lowkiq.workflows.held import HeldCall
    from lowkiq.workflows.summary import WorkflowSummary

T = TypeVar("T")

_APP_HELP = (
    "The app that sets lowkiq.settings (its Redis, its codec): a .py file or a dotted "
    "module name; without it, REDIS_URL and the default settings."
)
#: Job ids of one held call printed.
HELD_IDS_SHOWN = 10


def _run(call: Callable[[], T]) -> T:
    """``call()``, or a one-line error (Redis away, an unknown workflow)."""
    try:
        return redis_call_or_exit(call)
    except LowkiqError as exc:
        fail(str(exc))


def _when(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(seconds))


def _table(rows: Sequence[Sequence[str]]) -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        click.echo(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        )


def _list(page: int, limit: int, as_json: bool) -> None:
    import lowkiq
    from lowkiq.workflows import summary

    def read() -> tuple[int, list[WorkflowSummary]]:
        client = lowkiq.settings.client()
        return summary.count(client), summary.page(client, (page - 1) * limit, limit)

    total, listed = _run(read)
    if as_json:
        document = {
            "total": total,
            "page": page,
            "limit": limit,
            "workflows": [wf.as_dict() for wf in listed],
        }
        click.echo(json.dumps(document, indent=2))
        return
    if not listed:
        click.echo(f"no workflows on page {page} (there are {total})" if total else "no workflows")
        return
    header = "ID STATUS PENDING DONE FAILED DEAD DISCARDED TOTAL CREATED COMPLETED HELD"
    rows: list[list[str]] = [header.split()]
    for wf in listed:
        counts = wf.status
        figures = (counts.pending, counts.done, counts.failed, counts.dead, counts.discarded)
        rows.append(
            [wf.id, wf.label, *map(str, figures), str(counts.total)]
            + [_when(wf.created_at), _when(wf.completed_at), str(wf.held)]
        )
    _table(rows)
    pages = -(-total // limit)
    if pages > 1:
        click.echo(f"page {page} of {pages} ({total} workflows); --page N for another")


def _held_dict(call: HeldCall) -> dict[str, Any]:
    return {
        "queue": call.queue,
        "jobs": [job[0] for job in call.jobs],
        "then_after": list(call.after),
    }


def _show(workflow_id: str, as_json: bool) -> None:
    import lowkiq
    from lowkiq.workflows import summary

    def read() -> tuple[WorkflowSummary | None, list[HeldCall]]:
        client = lowkiq.settings.client()
        found = summary.summary(client, workflow_id)
        return found, (summary.held_calls(client, workflow_id) if found else [])

    found, held = _run(read)
    if found is None:
        fail(f"no workflow {workflow_id!r} (never opened, or expired)")
    if as_json:
        document = found.as_dict()
        document["held_calls"] = [_held_dict(call) for call in held]
        click.echo(json.dumps(document, indent=2))
        return
    counts = found.status
    cancelled = " (cancelled)" if found.cancelled and found.phase in ("open", "closed") else ""
    click.echo(f"workflow {found.id}: {found.label}{cancelled}")
    click.echo(
        f"members: pending {counts.pending}, done {counts.done}, failed {counts.failed}, "
        f"dead {counts.dead}, discarded {counts.discarded} (total {counts.total})"
    )
    click.echo(f"created: {_when(found.created_at)}")
    click.echo(f"closed: {_when(found.closed_at)}")
    click.echo(f"completed: {_when(found.completed_at)}")
    if found.callbacks:
        click.echo("callbacks:")
        for callback in found.callbacks:
            state = "enqueued" if callback.fired else "not enqueued"
            click.echo(f"  {callback.kind}  {callback.worker}  {state}")
    else:
        click.echo("callbacks: none")
    click.echo(f"held calls: {len(held)}")
    for call in held:
        ids = [job[0] for job in call.jobs]
        shown = ", ".join(ids[:HELD_IDS_SHOWN])
        more = f" ... {len(ids) - HELD_IDS_SHOWN} more" if len(ids) > HELD_IDS_SHOWN else ""
        then = f" (then after {', '.join(call.after)})" if call.after else ""
        click.echo(
            f"  {call.queue}  {len(ids)} job{'s' if len(ids) != 1 else ''}: {shown}{more}{then}"
        )


def _act(workflow_id: str, action: str, yes: bool) -> None:
    import lowkiq
    from lowkiq.workflows import summary

    found = _run(lambda: summary.summary(lowkiq.settings.client(), workflow_id))
    if found is None:
        fail(f"no workflow {workflow_id!r} (never opened, or expired)")
    ref = lowkiq.workflow(workflow_id)
    if action == "cancel":
        if found.phase in ("complete", "expired"):
            fail(f"workflow {workflow_id!r} is {found.label}: nothing to cancel")
        if not yes:
            deleted = (
                "it is still open: its members are known only to the block running it, so "
                "none is deleted; it completes now with those that ended, the others are "
                "not waited for (queued, they still run)"
                if found.phase == "open"
                else "its queued members are deleted"
            )
            click.confirm(
                f"Cancel workflow {workflow_id!r}? {deleted}; it completes now without "
                "succeeding (members not ended count as discarded, on_success never runs, "
                "jobs held after it stay held).",
                abort=True,
            )
        dropped = _run(ref.cancel)
        click.echo(
            f"workflow {workflow_id!r} cancelled: {dropped} queued member payload"
            f"{'s' if dropped != 1 else ''} deleted"
        )
    elif action == "release-held":
        count = _run(ref.release_held)
        click.echo(f"{count} held call{'s' if count != 1 else ''} of {workflow_id!r} enqueued")
    else:
        if not yes:
            click.confirm(
                f"Delete the calls held after workflow {workflow_id!r}? Their jobs are "
                "never enqueued.",
                abort=True,
            )
        count = _run(ref.delete_held)
        click.echo(f"{count} held call{'s' if count != 1 else ''} of {workflow_id!r} deleted")


def _positive(ctx: click.Context, param: click.Parameter, value: int) -> int:
    if value < 1:
        raise click.BadParameter(f"must be at least 1, got {value}")
    return value


@click.command("workflows")
@click.argument("workflow_id", metavar="[ID]", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@click.option(
    "--page", default=1, show_default=True, callback=_positive, help="The page of the list."
)
@click.option(
    "--limit",
    default=50,
    show_default=True,
    callback=_positive,
    help="Workflows per page of the list.",
)
@click.option("--cancel", is_flag=True, help="Cancel workflow ID (asks first).")
@click.option(
    "--release-held",
    is_flag=True,
    help="Enqueue the calls held after workflow ID now, whatever its status.",
)
@click.option(
    "--delete-held", is_flag=True, help="Delete the calls held after workflow ID (asks first)."
)
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@embedded_redis_option()
@require_option(_APP_HELP, required=False)
def workflows(
    workflow_id: str | None,
    as_json: bool,
    page: int,
    limit: int,
    cancel: bool,
    release_held: bool,
    delete_held: bool,
    yes: bool,
    app: str | None,
) -> None:
    """The workflows, newest first, or workflow ID: its status, member counts, callbacks
    and held calls (jobs enqueued after= it); --cancel, --release-held or --delete-held
    acts on it.  An unknown ID is an error (exit status 2)."""
    chosen = [
        name
        for name, given in (
            ("cancel", cancel),
            ("release-held", release_held),
            ("delete-held", delete_held),
        )
        if given
    ]
    if len(chosen) > 1:
        fail(f"give one action, not {' and '.join('--' + name for name in chosen)}")
    action = chosen[0] if chosen else None
    if app:
        load_app_or_exit(app)
    if action is not None:
        if workflow_id is None:
            fail(f"--{action} needs the workflow's ID")
        _act(workflow_id, action, yes)
    elif workflow_id is None:
        _list(page, limit, as_json)
    else:
        _show(workflow_id, as_json)
