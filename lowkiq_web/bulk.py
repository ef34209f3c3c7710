"""The dashboard's bulk actions, defined once: what each runs, its button, its question."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from lowkiq import Actions


@dataclass(frozen=True)
class BulkAction:
    """A button over a whole list (``enqueued`` or ``dead``) of one worker."""

    #: The URL name, ``/<worker>/<kind>/<name>``.
    name: str
    #: The list it acts on.
    kind: str
    label: str
    #: The confirmation question; ``{worker}`` is the worker's name.
    question: str
    #: Runs it on the worker's actions; returns how many jobs it touched.
    run: Callable[[Actions], int]
    #: What happened to the jobs, for the message: "3 jobs <done>."
    done: str
    #: Destroys or buries jobs: styled as dangerous.
    danger: bool = False

    def confirmation(self, worker: str) -> str:
        """The question asked before running it on ``worker``."""
        return self.question.format(worker=worker)


BULK_ACTIONS = (
    BulkAction(
        "perform_all_now", "enqueued", "Perform all jobs now",
        "Make every queued job of {worker} due now?",
        Actions.perform_all_jobs_now, "made due now",
    ),
    BulkAction(
        "kill_all_failed", "enqueued", "Kill all failed jobs",
        "Move every failed job of {worker} to the morgue?",
        Actions.kill_all_failed_jobs, "moved to the morgue", danger=True,
    ),
    BulkAction(
        "delete_all_failed", "enqueued", "Delete all failed jobs",
        "Delete every failed job of {worker}?",
        Actions.delete_all_failed_jobs, "deleted", danger=True,
    ),
    BulkAction(
        "restore_orphaned", "busy", "Put back orphaned batches",
        "Put back into the queue every batch of {worker} left in processing by a process "
        "that died, in shards no live process holds?",
        Actions.restore_orphaned_batches, "put back into the queue",
    ),
    BulkAction(
        "queue_up_all", "dead", "Queue up all",
        "Queue up every dead job of {worker}?",
        Actions.morgue_queue_up_all_jobs, "queued up",
    ),
    BulkAction(
        "delete_all", "dead", "Delete all",
        "Delete every dead job of {worker}? This cannot be undone.",
        Actions.morgue_delete_all_jobs, "deleted", danger=True,
    ),
)  # fmt: skip


def bulk_actions(kind: str) -> list[BulkAction]:
    """The bulk actions of the ``kind`` list, in button order."""
    return [action for action in BULK_ACTIONS if action.kind == kind]


def find_bulk_action(kind: str, name: str) -> BulkAction | None:
    """The bulk action ``name`` of the ``kind`` list, or ``None``."""
    return next((action for action in bulk_actions(kind) if action.name == name), None)
