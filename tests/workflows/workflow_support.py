"""Workers and checks shared by the workflow tests (on a server and on a cluster).

``Member`` is a worker whose ``perform`` does what the test's ``plan`` says (succeed,
raise, ``Kill``, ``Discard``, ``BatchFailed``, ``yield_rest``); ``Done`` and ``Success``
record the callbacks they get.  :func:`callbacks` drains a callback worker and returns
what it was called with; :func:`catch_up` runs everything that could fire a callback
again (relays, the sweep, :func:`~lowkiq.workflows.relay.fire`), so that a test can show
nothing more comes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
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
        relay.relay_shards(client, store.shards_of(store.read_state(client, workflow_id) or {}))
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


# -- real worker processes (tests/apps/workflow_app.py) ---------------------------------------


def enqueue_crash_workflows(step: type[lowkiq.Worker], workflows: int) -> dict[str, set[str]]:
    """Open ``workflows`` workflows of members of the app's ``Step`` (merging: the ids are
    shared; an id gets two payloads in a workflow, and one payload twice), with
    ``Finished`` as ``on_complete``; returns each workflow's members (``id:n``)."""
    from tests.apps.workflow_app import Finished

    members: dict[str, set[str]] = {}
    for w in range(workflows):
        workflow_id = f"crash-wf{w}"
        members[workflow_id] = set()
        with lowkiq.Workflow(workflow_id, on_complete=Finished, payload={"w": w}):
            for n in range(12):
                job_id = f"order{(n * 3 + w) % 10}"
                payload: dict[str, Any] = {"wf": workflow_id, "n": n, "sleep": 0.02}
                if n % 5 == 0:
                    payload["fail_once"] = f"wf:failed:{workflow_id}:{n}"
                jobs = [{"id": job_id, "payload": payload, "score": n}]
                step.perform_async(jobs * (2 if n % 4 == 0 else 1))  # one payload twice
                members[workflow_id].add(f"{job_id}:{n}")
    return members


def check_crash_workflows(record: Any, members: dict[str, set[str]]) -> None:
    """Each workflow's callback came once, after all of its members ran, none lost."""
    import json
    from collections import Counter

    from tests.apps.runner import eventually

    def callbacks() -> list[list[Any]]:
        return [json.loads(raw) for raw in record.lrange("wf:callbacks", 0, -1)]

    eventually(lambda: len(callbacks()) >= len(members), timeout=90)
    time.sleep(1.0)  # a second callback, were there one, would come meanwhile
    calls = callbacks()
    assert Counter(call[0] for call in calls) == dict.fromkeys(members, 1)
    for workflow_id, body, performed_then in calls:
        expected = members[workflow_id]
        assert performed_then == len(expected), "the callback came before its last member"
        performed = {raw.decode() for raw in record.smembers(f"wf:performed:{workflow_id}")}
        assert performed == expected
        assert body["status"] == status_dict(done=len(expected)), (workflow_id, body)
        assert body["payload"] == {"w": int(workflow_id.removeprefix("crash-wf"))}


def run_coroutine(coroutine: Coroutine[Any, Any, Any]) -> Any:
    """``asyncio.run(coroutine)`` on a thread of its own: the browser tests' Playwright
    keeps an event loop running on the main thread for the whole session."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine).result()
