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
                       ``fired_success`` once enqueued, ``holds`` once it held a call,
                       ``shards`` (``queue \\0 shard`` of every member, where their
                       outboxes are, joined by ``\\0``) once closed
W registered    string its members (``queue \\0 id \\0 digest``), each followed by ``\\0``,
                       once closed
W ended:<i>     set    the members of instance ``i`` that ended (done, dead or
                       discarded)
W states        hash   member -> ``f`` failed (retrying), ``x`` dead, ``c`` discarded (a
                       member ended and not here is done; neither ended nor here:
                       pending)
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
from lowkiq.settings import settings
from lowkiq.storage.keys import NAMESPACE
from lowkiq.storage.scripts import Scripts
from lowkiq.workflows.status import WorkflowStatus, status_of

#: The index of every workflow: id -> when opened.
INDEX = f"{NAMESPACE}:{{workflows}}:index"
#: The workflows not yet complete and fired: id -> when opened (the sweep's work).
UNFINISHED = f"{NAMESPACE}:{{workflows}}:unfinished"
#: A member each index keeps at score 0, longer than a packed sorted set holds: Redis
#: keeps an index a skiplist then (a small one packed is scanned on every add).  Every
#: id has a score above 0 (when it opened).
BULK_MARK = "\xfflowkiq: the mark of a bulk write, longer than any member of a packed key"
#: The scores of ids in an index (not the mark's).
IDS_FROM = "(0"


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
    args: list[Any] = ["", BULK_MARK]
    for field, value in definition.items():
        args += (field, value)
    # On one server the script adds the id to the indexes; a cluster keeps them in a
    # slot of their own.
    indexes = [] if is_cluster(client) else [INDEX, UNFINISHED]
    try:
        opened = scripts.workflow_open(keys=[prefix(workflow_id), *indexes], args=args)
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
    if indexes:
        return
    pipe = client.pipeline(transaction=False)
    for key in (INDEX, UNFINISHED):
        pipe.zadd(key, {BULK_MARK: 0, workflow_id: float(_text(opened))})
    pipe.execute()


def close(
    client: Client,
    workflow_id: str,
    shards: Iterable[str] = (),
    members: Sequence[str] = (),
) -> bool:
    """Close an open workflow, registering its ``members`` (each once) and the shards
    they live in; ``True`` when complete at once.  Without ``members`` (a cancel of a
    workflow whose block never ended) its members are those that ended or failed."""
    names = "".join(f"{member}\0" for member in members)
    args = ["", len(members) if members else "", "\0".join(shards), names, ttl_ms()]
    return bool(Scripts.for_client(client).workflow_close(keys=[prefix(workflow_id)], args=args))


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
    one server, a call each on a Redis Cluster (each workflow is a slot of its own).

    The done members of a known instance go straight to its ``W ended:<instance>`` set
    (one pipelined SADD a workflow, read by no script), then the script counts them
    (see ``lua/workflow_settle.lua``); a workflow with failed members is told again,
    its done members given to the script, which takes them off the failed."""
    if not told:
        return []
    merged = [_merged(records) for _, _, records in told]
    pipe = client.pipeline(transaction=False)
    added = []
    for (workflow_id, instance, _), by_member in zip(told, merged, strict=True):
        done = [member for member, state in by_member.items() if state == "d"] if instance else []
        if done:
            pipe.sadd(ended_key(workflow_id, instance), *done)
        added.append(bool(done))
    pipe.execute()
    calls: list[tuple[list[str], list[Any]]] = []
    for (workflow_id, instance, _), by_member, sent in zip(told, merged, added, strict=True):
        given = {m: s for m, s in by_member.items() if not (sent and s == "d")}
        args = [instance, "1" if sent else "", len(given), "".join(given.values()), *given]
        calls.append(([prefix(workflow_id)], args))
    if not is_cluster(client):
        calls = [([k for keys, _ in calls for k in keys], [a for _, args in calls for a in args])]
    replies = [reply for keys, args in calls for reply in _settle_call(client, keys, args)]
    for at, reply in enumerate(replies):
        if reply == -2:  # failed members: told again, every record given
            workflow_id, instance, _ = told[at]
            by_member = merged[at]
            again = [instance, "", len(by_member), "".join(by_member.values()), *by_member]
            replies[at] = _settle_call(client, [prefix(workflow_id)], again)[0]
    return replies


def _settle_call(client: Client, keys: list[str], args: list[Any]) -> list[int]:
    """One call of ``workflow_settle`` (``args``: the per-workflow ones)."""
    replies = Scripts.for_client(client).workflow_settle(keys=keys, args=["", ttl_ms(), *args])
    return [int(reply) for reply in replies]


def ended_key(workflow_id: str, instance: str) -> str:
    """The set of the members of instance ``instance`` of a workflow that ended."""
    return f"{prefix(workflow_id)}ended:{instance}"


def _merged(records: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Each member of ``records`` (``(state, member)``) once, with its state: an end
    ('d', 'x', 'c') outweighs a retry ('f') of the same member."""
    found: dict[str, str] = {}
    for state, member in records:
        if found.get(member) in (None, "f"):
            found[member] = state
    return found


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


