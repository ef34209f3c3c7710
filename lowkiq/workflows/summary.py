"""Workflows as people read them (the dashboard's Workflows pages, ``lowkiq workflows``):
the list, newest first, and one workflow with its members by state, its callbacks and
its held calls.  Reads only; the actions are :class:`~lowkiq.workflows.context.WorkflowRef`'s.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from lowkiq.clients.connection import Client
from lowkiq.workflows import held, store
from lowkiq.workflows.status import WorkflowStatus, status_of

#: Member states, in the order shown, by their letters (:func:`lowkiq.workflows.store.members`).
MEMBER_STATES = {"p": "pending", "f": "failed", "d": "done", "x": "dead", "c": "discarded"}
#: Members of one workflow read at most, for its page.
MEMBERS_READ = 10_000
#: Bytes of ``W registered`` read per member the page shows (a member's name is its
#: queue, id and a 40-byte digest).
REGISTERED_BYTES = 256


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _time(state: dict[str, Any], name: str) -> float | None:
    value = state.get(name)
    return float(value) if value not in (None, "") else None


@dataclass(frozen=True)
class Callback:
    """A workflow's callback: ``on_complete`` or ``on_success``, its worker, fired or not."""

    kind: str
    queue: str
    worker: str
    fired: bool


@dataclass(frozen=True)
class WorkflowSummary:
    """One workflow: its phase, counts, times, callbacks and how many calls it holds."""

    id: str
    #: ``open`` (its ``with`` block runs), ``closed`` (every member known, some not
    #: ended) or ``complete``; ``expired`` when its state is gone but it holds calls.
    phase: str
    status: WorkflowStatus
    cancelled: bool
    created_at: float | None
    closed_at: float | None
    completed_at: float | None
    #: Calls of jobs held ``after=`` it.
    held: int
    callbacks: list[Callback] = field(default_factory=list)

    @property
    def label(self) -> str:
        """``open``, ``closed``, ``succeeded``, ``failed``, ``cancelled`` or ``expired``."""
        if self.phase == "complete":
            if self.status.succeeded:  # (a cancel after it succeeded changed nothing)
                return "succeeded"
            return "cancelled" if self.cancelled else "failed"
        return self.phase

    def as_dict(self) -> dict[str, Any]:
        """A JSON document of it (``lowkiq workflows --json``)."""
        return {
            "id": self.id,
            "status": self.label,
            "phase": self.phase,
            "cancelled": self.cancelled,
            "complete": self.status.complete,
            "succeeded": self.status.succeeded,
            "counts": {
                "pending": self.status.pending,
                "done": self.status.done,
                "failed": self.status.failed,
                "dead": self.status.dead,
                "discarded": self.status.discarded,
                "total": self.status.total,
            },
            "created_at": self.created_at,
            "closed_at": self.closed_at,
            "completed_at": self.completed_at,
            "held": self.held,
            "callbacks": [
                {"kind": c.kind, "worker": c.worker, "queue": c.queue, "fired": c.fired}
                for c in self.callbacks
            ],
        }


def _summary(workflow_id: str, raw: dict[Any, Any], held_count: int) -> WorkflowSummary:
    state: dict[str, Any] = {
        _text(k): (v if _text(k) == "payload" else _text(v)) for k, v in raw.items()
    }
    if not state:
        return WorkflowSummary(
            workflow_id, "expired", WorkflowStatus(), False, None, None, None, held_count
        )
    callbacks = []
    for kind in ("complete", "success"):
        target = state.get(f"on_{kind}")
        if target:
            queue, _, worker = target.split("\0", 2)
            callbacks.append(
                Callback(f"on_{kind}", queue, worker, bool(state.get(f"fired_{kind}")))
            )
    return WorkflowSummary(
        id=workflow_id,
        phase=state.get("status", "open"),
        status=status_of(state),
        cancelled=bool(state.get("cancelled")),
        created_at=_time(state, "created_at"),
        closed_at=_time(state, "closed_at"),
        completed_at=_time(state, "completed_at"),
        held=held_count,
        callbacks=callbacks,
    )


