"""``lowkiq.Workflow``: fan-out, fan-in and dependencies (SPEC §12, docs/guides/workflows.md).

Inside ``with Workflow(...)``, every payload enqueued (any worker, ``perform_async`` or
``aperform_async``) is stored tagged with the workflow (:mod:`lowkiq.storage.workflow_tags`)
and counted as a member; the block's end registers the members and closes the
workflow.  Members settle as their batches end (:mod:`lowkiq.workflows.relay`); the
last one fires the callbacks, once.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import uuid
import zlib
from collections.abc import Callable, Sequence
from contextvars import ContextVar, Token
from types import TracebackType
from typing import TYPE_CHECKING, Any

import redis

from lowkiq.errors import WorkflowError
from lowkiq.settings import Settings, settings
from lowkiq.storage import layout as layouts
from lowkiq.storage import workflow_tags as tags
from lowkiq.storage.keys import QueueKeys
from lowkiq.storage.queue import NewJob
from lowkiq.workflows import held, relay, store
from lowkiq.workflows.status import WorkflowStatus

if TYPE_CHECKING:
    from lowkiq.worker import Worker

#: Seconds the end of a workflow's block waits for Redis to answer its close.
CLOSE_PATIENCE = 10.0

_CURRENT: ContextVar[Workflow | None] = ContextVar("lowkiq_workflow", default=None)


def _check_id(workflow_id: object) -> str:
    if not isinstance(workflow_id, str) or not workflow_id:
        raise WorkflowError(f"a workflow id is a non-empty string, got {workflow_id!r}")
    if "\0" in workflow_id or len(workflow_id.encode()) > tags.MAX_ID_BYTES:
        raise WorkflowError(f"workflow id {workflow_id[:80]!r}: no NUL, at most 65535 bytes")
    return workflow_id


def _callback(kind: str, worker: object) -> str | None:
    """A callback as stored: ``queue \\0 shards \\0 worker name``."""
    if worker is None:
        return None
    # A lowkiq.Worker subclass (this module is below lowkiq.worker: told by what it has).
    if not (
        isinstance(worker, type)
        and callable(getattr(worker, "perform_async", None))
        and isinstance(getattr(worker, "queue_name", None), str)
    ):
        raise WorkflowError(f"{kind} must be a lowkiq.Worker subclass or None, got {worker!r}")
    target: Any = worker
    target.validate()
    return f"{target.queue_name}\0{target.shards_count}\0{target.__name__}"


class WorkflowRef:
    """A workflow known by id (:func:`workflow`): its status, cancel, its held jobs."""

    def __init__(self, workflow_id: str, config: Settings = settings) -> None:
        self.id = _check_id(workflow_id)
        self.config = config

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.id!r}>"

    def status(self) -> WorkflowStatus:
        """Its members by state; :class:`WorkflowError` when there is no such workflow."""
        return store.status(self.config.client(), self.id)

    def cancel(self) -> int:
        """Cancel it: its queued members are deleted, and it completes now, without
        succeeding (``on_complete`` fires, ``on_success`` never, jobs ``after=`` it stay
        held).  Every member not ended counts as discarded: a running one finishes its
        perform but is not waited for; one never stored (a ``perform_async`` that raised
        in the block, a held call deleted) ends so.  An open workflow (its block still
        running, or its process gone) is closed with the members it knows, those that
        ended: the others, known only to that block, are not waited for (queued, they
        still run).  Returns the payloads deleted (0, and nothing changed, when it is
        complete already)."""
        from lowkiq.storage.queue import Queue

        client = self.config.client()
        base = store.prefix(self.id)
        state = store.read_state(client, self.id)
        if state is None:
            raise WorkflowError(f"no workflow {self.id!r} (never opened, or expired)")
        if state.get("status") == "complete":
            return 0
        instance = state.get("instance", "")
        client.hset(base + "state", "cancelled", 1)
        pending: dict[str, list[str]] = {}
        for member, letter in store.members(client, self.id).items():
            if letter in ("p", "f"):
                queue_name, job_id, _ = member.split("\0")
                pending.setdefault(queue_name, []).append(job_id)
        dropped = 0
        shards = store.shards_of(state)
        for (queue_name, shard), ids in _holding_shards(client, shards, pending).items():
            queue = Queue(client, queue_name, shard + 1, self.config.codec)
            tag_text = f"{self.id}\0{instance}"
            dropped += int(queue.run("workflow_drop", shard, tag_text, *ids))
            relay.relay(client, queue_name, shard)
        completed = False
        if state.get("status") == "open":
            with contextlib.suppress(redis.ResponseError):  # its block closed it meanwhile
                completed = store.close(client, self.id)
        left = [("c", m) for m, letter in store.members(client, self.id).items() if letter in "pf"]
        if store.settle(client, self.id, left, instance) == 1 or completed:
            relay.fire(client, self.id, completed=True)
        return dropped

    def held(self) -> list[held.HeldCall]:
        """The calls of jobs enqueued ``after=`` it and held until it succeeds."""
        return held.held_calls(self.config.client(), self.id)

    def release_held(self) -> int:
        """Enqueue its held calls now, whatever its status; returns how many."""
        return held.release_held(self.config.client(), self.id)

    def delete_held(self) -> int:
        """Delete its held calls; returns how many."""
        return held.delete_held(self.config.client(), self.id)


class Workflow(WorkflowRef):
    """A workflow: ``with lowkiq.Workflow(id, on_complete=W, on_success=W, payload=p):``
    (or ``async with``) makes every payload enqueued inside a member.  When the last
    member ends, ``on_complete`` (and ``on_success`` when none is dead) gets one job, id
    the workflow's, payload ``{"workflow": id, "payload": payload, "status": {...}}``."""

    def __init__(
        self,
        id: str,  # noqa: A002 - the public name of SPEC §12
        on_complete: type[Worker] | None = None,
        on_success: type[Worker] | None = None,
        payload: Any = None,
        config: Settings = settings,
    ) -> None:
        super().__init__(id, config)
        self._definition: dict[str, Any] = {}
        for kind, worker in (("on_complete", on_complete), ("on_success", on_success)):
            target = _callback(kind, worker)
            if target is not None:
                self._definition[kind] = target
        if payload is not None:
            try:
                dumped = config.codec.dump_payload(payload)
            except Exception as exc:
                raise WorkflowError(
                    f"workflow {id!r}: payload cannot be serialized: {exc}"
                ) from exc
            self._definition["payload"] = dumped.encode() if isinstance(dumped, str) else dumped
        #: This workflow's instance (its id may be reused once it is complete).
        self.instance = uuid.uuid4().hex[:12]
        self._definition["instance"] = self.instance
        # Member -> how many calls enqueued it (a call that stored nothing takes its
        # count back: :meth:`untagged`).
        self._members: dict[str, int] = {}
        self._shards: set[str] = set()
        self._lock = threading.Lock()
        self._phase = "new"  # then "open", then "closed"
        self._token: Token[Workflow | None] | None = None

    # -- the block ----------------------------------------------------------------

    def __enter__(self) -> Workflow:
        self._open()
        self._token = _CURRENT.set(self)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._leave()
        self._close()

    async def __aenter__(self) -> Workflow:
        await asyncio.to_thread(self._open)
        self._token = _CURRENT.set(self)
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._leave()
        await asyncio.to_thread(self._close)

    def _open(self) -> None:
        if self._phase != "new":
            raise WorkflowError(f"workflow {self.id!r}: a Workflow object is entered once")
        store.open_(self.config.client(), self.id, self._definition)
        self._phase = "open"

    def _leave(self) -> None:
        if self._token is not None:
            _CURRENT.reset(self._token)
            self._token = None

    def _close(self) -> None:
        """Register the members, then close (the members' jobs may be running already:
        a member told ended before it is registered keeps its state).  Redis away (a
        restart, a dropped connection) is waited for up to :data:`CLOSE_PATIENCE`
        seconds: both steps may run again (a close whose reply was lost is done)."""
        with self._lock:
            self._phase = "closed"
            members, shards = list(self._members), sorted(self._shards)
        client = self.config.client()
        deadline = time.monotonic() + CLOSE_PATIENCE
        pause = 0.05
        while True:
            try:
                self._register_and_close(client, shards, members)
                return
            except (redis.ConnectionError, redis.TimeoutError):
                if time.monotonic() + pause > deadline:
                    raise
                time.sleep(pause)
                pause = min(pause * 2, 1.0)

    def _register_and_close(self, client: Any, shards: list[str], members: list[str]) -> None:
        try:
            completed = store.close(client, self.id, shards, members)
        except redis.ResponseError as exc:
            state = store.read_state(client, self.id)
            if not str(exc).startswith("CLOSED") or state is None:
                raise
            # Closed already: by a close whose reply was lost, or by a cancel.
            if state.get("status") == "complete":
                relay.fire(client, self.id)  # the sweep would, later
            return
        if completed:
            relay.fire(client, self.id, completed=True)

    # -- its members ----------------------------------------------------------------

    def tagged(
        self, queue_name: str, shard_of: Callable[[str], int], jobs: Sequence[NewJob]
    ) -> list[NewJob]:
        """``jobs`` of ``queue_name`` as members: payloads tagged, members counted."""
        with self._lock:
            if self._phase != "open":
                raise WorkflowError(
                    f"workflow {self.id!r} is {self._phase}: a member is enqueued inside its "
                    f"open `with` block (a thread or task that outlived it enqueued this one)"
                )
            result: list[NewJob] = []
            for job_id, payload, score, perform_in, group in jobs:
                stored = tags.tag(self.id, self.instance, payload)
                name = tags.member(queue_name, job_id, stored)
                self._members[name] = self._members.get(name, 0) + 1
                self._shards.add(f"{queue_name}\0{shard_of(job_id)}")
                result.append((job_id, stored, score, perform_in, group))
            return result

    def untagged(self, queue_name: str, jobs: Sequence[NewJob]) -> None:
        """:meth:`tagged` undone for ``jobs`` (as it returned them), whose call stored
        nothing: a member no other call enqueued is no member."""
        with self._lock:
            for job_id, stored, *_ in jobs:
                name = tags.member(queue_name, job_id, stored)
                count = self._members.get(name, 0) - 1
                if count > 0:
                    self._members[name] = count
                else:
                    self._members.pop(name, None)


