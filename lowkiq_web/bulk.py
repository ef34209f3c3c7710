"""The dashboard's actions on jobs, defined once: what each runs, its button, its question.

A :class:`BulkAction` acts on a whole list; a :class:`JobAction` on the jobs checked in a
list, or on one job (its row's button, the job page's).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from lowkiq import Actions

#: The lists whose jobs are queued (their job actions are the same).
QUEUED_KINDS = ("enqueued", "retries", "scheduled")


@dataclass(frozen=True)
class BulkAction:
    """A button over a whole list (``enqueued``, ``retries``, ``scheduled``, ``dead`` or
    ``busy``) of one worker."""

    #: The URL name, ``/<worker>/<kind>/<name>``.
    name: str
    #: The list it acts on.
    kind: str
    label: str
    #: The confirmation question; ``{worker}`` is the worker's name, ``{count}`` how many
    #: jobs it would touch now ("1,234 jobs").
    question: str
    #: Runs it on the worker's actions; returns how many jobs it touched.
    run: Callable[[Actions], int]
    #: What happened to the jobs, for the message: "3 jobs <done>."
    done: str
    #: The count (a key of :func:`lowkiq_web.views.list_counts`) of the jobs it touches.
    counts: str
    #: Destroys or buries jobs: styled as dangerous.
    danger: bool = False
    #: When to use it, shown beside its button ('' when the label says it all).
    explanation: str = ""

    def confirmation(self, worker: str, counts: Mapping[str, int] | None = None) -> str:
        """The question asked before running it on ``worker``, with the count of the jobs
        it would touch (from ``counts``)."""
        count = (counts or {}).get(self.counts)
        shown = "Every one" if count is None else f"{count:,} job{'s' if count != 1 else ''}"
        return self.question.format(worker=worker, count=shown)


BULK_ACTIONS = (
    BulkAction(
        "perform_all_now", "enqueued", "Perform all jobs now",
        "Make every queued job of {worker} due now? {count} not due yet.",
        Actions.perform_all_jobs_now, "made due now", "scheduled",
    ),
    BulkAction(
        "kill_all_failed", "enqueued", "Kill all failed jobs",
        "Move every failed job of {worker} to the morgue? {count}.",
        Actions.kill_all_failed_jobs, "moved to the morgue", "retries", danger=True,
    ),
    BulkAction(
        "delete_all_failed", "enqueued", "Delete all failed jobs",
        "Delete every failed job of {worker}? {count}; this cannot be undone.",
        Actions.delete_all_failed_jobs, "deleted", "retries", danger=True,
    ),
    BulkAction(
        "clear", "enqueued", "Delete all",
        "Delete every queued job of {worker} (fresh, retries, scheduled)? {count}; running "
        "batches finish; this cannot be undone.",
        Actions.clear, "deleted", "length", danger=True,
    ),
    BulkAction(
        "retry_all_now", "retries", "Retry all now",
        "Make every failed job of {worker} due now? {count}.",
        Actions.perform_all_failed_jobs_now, "made due now", "retries",
    ),
    BulkAction(
        "kill_all", "retries", "Kill all",
        "Move every failed job of {worker} to the morgue? {count}.",
        Actions.kill_all_failed_jobs, "moved to the morgue", "retries", danger=True,
    ),
    BulkAction(
        "delete_all", "retries", "Delete all",
        "Delete every failed job of {worker}? {count}; this cannot be undone.",
        Actions.delete_all_failed_jobs, "deleted", "retries", danger=True,
    ),
    BulkAction(
        "perform_all_now", "scheduled", "Perform all now",
        "Make every scheduled job of {worker} due now? {count}.",
        Actions.perform_all_jobs_now, "made due now", "scheduled",
    ),
    BulkAction(
        "delete_all", "scheduled", "Delete all",
        "Delete every scheduled job of {worker}? {count}; this cannot be undone.",
        Actions.delete_all_scheduled_jobs, "deleted", "scheduled", danger=True,
    ),
    BulkAction(
        "restore_orphaned", "busy", "Put back orphaned batches",
        "Put back into the queue every batch of {worker} left in processing by a process "
        "that died, in shards no live process holds? {count} busy now.",
        Actions.restore_orphaned_batches, "put back into the queue", "busy",
        explanation="For batches left here by a process that died while no live process "
        "serves this worker (they would show as busy forever). A process taking a shard "
        "over puts its batch back itself; batches of live processes are left alone.",
    ),
    BulkAction(
        "queue_up_all", "dead", "Queue up all",
        "Queue up every dead job of {worker}? {count}.",
        Actions.morgue_queue_up_all_jobs, "queued up", "morgue_length",
    ),
    BulkAction(
        "delete_all", "dead", "Delete all",
        "Delete every dead job of {worker}? {count}; this cannot be undone.",
        Actions.morgue_delete_all_jobs, "deleted", "morgue_length", danger=True,
    ),
)  # fmt: skip


def bulk_actions(kind: str) -> list[BulkAction]:
    """The bulk actions of the ``kind`` list, in button order."""
    return [action for action in BULK_ACTIONS if action.kind == kind]


def find_bulk_action(kind: str, name: str) -> BulkAction | None:
    """The bulk action ``name`` of the ``kind`` list, or ``None``."""
    return next((action for action in bulk_actions(kind) if action.name == name), None)


@dataclass(frozen=True)
class JobAction:
    """A button over the jobs checked in a list, or one job's (its row, the job page)."""

    #: The URL name: ``/<worker>/<kind>/selected/<name>``, ``/<worker>/<kind>/job/<name>``.
    name: str
    #: The lists it is offered on.
    kinds: tuple[str, ...]
    label: str
    #: Runs it on the worker's actions with the ids; returns how many jobs it touched.
    run: Callable[[Actions, list[str]], int]
    #: What happened to the jobs, for the message: "3 jobs <done>."
    done: str
    #: Destroys or buries jobs: styled as dangerous, and a row's button asks first.
    danger: bool = False

    def checked_question(self, worker: str) -> str:
        """The question asked before running it on the checked jobs; the page's script
        puts their number in place of ``{n}``."""
        return f"{self.label} the {{n}} checked job(s) of {worker}?"

    def row_question(self, job_id: str) -> str:
        """The question a row's (or the job page's) button asks first ('' for none)."""
        return f"{self.label} job {job_id}?" if self.danger else ""


JOB_ACTIONS = (
    JobAction("perform_now", QUEUED_KINDS, "Perform now", Actions.perform_now,
              "made due now"),
    JobAction("kill", QUEUED_KINDS, "Kill", Actions.kill, "moved to the morgue",
              danger=True),
    JobAction("delete", QUEUED_KINDS, "Delete", Actions.delete, "deleted", danger=True),
    JobAction("queue_up", ("dead",), "Queue up", Actions.morgue_queue_up, "queued up"),
    JobAction("delete", ("dead",), "Delete", Actions.morgue_delete, "deleted",
              danger=True),
)  # fmt: skip


def job_actions(kind: str) -> list[JobAction]:
    """The actions on checked or single jobs of the ``kind`` list, in button order."""
    return [action for action in JOB_ACTIONS if kind in action.kinds]


def find_job_action(kind: str, name: str) -> JobAction | None:
    """The job action ``name`` of the ``kind`` list, or ``None``."""
    return next((action for action in job_actions(kind) if action.name == name), None)