def summaries(client: Client, workflow_ids: list[str]) -> list[WorkflowSummary | None]:
    """The summaries of these workflows, in order (``None``: no such workflow, neither
    state nor held calls)."""
    pipe = client.pipeline(transaction=False)
    for workflow_id in workflow_ids:
        base = store.prefix(workflow_id)
        pipe.hgetall(base + "state")
        pipe.hlen(base + "held")
    replies = pipe.execute()
    result: list[WorkflowSummary | None] = []
    for n, workflow_id in enumerate(workflow_ids):
        raw, held_count = replies[2 * n : 2 * n + 2]
        if not raw and not held_count:
            result.append(None)
            continue
        result.append(_summary(workflow_id, raw, int(held_count)))
    return result


def summary(client: Client, workflow_id: str) -> WorkflowSummary | None:
    """One workflow's summary; ``None`` when there is no such workflow (never opened, or
    expired and holding nothing)."""
    return summaries(client, [workflow_id])[0]


def count(client: Client) -> int:
    """How many workflows the index lists."""
    return int(client.zcount(store.INDEX, store.IDS_FROM, "+inf"))


def page(client: Client, offset: int, limit: int) -> list[WorkflowSummary]:
    """Workflows of the index, newest first, from ``offset``: at most ``limit`` (those
    whose keys expired are left out)."""
    ids = store.list_ids(client, offset, limit)
    return [found for found in summaries(client, ids) if found is not None]


@dataclass(frozen=True)
class Member:
    """A member as shown: its queue and job id (payloads of one id in one workflow are
    members each: ``payloads`` of them)."""

    queue: str
    job_id: str
    payloads: int = 1


def members_by_state(
    client: Client, workflow_id: str, read: int = MEMBERS_READ
) -> tuple[dict[str, list[Member]], bool]:
    """A workflow's members grouped by state name (:data:`MEMBER_STATES`, in that order),
    each sorted by queue and id; at most ``read`` members are read: the flag says whether
    every one was."""
    found: dict[str, dict[tuple[str, str], int]] = {name: {} for name in MEMBER_STATES.values()}
    base = store.prefix(workflow_id)
    # Once closed, its members are registered (their order of enqueue): the first
    # ``read`` of them, their states looked up.  Open, only those ended so far are known.
    budget = read * REGISTERED_BYTES
    size = int(client.strlen(base + "registered"))
    names = store.registered(client.getrange(base + "registered", 0, budget - 1))
    complete = size <= budget and len(names) <= read
    if names:
        shown = names[:read]
        letters = dict(zip(shown, store.letters(client, workflow_id, shown), strict=True))
    else:  # open: the members that ended (done unless W states says) or failed so far
        instance = _text(client.hget(base + "state", "instance") or "")
        ended_set = store.ended_key(workflow_id, instance)
        ended = itertools.islice(client.sscan_iter(ended_set, count=1000), read + 1)
        kept = itertools.islice(client.hscan_iter(base + "states", count=1000), read + 1)
        letters = dict.fromkeys(map(_text, ended), "d")
        letters.update((_text(field), _text(letter)) for field, letter in kept)
        complete = len(letters) <= read
    for member, letter in itertools.islice(letters.items(), read):
        queue, job_id, _ = member.split("\0", 2)
        group = found[MEMBER_STATES.get(letter, "pending")]
        group[(queue, job_id)] = group.get((queue, job_id), 0) + 1
    grouped = {
        name: [Member(q, i, n) for (q, i), n in sorted(members.items())]
        for name, members in found.items()
    }
    return grouped, complete


def held_calls(client: Client, workflow_id: str) -> list[held.HeldCall]:
    """The calls of jobs held ``after=`` the workflow, by queue and name."""
    return sorted(held.held_calls(client, workflow_id), key=lambda c: (c.queue, c.name))
