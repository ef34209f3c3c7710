"""The Processes page: every live ``lowkiq worker`` process, the shards nobody serves,
and the per-process quiet and stop buttons (POST, CSRF-checked, refused read-only)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from flask import abort, redirect, render_template, request, url_for
from werkzeug.wrappers import Response

import lowkiq
from lowkiq_web.blueprint import lowkiq_web
from lowkiq_web.listing import BadParameter
from lowkiq_web.views import INTERVALS, live_controls


@dataclass(frozen=True)
class ProcessAction:
    """A button on a process's row."""

    #: The URL name, ``/processes/<name>``, and the command the process gets.
    name: str
    label: str
    #: The confirmation question; ``{process}`` is the process's host:pid.
    question: str
    #: What happened, for the message: "<host:pid> <done>."
    done: str
    danger: bool = False

    def confirmation(self, process: str) -> str:
        """The question asked before sending it to ``process``."""
        return self.question.format(process=process)


PROCESS_ACTIONS = (
    ProcessAction(
        "quiet", "Quiet",
        "Quiet {process}? It finishes its running batches, takes no new ones and hands "
        "its shards to the other processes; it stays up until stopped.",
        "is quiet: its shards are handed over",
    ),
    ProcessAction(
        "stop", "Stop",
        "Stop {process}? It finishes its running batches, hands its shards over and exits.",
        "is stopping", danger=True,
    ),
)  # fmt: skip


def _context(message: str = "") -> dict[str, Any]:
    interval, paused = live_controls(request.values)
    return {
        "status": lowkiq.processes(),
        "actions": PROCESS_ACTIONS,
        "interval": interval,
        "paused": paused,
        "intervals": sorted(INTERVALS),
        "message": message,
    }


@lowkiq_web.get("/processes")
def processes() -> str:
    """Every live worker process (host, pid, threads, shards, heartbeat, memory, busy)
    and, per worker, the shards no live process serves."""
    return render_template("lowkiq/processes.html", **_context())


@lowkiq_web.get("/processes/live")
def processes_live() -> str:
    """The Processes page's live part alone, for htmx polling."""
    return render_template("lowkiq/_processes.html", **_context())


@lowkiq_web.post("/processes/<action>")
def process_action(action: str) -> Response | str:
    """Send ``quiet`` or ``stop`` to the live process named by the form's ``id``."""
    found = next((a for a in PROCESS_ACTIONS if a.name == action), None)
    if found is None:
        abort(404, f"no action {action!r} on a process")
    process_id = request.form.get("id", "")
    if not process_id or "\0" in process_id:
        raise BadParameter("id is required (a process id, host:pid:tag, without NUL)")
    if not lowkiq.command_process(process_id, found.name):
        abort(404, f"no live process {process_id!r} (it may have stopped)")
    if not request.headers.get("HX-Request"):
        return redirect(url_for("lowkiq_web.processes"), 303)
    name = process_id.rsplit(":", 1)[0]
    return render_template("lowkiq/_processes.html", **_context(f"{name} {found.done}."))