def ttl_ms() -> int:
    """How long a complete workflow's keys are kept (ms): ``settings.workflow_ttl``, set
    by the script that completes it."""
    return max(1, int(settings.workflow_ttl * 1000))


def shards_of(state: dict[str, Any]) -> list[str]:
    """The shards a workflow's members live in, ``queue \\0 shard`` each, from its state
    (written when it closed)."""
    if not state.get("shards"):
        return []
    parts = state["shards"].split("\0")
    return [f"{queue}\0{shard}" for queue, shard in zip(parts[::2], parts[1::2], strict=True)]


def list_ids(client: Client, offset: int = 0, limit: int = 50) -> list[str]:
    """Workflow ids, newest first."""
    ids = [_text(i) for i in client.zrevrange(INDEX, offset, offset + limit - 1)]
    return [i for i in ids if i != BULK_MARK]


def members(client: Client, workflow_id: str) -> dict[str, str]:
    """A workflow's members: member -> state letter (``p`` pending, ``f`` failed, ``d``
    done, ``x`` dead, ``c`` discarded)."""
    base = prefix(workflow_id)
    instance = _text(client.hget(base + "state", "instance") or "")
    found = dict.fromkeys(registered(client.get(base + "registered") or b""), "p")
    found.update((_text(m), "d") for m in client.smembers(ended_key(workflow_id, instance)))
    found.update((_text(k), _text(v)) for k, v in client.hgetall(base + "states").items())
    return found


def letters(client: Client, workflow_id: str, names: Sequence[str]) -> list[str]:
    """The state letters of these members (see :func:`members`)."""
    base = prefix(workflow_id)
    ended_set = ended_key(workflow_id, _text(client.hget(base + "state", "instance") or ""))
    found: list[str] = []
    for start in range(0, len(names), 1000):
        chunk = names[start : start + 1000]
        ended = client.smismember(ended_set, list(chunk))
        kept = client.hmget(base + "states", chunk)
        found += [_text(k) if k else ("d" if e else "p") for e, k in zip(ended, kept, strict=True)]
    return found


def registered(names: bytes | str) -> list[str]:
    """The members of a ``W registered`` string (or of its start: a member cut short is
    left out)."""
    parts = _text(names).split("\0")
    return ["\0".join(parts[at : at + 3]) for at in range(0, len(parts) - 3, 3)]


#: Workflows completed, all time: ``succeeded`` / ``failed`` (a dead member, or
#: cancelled) -> count (Prometheus ``lowkiq_workflows_completed_total``).
COMPLETED = f"{NAMESPACE}:{{workflows}}:completed"


def count_completion(client: Client, succeeded: bool) -> None:
    """Count a workflow that completed, by its result: called once, where a script that
    completed it returned 1 (a crash just after leaves it uncounted)."""
    client.hincrby(COMPLETED, "succeeded" if succeeded else "failed", 1)


def completed_counts(client: Client) -> dict[str, int]:
    """Workflows completed, all time: ``{"succeeded": n, "failed": n}``."""
    raw = client.hmget(COMPLETED, ["succeeded", "failed"])
    return {"succeeded": int(raw[0] or 0), "failed": int(raw[1] or 0)}


def unfinished_count(client: Client) -> int:
    """Workflows not complete (or complete, their callbacks not yet enqueued)."""
    return int(client.zcount(UNFINISHED, IDS_FROM, "+inf"))