def _holding_shards(
    client: Any, recorded: Any, pending: dict[str, list[str]]
) -> dict[tuple[str, int], list[str]]:
    """Where the ``pending`` ids (by queue) may be queued: ``(queue, shard)`` -> ids.

    Each id is in a shard its queue's members were enqueued to (``recorded``, the
    workflow's ``shards``), unless the queue was resharded since: then in the shard the
    queue's layout gives it now (or, while a reshard runs, its shard before).  A script
    looks up only the keys of its own shard."""
    targets: dict[tuple[str, int], dict[str, None]] = {}
    known: dict[str, set[int]] = {}
    for name in recorded:
        queue_name, shard = (name.decode() if isinstance(name, bytes) else name).split("\0")
        known.setdefault(queue_name, set()).add(int(shard))
    for queue_name, ids in pending.items():
        shards = known.get(queue_name, set())
        for shard in shards:
            targets.setdefault((queue_name, shard), {}).update(dict.fromkeys(ids))
        # (Read, never written: a push wrote it; none, and the recorded shards are all.)
        fields: Any = client.hgetall(QueueKeys(queue_name).layout_hash)
        if b"count" not in fields:
            continue
        layout = layouts.parse(fields)
        for job_id in ids:
            places = {layout.shard_of(job_id)}
            if layout.previous is not None:
                old_base, old_count = layout.previous
                places.add(old_base + zlib.crc32(job_id.encode()) % old_count)
            for shard in places - shards:
                targets.setdefault((queue_name, shard), {})[job_id] = None
    return {key: list(ids) for key, ids in sorted(targets.items())}


