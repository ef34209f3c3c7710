"""From a shard's outbox to its workflows, and from a complete workflow to its callbacks.

The script that ends a batch notes each workflow member of it in the shard's outbox
(``wf_outbox``, same slot, same script: a crash cannot split them).  :func:`relay`
tells each workflow (a script in the workflow's slot, idempotent per member) and only
then deletes those fields, so a crash in between tells it again, which changes
nothing.  The process that ended the batch has its relay thread
(:mod:`lowkiq.workflows.relayer`) do it at once; :func:`sweep` finds
workflows left behind by a crash and relays the shards they live in.

The script that completes a workflow returns 1 once: :func:`fire` then enqueues its
callbacks, each a push made once (a flag in the callback's shard, set by the push
script itself), marks them fired and moves its held jobs on (its keys expire already:
the completing script set that).
:func:`sweep` fires again what a crash left unfired.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from lowkiq.clients.connection import Client
from lowkiq.settings import settings
from lowkiq.storage import blob, layout
from lowkiq.storage import workflow_tags as tags
from lowkiq.storage.keys import NAMESPACE, QueueKeys
from lowkiq.storage.processing import processing_blob
from lowkiq.workflows import held, store
from lowkiq.workflows.status import status_of

log = logging.getLogger(__name__)

#: A workflow closed this long ago (seconds) and not complete, or complete and not
#: fired, is looked at by :func:`sweep`.
SWEEP_AFTER = 10.0
#: Workflows :func:`sweep` looks at per call.
SWEEP_BATCH = 200
#: The sweep runs in one process of the fleet at a time, at most this often (seconds).
SWEEP_EVERY = 5.0
SWEEP_LOCK = f"{NAMESPACE}:{{workflows}}:sweeping"
#: Where the last sweep stopped in the unfinished index (its score), so that the next one
#: goes on from there, whatever the number of long-running workflows before it.
SWEEP_CURSOR = f"{NAMESPACE}:{{workflows}}:sweep_cursor"


def outbox(queue_name: str, shard: int) -> str:
    """The outbox of a shard (see :mod:`lowkiq.storage.keys`)."""
    return f"{NAMESPACE}:{{{queue_name}:{shard}}}:wf_outbox"


@dataclass
class Outbox:
    """What a shard's outbox holds: its fields, the copies of acked areas they name, and
    the records read from both, by ``(workflow, instance)``: ``(state, member)``."""

    fields: list[Any] = field(default_factory=list)
    copies: list[str] = field(default_factory=list)
    records: dict[tuple[str, str], list[tuple[str, str]]] = field(default_factory=dict)


def read_outbox(client: Client, queue_name: str, shard: int) -> Outbox:
    """The records of a shard's outbox (see ``wf_note`` and ``wf_copy_area`` in
    ``lua/_common.lua``)."""
    return read_outboxes(client, [(queue_name, shard)])[0]


def read_outboxes(client: Client, shards: Sequence[tuple[str, int]]) -> list[Outbox]:
    """:func:`read_outbox` of several shards ``(queue, shard)``: two round trips for
    them all (their fields, then the copies those name)."""
    pipe = client.pipeline(transaction=False)
    for queue_name, shard in shards:
        pipe.hkeys(outbox(queue_name, shard))
    boxes = [Outbox(list(fields)) for fields in pipe.execute()]
    for (queue_name, shard), box in zip(shards, boxes, strict=True):
        for name in box.fields:
            if name.startswith(b"a\0"):  # an acked batch's area: its members are done
                box.copies.append(done_area(queue_name, shard, name[2:].decode()))
                continue
            state, workflow_id, instance, member = name.decode().split("\0", 3)
            box.records.setdefault((workflow_id, instance), []).append((state, member))
    for box in boxes:
        for copy in box.copies:
            pipe.hgetall(copy)
    areas = iter(pipe.execute())
    for (queue_name, _), box in zip(shards, boxes, strict=True):
        for _ in box.copies:
            for job_id, value in next(areas).items():
                for workflow_id, instance, member in _members(queue_name, job_id.decode(), value):
                    box.records.setdefault((workflow_id, instance), []).append(("d", member))
    return boxes


def relay(client: Client, queue_name: str, shard: int) -> int:
    """Tell the workflows what the shard's outbox holds; fire those it completes.
    Returns how many records went."""
    return relay_many(client, [(queue_name, shard)])


def relay_many(client: Client, shards: Sequence[tuple[str, int]]) -> int:
    """:func:`relay` of several shards ``(queue, shard)`` at once: their records merged
    per workflow, so that a workflow with members in many of them is told once.
    Returns how many records went."""
    boxes = read_outboxes(client, shards)
    records: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for box in boxes:
        for key, found in box.records.items():
            records.setdefault(key, []).extend(found)
    told = [(wf, instance, found) for (wf, instance), found in records.items()]
    for (workflow_id, _, _), completed in zip(told, store.settle_many(client, told), strict=True):
        if completed == 1:
            fire(client, workflow_id, completed=True)
    pipe = client.pipeline(transaction=False)
    for (queue_name, shard), box in zip(shards, boxes, strict=True):
        for copy in box.copies:  # (a key a DEL: a cluster's pipeline sends no other)
            pipe.delete(copy)
        if box.fields:
            pipe.hdel(outbox(queue_name, shard), *box.fields)
    pipe.execute()
    return sum(len(box.fields) for box in boxes)


def done_area(queue_name: str, shard: int, batch: str) -> str:
    """The copy of an acked batch's processing area (see :mod:`lowkiq.storage.keys`)."""
    return f"{NAMESPACE}:{{{queue_name}:{shard}}}:wf_done:{batch}"


