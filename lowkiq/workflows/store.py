"""A workflow's state in Redis, in a slot of its own.

``W`` = ``lowkiq:{wf:<id>}:``:

==============  =====  ==========================================================
key             type   content
==============  =====  ==========================================================
W state         hash   ``status`` (``open``, ``closed``, ``complete``), ``instance``
                       (a nonce: the tag of its members' payloads), ``created_at``,
                       ``closed_at``, ``completed_at`` (unix seconds, Redis's clock),
                       ``total`` (members, once closed), the counts ``done``,
                       ``failed`` (retrying), ``dead``, ``discarded``; ``succeeded``
                       (``1``/``0`` once complete), ``cancelled``; the callbacks
                       ``on_complete`` / ``on_success`` (``queue \\0 shards \\0 worker``),
                       ``payload`` (stored bytes), ``fired_complete`` /
                       ``fired_success`` once enqueued
W members       hash   member (``queue \\0 id \\0 sha1``) -> ``p`` pending, ``f`` failed,
                       ``d`` done, ``x`` dead, ``c`` discarded
W shards        set    ``queue \\0 shard`` of every member (where their outboxes are)
W held          hash   name -> a call of jobs held until the workflow succeeds
                       (:mod:`lowkiq.workflows.held`)
==============  =====  ==========================================================

and two indexes (zsets: id -> when opened): ``lowkiq:{workflows}:index`` of all,
read by the dashboard, and ``lowkiq:{workflows}:unfinished`` of those not complete and
fired, read by the sweep (:mod:`lowkiq.workflows.relay`).  Every
change of ``W`` is one script (``lua/workflow_*.lua``); complete workflows expire after
``settings.workflow_ttl``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import redis

from lowkiq.clients.connection import Client, is_cluster
from lowkiq.errors import WorkflowError
from lowkiq.storage.keys import NAMESPACE
from lowkiq.storage.scripts import Scripts
from lowkiq.workflows.status import WorkflowStatus, status_of

#: The index of every workflow: id -> when opened.
INDEX = f"{NAMESPACE}:{{workflows}}:index"
#: The workflows not yet complete and fired: id -> when opened (the sweep's work).
UNFINISHED = f"{NAMESPACE}:{{workflows}}:unfinished"
#: A member no index ever keeps (longer than a packed sorted set holds).
BULK_MARK = "\xfflowkiq: the mark of a bulk write, longer than any member of a packed key"
#: Members sent to Redis in one call when a workflow closes.
MEMBERS_CHUNK = 5000


def prefix(workflow_id: str) -> str:
    """``lowkiq:{wf:<id>}:``, the prefix of a workflow's keys."""
    return f"{NAMESPACE}:{{wf:{workflow_id}}}:"


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def read_state(client: Client, workflow_id: str) -> dict[str, Any] | None:
    """A workflow's state hash, decoded but ``payload`` (``None``: no such workflow)."""
    raw = client.hgetall(prefix(workflow_id) + "state")
    if not raw:
        return None
    state: dict[str, Any] = {
        _text(k): (v if _text(k) == "payload" else _text(v)) for k, v in raw.items()
    }
    if state.get("status") == "open":
        state["members"] = str(client.hlen(prefix(workflow_id) + "members"))
    return state


def status(client: Client, workflow_id: str) -> WorkflowStatus:
    """A workflow's :class:`WorkflowStatus`; :class:`WorkflowError` when unknown."""
    state = read_state(client, workflow_id)
    if state is None:
        raise WorkflowError(f"no workflow {workflow_id!r} (never opened, or expired)")
    return status_of(state)


def open_(client: Client, workflow_id: str, definition: dict[str, Any]) -> None:
    """Open a workflow (its state written, its id in the index); :class:`WorkflowError`
    when one of that id is open or still holds jobs."""
    scripts = Scripts.for_client(client)
    args: list[Any] = [""]
    for field, value in definition.items():
        args += (field, value)
    try:
        opened = float(_text(scripts.workflow_open(keys=[prefix(workflow_id)], args=args)))
    except redis.ResponseError as exc:
        text = str(exc)
        if text.startswith("OPEN"):
            raise WorkflowError(
                f"workflow {workflow_id!r} is open ({text.split()[-1]}): a workflow id is "
                f"reused only once it is complete"
            ) from None
        if text.startswith("HELD"):
            raise WorkflowError(
                f"workflow {workflow_id!r} still holds {text.split()[-1]} call(s) of jobs "
                f"enqueued after it: release or delete them first"
            ) from None
        raise
    # Each index is made a skiplist by a member too long for a packed sorted set (Redis
    # keeps a small one packed and scans it on every add), taken out at once.
    pipe = client.pipeline(transaction=False)
    for key in (INDEX, UNFINISHED):
        pipe.zadd(key, {BULK_MARK: 0, workflow_id: opened})
        pipe.zrem(key, BULK_MARK)
    pipe.execute()