def current() -> Workflow | None:
    """The workflow whose ``with`` block encloses the caller, if any."""
    return _CURRENT.get()


def workflow(workflow_id: str, config: Settings = settings) -> WorkflowRef:
    """A workflow by id, from anywhere (``.status()``, ``.cancel()``, its held jobs)."""
    return WorkflowRef(workflow_id, config)


def members_of(
    queue_name: str,
    shard_of: Callable[[str], int],
    jobs: list[NewJob],
    enclosing: Workflow | None,
) -> list[NewJob]:
    """``jobs`` as members of ``enclosing`` (tagged), the workflow whose block enclosed
    the call that enqueues them (:func:`current` then: a Django ``on_commit`` enqueue
    runs later), or as they are."""
    return jobs if enclosing is None else enclosing.tagged(queue_name, shard_of, jobs)


def check_after(after: str | Sequence[str] | None) -> list[str]:
    """``after=`` as a list of workflow ids (empty: none); :class:`WorkflowError` when
    malformed."""
    if after is None:
        return []
    ids = [after] if isinstance(after, str) else list(after)
    return [_check_id(workflow_id) for workflow_id in ids]


def hold_jobs(client: Any, worker: type[Worker], after: list[str], jobs: list[NewJob]) -> None:
    """Keep ``jobs`` of ``worker`` until every workflow of ``after`` succeeded (pushed at
    once when they all have); :class:`WorkflowError`, nothing held, when one is unknown
    or is the workflow whose block encloses the call (its members would wait for it to
    succeed: never); then, inside a block, ``jobs`` are not members (:func:`members_of`
    counted them)."""
    enclosing = _CURRENT.get()
    try:
        if enclosing is not None and enclosing.id in after:
            raise WorkflowError(
                f"after={enclosing.id!r} inside its own block: the jobs would be members "
                f"waiting for their own workflow to succeed, which never happens"
            )
        for workflow_id in after:
            if not client.exists(store.prefix(workflow_id) + "state"):
                raise WorkflowError(
                    f"after={workflow_id!r}: no such workflow (never opened, or expired)"
                )
        call = held.new_call(
            worker.queue_name, worker.shards_count, worker.merge_perform_in, after, jobs
        )
        held.hold(client, call)
    except WorkflowError:
        if enclosing is not None:
            enclosing.untagged(worker.queue_name, jobs)
        raise