def _members(queue_name: str, job_id: str, value: bytes) -> list[tuple[str, str, str]]:
    """``(workflow, instance, member)`` of each tagged payload of a processing-area value,
    as ``wf_note`` in ``lua/_common.lua`` names them."""
    found = []
    for stored, _ in blob.unpack(processing_blob(value)):
        if stored.startswith(tags.MARK):
            workflow_id, instance = tags.tag_of(stored)
            found.append((workflow_id, instance, tags.member(queue_name, job_id, stored)))
    return found


def _callback_payload(workflow_id: str, state: dict[str, Any]) -> bytes:
    """A callback job's stored payload: ``{"workflow", "payload", "status"}``."""
    codec = settings.codec
    payload = state.get("payload")
    given = None if payload in (None, b"") else codec.load_payload(payload)
    body = {"workflow": workflow_id, "payload": given, "status": status_of(state).as_dict()}
    dumped = codec.dump_payload(body)
    return dumped.encode() if isinstance(dumped, str) else dumped


def fire(client: Client, workflow_id: str, completed: bool = False) -> bool:
    """Enqueue a complete workflow's callbacks that are not yet (each once) and move its
    held jobs on when it succeeded; with ``completed`` (the script
    that completed it returned 1: called once), count its completion.  ``False``
    when not complete."""
    state = store.read_state(client, workflow_id)
    if state is None or state.get("status") != "complete":
        return False
    succeeded = state.get("succeeded") == "1"
    flags: dict[Any, Any] = {}
    for kind in ("complete", "success"):
        target = state.get(f"on_{kind}")
        if not target or state.get(f"fired_{kind}") or (kind == "success" and not succeeded):
            continue
        queue_name, shards, _ = target.split("\0", 2)
        score = float(state["completed_at"])
        job = (workflow_id, _callback_payload(workflow_id, state), score, None, None)
        name = f"wf:{workflow_id}:{state['created_at']}:{kind}"
        held.push_once(client, queue_name, int(shards), [job], name)
        flags[f"fired_{kind}"] = 1
    if succeeded and state.get("holds"):
        held.move_on(client, workflow_id)
    # Each step above is made once whatever runs it again: its marks are written last.
    # (Its keys expire already: the script that completed it set that.)
    pipe = client.pipeline(transaction=False)
    if flags:
        pipe.hset(store.prefix(workflow_id) + "state", mapping=flags)
    pipe.zrem(store.UNFINISHED, workflow_id)
    if completed:
        store.count_completion(pipe, succeeded)
    pipe.execute()
    return True


def relay_shards(client: Client, shards: Iterable[str]) -> int:
    """:func:`relay_many` of shards named ``queue \\0 shard``."""
    named = [name.split("\0") for name in shards]
    return relay_many(client, [(queue_name, int(shard)) for queue_name, shard in named])


def _with_current_shards(client: Client, names: list[str]) -> list[str]:
    """``names`` (``queue \0 shard``) and every shard of their queues' layouts now: a
    reshard may have moved members since they were enqueued."""
    found = dict.fromkeys(names)
    for queue_name in dict.fromkeys(name.split("\0")[0] for name in names):
        fields: dict[Any, Any] = client.hgetall(QueueKeys(queue_name).layout_hash)
        if fields:
            for shard in layout.parse(fields).shards:
                found[f"{queue_name}\0{shard}"] = None
    return list(found)


def _ids(raw: Iterable[Any]) -> list[str]:
    return [i.decode() if isinstance(i, bytes) else i for i in raw]


def sweep(client: Client, now: float) -> int:
    """Finish what crashes left: relay the shards of workflows closed at least
    :data:`SWEEP_AFTER` ago and not complete, fire complete ones not fired, drop
    expired ones from the index.  One process of the fleet at a time (a lock); returns
    how many workflows it looked at."""
    if not client.set(SWEEP_LOCK, 1, nx=True, px=int(SWEEP_EVERY * 1000)):
        return 0
    old = now - settings.workflow_ttl
    for workflow_id in _ids(client.zrangebyscore(store.INDEX, store.IDS_FROM, old, 0, SWEEP_BATCH)):
        if not client.exists(store.prefix(workflow_id) + "state"):
            client.zrem(store.INDEX, workflow_id)
    looked = 0
    cursor = client.get(SWEEP_CURSOR)
    start = f"({float(cursor)!r}" if cursor else store.IDS_FROM
    batch: Any = client.zrangebyscore(
        store.UNFINISHED, start, now - SWEEP_AFTER, 0, SWEEP_BATCH, withscores=True
    )
    if len(batch) < SWEEP_BATCH:
        client.delete(SWEEP_CURSOR)  # the next sweep starts over
    else:
        client.set(SWEEP_CURSOR, repr(batch[-1][1]))
    for workflow_id in _ids(member for member, _ in batch):
        state = store.read_state(client, workflow_id)
        if state is None:
            client.zrem(store.UNFINISHED, workflow_id)
            continue
        looked += 1
        if state.get("status") == "closed":
            relay_shards(client, _with_current_shards(client, store.shards_of(state)))
        elif state.get("status") == "complete":
            fire(client, workflow_id)
    return looked
