"""Workers and workflows of the dashboard's and CLI's workflow tests, built with the public
API (``lowkiq.Workflow``, ``lowkiq.testing.drain``)."""

from __future__ import annotations

from typing import Any, ClassVar

import lowkiq
from lowkiq.testing import drain


class Steps(lowkiq.Worker):
    """Members: a payload ``{"fail": true}`` raises; no retries (it dies at once)."""

    shards_count = 2
    batch_size = 5
    max_retry_count = 0

    @classmethod
    def perform(cls, payloads_by_id: dict[str, list[Any]]) -> None:
        for payloads in payloads_by_id.values():
            if any(isinstance(p, dict) and p.get("fail") for p in payloads):
                raise RuntimeError("step failed")


class Finished(lowkiq.Worker):
    """An ``on_complete`` callback, tracked (its job events are recorded)."""

    shards_count = 1
    track = True
    calls: ClassVar[list[tuple[str, list[Any]]]] = []

    @classmethod
    def perform(cls, payloads_by_id: dict[str, list[Any]]) -> None:
        for job_id, payloads in payloads_by_id.items():
            cls.calls.append((job_id, list(payloads)))


class Report(lowkiq.Worker):
    """An ``on_success`` callback, and the worker of jobs held ``after=`` workflows."""

    shards_count = 1

    @classmethod
    def perform(cls, payloads_by_id: dict[str, list[Any]]) -> None:
        pass


WORKERS: list[type[lowkiq.Worker]] = [Steps, Finished, Report]


def register() -> None:
    """The workers in ``lowkiq.settings.workers``; no callback recorded yet."""
    lowkiq.settings.workers = list(WORKERS)
    Finished.calls = []


def succeeded_workflow(workflow_id: str = "wf-ok", jobs: int = 3) -> None:
    """A workflow of ``jobs`` Steps, all performed: it succeeded, its callbacks enqueued."""
    with lowkiq.Workflow(workflow_id, on_complete=Finished, on_success=Report, payload={"n": jobs}):
        Steps.perform_async([{"id": f"{workflow_id}-{n}", "payload": n} for n in range(jobs)])
    drain(Steps)


def failed_workflow(workflow_id: str = "wf-bad") -> None:
    """A workflow of two Steps, one of which dies: it failed."""
    with lowkiq.Workflow(workflow_id, on_complete=Finished, on_success=Report):
        Steps.perform_async(
            [
                {"id": f"{workflow_id}-ok", "payload": 1},
                {"id": f"{workflow_id}-dies", "payload": {"fail": True}},
            ]
        )
    drain(Steps)


def pending_workflow(workflow_id: str = "wf-run", jobs: int = 4) -> None:
    """A closed workflow of ``jobs`` queued Steps (not performed), with a call of two
    Report jobs held ``after=`` it."""
    with lowkiq.Workflow(workflow_id, on_complete=Finished, on_success=Report):
        Steps.perform_async([{"id": f"{workflow_id}-{n}", "payload": n} for n in range(jobs)])
    Report.perform_async(
        [{"id": "after-1", "payload": "a"}, {"id": "after-2", "payload": "b"}], after=workflow_id
    )
