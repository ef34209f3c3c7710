"""Jobs enqueued ``after=`` workflows: kept in the first workflow not yet succeeded,
and pushed, once, when the last of them succeeds.

A held call is one ``perform_async`` call's jobs, packed as JSON: the queue, its
shards count, ``merge_perform_in``, the workflows still to wait for after this one,
and the jobs (id, payload as base64, score, perform_in, group).
"""

from __future__ import annotations

import base64
import json
import logging
import uuid
from dataclasses import dataclass
from typing import Any

from lowkiq.clients.connection import Client
from lowkiq.errors import WorkflowError
from lowkiq.settings import settings
from lowkiq.storage.queue import NewJob, Queue
from lowkiq.workflows import store

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class HeldCall:
    """One held ``perform_async`` call: its queue and jobs, the workflows it waits for."""

    queue: str
    shards_count: int
    merge_perform_in: str
    after: list[str]
    jobs: list[NewJob]
    #: Unique: the name of its one push.
    name: str

    def pack(self) -> bytes:
        """This call as stored in a workflow's ``held`` hash."""
        jobs = [
            [job_id, base64.b64encode(payload).decode(), score, perform_in, group]
            for job_id, payload, score, perform_in, group in self.jobs
        ]
        data = {
            "queue": self.queue,
            "shards": self.shards_count,
            "merge": self.merge_perform_in,
            "after": self.after,
            "jobs": jobs,
            "name": self.name,
        }
        return json.dumps(data, separators=(",", ":")).encode()

    @classmethod
    def unpack(cls, packed: bytes | str) -> HeldCall:
        """A call as :meth:`pack` stored it."""
        data = json.loads(packed)
        jobs: list[NewJob] = [
            (job[0], base64.b64decode(job[1]), job[2], job[3], job[4]) for job in data["jobs"]
        ]
        return cls(data["queue"], data["shards"], data["merge"], data["after"], jobs, data["name"])


def push_once(
    client: Client,
    queue_name: str,
    shards_count: int,
    jobs: list[NewJob],
    name: str,
    merge_perform_in: str = "keep",
) -> None:
    """Push ``jobs`` (all of one id: one shard) unless a push named ``name`` ran before
    (see ``once_flag`` in :mod:`lowkiq.storage.keys`), in one script; a tracked worker of
    ``settings.workers`` records the enqueue, with ``name`` (its event's ``once``)."""
    track = next(
        (w.track_length for w in settings.workers if w.queue_name == queue_name and w.track), 0
    )
    queue = Queue(client, queue_name, shards_count, settings.codec, track_length=track)
    ttl = max(1, int(settings.workflow_ttl))
    queue.push(jobs, merge_perform_in=f"{merge_perform_in}\0{ttl}\0{name}")


def hold(client: Client, call: HeldCall) -> None:
    """Keep ``call`` in the first of its workflows that has not succeeded; push it when
    all have.  :class:`~lowkiq.errors.WorkflowError` when one of them is unknown."""
    after = list(call.after)
    while after:
        first, rest = after[0], after[1:]
        waiting = HeldCall(
            call.queue, call.shards_count, call.merge_perform_in, rest, call.jobs, call.name
        )
        if store.hold(client, first, call.name, waiting.pack()):
            return
        after = rest
    release(client, call)


def release(client: Client, call: HeldCall) -> None:
    """Push a held call's jobs, once (by id: a push per id, each made once)."""
    by_id: dict[str, list[NewJob]] = {}
    for job in call.jobs:
        by_id.setdefault(job[0], []).append(job)
    for job_id, jobs in by_id.items():
        push_once(
            client, call.queue, call.shards_count, jobs, f"held:{call.name}:{job_id}",
            call.merge_perform_in,
        )  # fmt: skip


def new_call(
    queue: str, shards_count: int, merge_perform_in: str, after: list[str], jobs: list[NewJob]
) -> HeldCall:
    """A held call of fresh jobs, named uniquely."""
    return HeldCall(queue, shards_count, merge_perform_in, after, jobs, uuid.uuid4().hex)


def move_on(client: Client, workflow_id: str) -> int:
    """The workflow succeeded: each call it held goes on (held by its next workflow, or
    pushed); returns how many calls went on.  A call whose next workflow is gone (expired
    or deleted) stays held here, for an operator to release or delete (logged)."""
    key = store.prefix(workflow_id) + "held"
    moved = 0
    for name, packed in client.hgetall(key).items():
        call = HeldCall.unpack(packed)
        try:
            if call.after:
                hold(client, call)
            else:
                release(client, call)
        except WorkflowError as exc:
            log.warning("workflow %r succeeded; a call it held stays held: %s", workflow_id, exc)
            continue
        client.hdel(key, name)
        moved += 1
    return moved


def held_calls(client: Client, workflow_id: str) -> list[HeldCall]:
    """The calls a workflow holds."""
    raw: dict[Any, Any] = client.hgetall(store.prefix(workflow_id) + "held")
    return [HeldCall.unpack(packed) for packed in raw.values()]


def delete_held(client: Client, workflow_id: str) -> int:
    """Delete the calls a workflow holds; returns how many."""
    key = store.prefix(workflow_id) + "held"
    count = int(client.hlen(key))
    client.delete(key)
    return count


def release_held(client: Client, workflow_id: str) -> int:
    """Push the calls a workflow holds now, whatever its status (an operator's
    release); returns how many."""
    key = store.prefix(workflow_id) + "held"
    released = 0
    for name, packed in client.hgetall(key).items():
        release(client, HeldCall.unpack(packed))
        client.hdel(key, name)
        released += 1
    return released


def each_held(client: Client, workflow_id: str, queue_name: str, push: bool) -> int:
    """Release (or delete) the calls of ``queue_name`` a workflow holds."""
    key = store.prefix(workflow_id) + "held"
    count = 0
    for name, packed in client.hgetall(key).items():
        call = HeldCall.unpack(packed)
        if call.queue != queue_name:
            continue
        if push:
            release(client, call)
        client.hdel(key, name)
        count += 1
    return count
