"""The Busy page's parts: who performs each job (the process holding its shard's lease,
the thread, since when, and whether it was asked to stop, from the processes' reports),
and its Cancel button (``Worker.actions().cancel`` of the row's id: POST, CSRF-checked
like every action, refused in read-only mode)."""

from __future__ import annotations

import time
from dataclasses import dataclass

from flask import redirect, render_template, request, url_for
from werkzeug.wrappers import Response

import lowkiq
from lowkiq.ownership.status import Processes, RunningBatchInfo
from lowkiq_web.blueprint import lowkiq_web
from lowkiq_web.listing import BadParameter
from lowkiq_web.overview import find_worker


@dataclass(frozen=True)
class BusyDetail:
    """What the Busy page shows of one job's perform."""

    #: ``host:pid`` of the process holding the shard's lease, or its process id when it
    #: is not a live process (it stopped or died: its lease lapses, then the shard's next
    #: owner runs the batch again).
    process: str
    live: bool
    #: The thread performing it, when the process reported it.
    thread: str | None = None
    started_at: float | None = None
    #: Seconds it has run, by this host's clock.
    elapsed: float | None = None
    stopping: bool = False


def _detail(processes: Processes, owner: str | None, shard_name: str) -> BusyDetail | None:
    """The detail of a batch of ``shard_name`` whose lease ``owner`` holds."""
    if owner is None:
        return None
    process = processes.find(owner)
    if process is None:
        return BusyDetail(owner, live=False)
    name = f"{process.host}:{process.pid}"
    batch: RunningBatchInfo | None = next(
        (b for b in process.running if b.shard == shard_name), None
    )
    if batch is None:
        return BusyDetail(name, live=True)
    return BusyDetail(
        name,
        live=True,
        thread=batch.thread,
        started_at=batch.started_at,
        elapsed=max(0.0, time.time() - batch.started_at),
        stopping=batch.stopping,
    )


def busy_details(worker: type[lowkiq.Worker], ids: list[str]) -> dict[str, BusyDetail]:
    """The detail of each job id of ``worker`` in a processing area."""
    if not ids:
        return {}
    processes = lowkiq.processes()
    owners = next((q for q in processes.queues if q.queue == worker.queue_name), None)
    if owners is None:
        return {}
    locate = worker.queue().locator()
    details: dict[str, BusyDetail] = {}
    for job_id in ids:
        shard = locate(job_id)
        index = shard - owners.first
        owner = owners.owners[index] if 0 <= index < len(owners.owners) else None
        found = _detail(processes, owner, f"{worker.queue_name}:{shard}")
        if found is not None:
            details[job_id] = found
    return details


@lowkiq_web.post("/<worker>/busy/job/cancel")
def cancel_busy_job(worker: str) -> Response | str:
    """Cancel the job of the form's ``id`` (:meth:`lowkiq.Actions.cancel`): what is queued
    of it is deleted, and its running perform, wherever it runs, is asked to stop; htmx
    swaps the row's button for what was done (the row goes once the perform ended)."""
    found = find_worker(worker)
    job_id = request.form.get("id")
    if not job_id or "\0" in job_id:
        raise BadParameter("id is required (a job id, without NUL)")
    count = found.actions().cancel([job_id])
    if not request.headers.get("HX-Request"):
        return redirect(url_for("lowkiq_web.busy", worker=worker), 303)
    if count:
        message = f"Job {job_id} cancelled: its perform was told to stop."
    else:
        message = f"Job {job_id} was neither running nor queued any more."
    return render_template("lowkiq/_busy_cancelled.html", message=message)
