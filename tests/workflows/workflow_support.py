"""Workers and checks shared by the workflow tests (on a server and on a cluster).

``Member`` is a worker whose ``perform`` does what the test's ``plan`` says (succeed,
raise, ``Kill``, ``Discard``, ``BatchFailed``, ``yield_rest``); ``Done`` and ``Success``
record the callbacks they get.  :func:`callbacks` drains a callback worker and returns
what it was called with; :func:`catch_up` runs everything that could fire a callback
again (relays, the sweep, :func:`~lowkiq.workflows.relay.fire`), so that a test can show
nothing more comes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, ClassVar

import lowkiq
from lowkiq.testing import drain
from lowkiq.workflows import relay, store

#: What a plan does with one batch: it may raise, or call ``lowkiq.current_batch()``.
Plan = Callable[[dict[str, list[Any]]], None]


def succeed(payloads_by_id: dict[str, list[Any]]) -> None:
    """The default plan: every batch succeeds."""


class Member(lowkiq.Worker):
    """Members: records each batch, then does what :attr:`plan` says."""

    shards_count = 3
    batch_size = 3
    max_retry_count = 2
    #: What the next batches do.
    plan: ClassVar[Plan] = staticmethod(succeed)
    #: Every batch performed: ``{id: [payload, ...]}``.
    batches: ClassVar[list[dict[str, list[Any]]]] = []

    @classmethod
    def retry_in(cls, retry_count: int) -> float:
        return 3600.0  # a retry runs only when a test makes it due (drain(future=True))

    @classmethod
    def perform(cls, payloads_by_id: dict[str, list[Any]]) -> None:
        cls.batches.append({k: list(v) for k, v in payloads_by_id.items()})
        cls.plan(payloads_by_id)


class Other(Member):
    """Members of a second queue (its own shards count)."""

    shards_count = 2
    batch_size = 2


class Single(Member):
    """Members of a queue of one shard: a batch takes ids in the order enqueued."""

    shards_count = 1
    batch_size = 4


class Done(lowkiq.Worker):
    """An ``on_complete`` callback: records ``(id, payloads)`` of each job."""

    shards_count = 2
    calls: ClassVar[list[tuple[str, list[Any]]]] = []

    @classmethod
    def perform(cls, payloads_by_id: dict[str, list[Any]]) -> None:
        for job_id, payloads in payloads_by_id.items():
            cls.calls.append((job_id, list(payloads)))


class Success(Done):
    """An ``on_success`` callback."""

    shards_count = 3
    calls: ClassVar[list[tuple[str, list[Any]]]] = []


def reset() -> None:
    """Forget what the workers recorded; plans back to success."""
    for worker in (Member, Other, Single):
        worker.plan = staticmethod(succeed)
        worker.batches = []
    Done.calls = []
    Success.calls = []


def callbacks(worker: type[Done]) -> list[tuple[str, list[Any]]]:
    """Drain a callback worker: the calls it got (then forgotten)."""
    drain(worker)
    calls, worker.calls = worker.calls, []
    return calls


def catch_up(client: Any, *workflow_ids: str) -> None:
    """Everything that fires callbacks, again: the sweep (as if long after), a relay of
    every shard of the workflows, and ``fire``."""
    client.delete(relay.SWEEP_LOCK)
    relay.sweep(client, time.time() + 3600)
    for workflow_id in workflow_ids:
        shards = client.smembers(store.prefix(workflow_id) + "shards")
        relay.relay_shards(client, [s.decode() for s in shards])
        relay.fire(client, workflow_id)


def status_dict(
    done: int = 0,
    failed: int = 0,
    dead: int = 0,
    discarded: int = 0,
    pending: int = 0,
    complete: bool = True,
    succeeded: bool | None = None,
) -> dict[str, Any]:
    """A status as a callback's payload holds it (``succeeded``: complete, none dead,
    unless told)."""
    if succeeded is None:
        succeeded = complete and dead == 0
    return {
        "pending": pending,
        "done": done,
        "failed": failed,
        "dead": dead,
        "discarded": discarded,
        "complete": complete,
        "succeeded": succeeded,
    }


def callback_body(workflow_id: str, payload: Any, **status: Any) -> dict[str, Any]:
    """The payload of a callback job, as a user reads it."""
    return {"workflow": workflow_id, "payload": payload, "status": status_dict(**status)}