def add_members(
    client: Client, workflow_id: str, shards: Iterable[str], members: Sequence[str]
) -> None:
    """Register members (and the shards they live in) of an open workflow."""
    for args in _member_chunks(list(shards), members):
        Scripts.for_client(client).workflow_members(keys=[prefix(workflow_id)], args=args)


def _member_chunks(shards: list[str], members: Sequence[str]) -> list[list[Any]]:
    """The arguments of ``workflow_members`` calls registering ``members``."""
    return [
        [len(head), *head, *members[start : start + MEMBERS_CHUNK]]
        for start in range(0, max(len(members), 1), MEMBERS_CHUNK)
        for head in [shards if start == 0 else []]
    ]


def close(
    client: Client,
    workflow_id: str,
    shards: Iterable[str] = (),
    members: Sequence[str] = (),
) -> bool:
    """Close an open workflow, registering its last ``members`` first (in the same call
    when they fit in one); ``True`` when complete at once."""
    chunks = _member_chunks(list(shards), members) if (shards or members) else [[]]
    for args in chunks[:-1]:
        Scripts.for_client(client).workflow_members(keys=[prefix(workflow_id)], args=args)
    return bool(
        Scripts.for_client(client).workflow_close(
            keys=[prefix(workflow_id)], args=["", *chunks[-1]]
        )
    )


def settle(
    client: Client,
    workflow_id: str,
    records: Sequence[tuple[str, str]],
    instance: str = "",
) -> int:
    """Tell instance ``instance`` of a workflow (``""``: whichever) what became of
    members (``(state, member)``): 1 when that completed it, 0 if not, -1 when there is
    no such workflow, or another instance of its id (the records are dropped)."""
    return settle_many(client, [(workflow_id, instance, records)])[0]


def settle_many(
    client: Client, told: Sequence[tuple[str, str, Sequence[tuple[str, str]]]]
) -> list[int]:
    """:func:`settle` of several workflows (``(id, instance, records)``): in one call on
    one server, a call each on a Redis Cluster (each workflow is a slot of its own)."""
    if not told:
        return []
    if is_cluster(client) and len(told) > 1:
        return [settle_many(client, [one])[0] for one in told]
    keys: list[str] = []
    args: list[Any] = [""]
    for workflow_id, instance, records in told:
        keys.append(prefix(workflow_id))
        args += (instance, len(records))
        for state, member in records:
            args += (state, member)
    replies = Scripts.for_client(client).workflow_settle(keys=keys, args=args)
    return [int(reply) for reply in replies]


def hold(client: Client, workflow_id: str, name: str, packed: bytes) -> bool:
    """Keep jobs back until the workflow succeeds: ``False`` when it succeeded already
    (push them now); :class:`WorkflowError` when there is no such workflow."""
    try:
        held = Scripts.for_client(client).workflow_hold(
            keys=[prefix(workflow_id)], args=[name, packed]
        )
    except redis.ResponseError as exc:
        if str(exc).startswith("UNKNOWN"):
            raise WorkflowError(
                f"after={workflow_id!r}: no such workflow (never opened, or expired)"
            ) from None
        raise
    return bool(held)


def expire(client: Client, workflow_id: str, seconds: float) -> None:
    """Let a complete workflow's keys expire in ``seconds`` (its held jobs stay)."""
    base = prefix(workflow_id)
    ms = int(seconds * 1000)
    for name in ("state", "members", "shards"):
        client.pexpire(base + name, ms)


def list_ids(client: Client, offset: int = 0, limit: int = 50) -> list[str]:
    """Workflow ids, newest first."""
    ids = [_text(i) for i in client.zrevrange(INDEX, offset, offset + limit - 1)]
    return [i for i in ids if i != BULK_MARK]


def members(client: Client, workflow_id: str) -> dict[str, str]:
    """A workflow's members: member -> state letter (see the module)."""
    raw = client.hgetall(prefix(workflow_id) + "members")
    return {_text(k): _text(v) for k, v in raw.items()}


#: Workflows completed, all time: ``succeeded`` / ``failed`` (a dead member, or
#: cancelled) -> count (Prometheus ``lowkiq_workflows_completed_total``).
COMPLETED = f"{NAMESPACE}:{{workflows}}:completed"


def count_completion(client: Client, workflow_id: str) -> None:
    """Count a workflow that completed, by its result: called once, where :func:`settle`
    or :func:`close` returned 1 (a crash just before leaves it uncounted)."""
    succeeded = _text(client.hget(prefix(workflow_id) + "state", "succeeded") or "") == "1"
    client.hincrby(COMPLETED, "succeeded" if succeeded else "failed", 1)


def completed_counts(client: Client) -> dict[str, int]:
    """Workflows completed, all time: ``{"succeeded": n, "failed": n}``."""
    raw = client.hmget(COMPLETED, ["succeeded", "failed"])
    return {"succeeded": int(raw[0] or 0), "failed": int(raw[1] or 0)}


def unfinished_count(client: Client) -> int:
    """Workflows not complete (or complete, their callbacks not yet enqueued)."""
    return int(client.zcard(UNFINISHED))
