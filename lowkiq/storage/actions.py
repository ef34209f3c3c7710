"""Bulk operations on one queue, built from the queue's scripts and reads.

Operations over a whole queue, or over many ids, work in chunks of
:data:`CHUNK` jobs of one shard, each chunk one atomic script call, so Redis is
never blocked for long.  No action touches a processing area: for an id being
performed, only what is queued for it is changed; its running batch is not (a
move waits for it to end, see :meth:`Actions.move`).

During a reshard an id's jobs may be in its old shard and in its new one: an
action on ids changes both.  In an old shard the reshard has retired, the jobs
it has not read yet change in place (it moves them as they then are); an id it
is moving (read, not yet removed) is waited for, then changed in its new shard.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from lowkiq.errors import ConfigurationError, InvalidQuery
from lowkiq.storage.group_actions import GroupActions
from lowkiq.storage.layout import Layout
from lowkiq.storage.queue import Queue
from lowkiq.storage.unreachable import public_calls_raise_unavailable

#: Jobs handled by one script call of a bulk operation.
CHUNK = 1000

#: The error a job killed by hand gets when it has none of its own.
KILLED_ERROR = "killed by hand (Worker.actions().kill); it had no error of its own"

#: Times a move puts a chunk again when the target queue was resharded meanwhile.
MOVE_REROUTES = 3

#: Seconds a move waits, by default, for the running batch of an id it moves.
MOVE_WAIT = 30.0

#: Seconds a move holds the jobs it read (no pop takes them before they are taken out).
MOVE_HOLD = 30.0

#: Seconds an action waits for the ids a reshard is moving (read, not yet removed).
RESHARD_WAIT = 60.0

#: Seconds between two looks at ids a reshard is moving, or at a running batch.
POLL = 0.02

#: Times an action over ids acts again (on the ids not found) when the queue's layout
#: changed while it acted (a reshard began or ended).
LAYOUT_ROUNDS = 3


class ReshardStalled(InvalidQuery):
    """Jobs an action was to change are held by a reshard that stopped part-way (its
    command was interrupted): run ``lowkiq reshard`` again to finish it, then act again."""


class JobsRunning(InvalidQuery):
    """:meth:`Actions.move` waited for these ids' running batches in vain: nothing of
    them moved (their queued jobs are as they were); the other ids moved."""

    def __init__(self, message: str, moved: int, running: list[str]) -> None:
        super().__init__(message)
        #: How many jobs did move.
        self.moved = moved
        #: The ids whose batch was still running: not moved.
        self.running = running


#: What an action does to one chunk of ids of one shard: ``(ids it changed, ids a
#: reshard is moving, left alone)``.
Act = Callable[[int, list[str]], tuple[list[str], list[str]]]


@dataclass(frozen=True)
class _Read:
    """A job a move read (``move_read``): its id, payloads, error, group, and the
    ``perform_in`` it had before the move held it."""

    job_id: str
    packed: bytes
    error: bytes | None
    group: bytes
    perform_in: bytes


class HasQueue(Protocol):
    """What :meth:`Actions.move` moves jobs to: a worker class (its ``queue()``)."""

    def queue(self) -> Queue:
        """The storage of the worker's queue."""
        ...


#: Puts back into a queue the batches left in processing in shards no process holds,
#: taking and releasing their leases; returns how many jobs went back.  Ownership
#: provides it (:meth:`lowkiq.Worker.actions` passes it in), storage only calls it.
RestoreOrphaned = Callable[[Queue], int]


@public_calls_raise_unavailable("actions")
class Actions(GroupActions):
    """Operator actions of one queue (used by the dashboard); each returns a count.
    Redis out of reach raises :class:`lowkiq.RedisUnavailable`."""

    def __init__(self, queue: Queue, restore_orphaned: RestoreOrphaned | None = None) -> None:
        self.queue = queue
        self.keys = queue.keys
        self.client = queue.client
        self._restore_orphaned = restore_orphaned

    @functools.cached_property
    def shard_of(self) -> Callable[[str], int]:
        """The shard each id's jobs are changed in (see :meth:`Queue.locator`)."""
        return self.queue.locator()

    def perform_all_jobs_now(self) -> int:
        """Set every queued job's ``perform_in`` to now; returns how many moved."""
        total = 0
        for shard in self.queue.shards:  # now on Redis's clock
            while moved := self.queue.run("perform_now", shard, "", CHUNK):
                total += moved
        return total

    def kill_all_failed_jobs(self) -> int:
        """Move queued jobs with ``retry_count >= 0``, whole, to the morgue."""
        return self._drain(
            self.keys.retry_count_zset,
            lambda shard, ids: self.queue.run("kill_failed", shard, "", *ids),
        )

    def delete_all_failed_jobs(self) -> int:
        """Delete queued jobs with ``retry_count >= 0``."""
        return self._drain(
            self.keys.retry_count_zset,
            lambda shard, ids: self.queue.run("delete_failed", shard, *ids),
        )

    def delete(self, ids: Iterable[Any]) -> int:
        """Delete these queued jobs (fresh, retries, due or not) with their payloads;
        returns how many ids were queued.  Dead jobs are :meth:`morgue_delete`'s."""
        return self._per_id(ids, lambda shard, chunk: self._run_act("jobs_delete", shard, chunk))

    def cancel(self, ids: Iterable[Any]) -> int:
        """Cancel these ids: their queued jobs are deleted (as :meth:`delete` does), and
        the running perform of each, on whatever process runs it, sees
        ``current_batch().should_stop()`` true within about a second; once it ends, the
        cancelled jobs of its batch are settled as cancelled (not failed, retried or
        dead; counted in the ``cancelled`` metric), whatever ``perform`` did.  Their
        payloads enqueued after the cancel are new work and run.  Returns how many ids
        were queued or running (see :mod:`lowkiq.storage.cancels`)."""
        from lowkiq.storage.cancels import cancel

        return cancel(self, ids)

    def perform_now(self, ids: Iterable[Any]) -> int:
        """Make these queued jobs due now (``perform_in = now`` for those not yet due;
        due ones keep their place, every job its ``retry_count``); returns how many
        ids were queued."""
        return self._per_id(
            ids, lambda shard, chunk: self._run_act("jobs_perform_now", shard, chunk, "")
        )

    def kill(self, ids: Iterable[Any]) -> int:
        """Move these queued jobs, whole, to the morgue (a job that never failed gets
        :data:`KILLED_ERROR` as its error); returns how many ids were queued."""
        error = self.queue.codec.error_bytes(KILLED_ERROR)
        return self._per_id(
            ids, lambda shard, chunk: self._run_act("jobs_kill", shard, chunk, "", error)
        )

    def clear(self) -> int:
        """Delete every queued job of the queue (not the processing areas, not the
        morgue), a chunk at a time; returns how many."""
        total = 0
        for shard in self.queue.shards:
            while cleared := int(self.queue.run("jobs_clear", shard, CHUNK)):
                total += cleared
        return total

    def move(self, ids: Iterable[Any], to: HasQueue, wait: float = MOVE_WAIT) -> int:
        """Move these queued jobs to the queue of the worker ``to`` (a worker class):
        payloads keep their scores and merge as a dead job queued up does (SPEC §3 rule
        4: ``perform_in = now``, ``retry_count = -1``, the error stays); returns how many
        ids moved.

        An id whose batch is running is moved once that batch ended (acked, or failed
        back into the queue: its payloads then move too, in order); meanwhile its queued
        job is held, so no new batch of it starts.  After ``wait`` seconds, the ids whose
        batch still runs are not moved at all (their queued jobs are as they were) and
        :class:`JobsRunning` names them, after the other ids moved.

        Per chunk of one shard: the jobs are read (and held), put into the target
        queue, then only the payloads put there are taken out of this one (a payload
        enqueued meanwhile stays, with its schedule).  On a Redis Cluster the two
        queues' shards are different slots, so no one script can do both: a crash
        between the steps leaves a payload in both queues (performed twice at worst,
        after the hold, :data:`MOVE_HOLD` seconds), never in neither.
        """
        target = _target_queue(to)
        target.refresh_layout()
        if target.name == self.queue.name:
            raise InvalidQuery(f"cannot move jobs of {self.queue.name} onto their own queue")
        deadline = time.monotonic() + wait
        running: list[str] = []
        moved = self._per_id(
            ids, lambda shard, chunk: self._move_chunk(shard, chunk, target, deadline, running)
        )
        if running:
            shown = ", ".join(running[:10]) + (", ..." if len(running) > 10 else "")
            raise JobsRunning(
                f"{moved} job(s) moved to {target.name}; {len(running)} id(s) not moved, "
                f"their batch still running after {wait:g} s: {shown}",
                moved,
                running,
            )
        return moved

    def perform_all_failed_jobs_now(self) -> int:
        """Make every queued job with ``retry_count >= 0`` due now (retry counts stay);
        returns how many there were."""
        return self._each_chunk(
            self.keys.retry_count_zset,
            lambda shard, ids: len(self._run_act("jobs_perform_now", shard, ids, "")[0]),
        )

    def delete_all_scheduled_jobs(self) -> int:
        """Delete every queued job not yet due (``perform_in`` after now, on Redis's
        clock), a chunk at a time; returns how many."""
        seconds, micros = self.client.time()
        after = f"({seconds + micros / 1e6!r}"
        total = 0
        for shard in self.queue.shards:
            key = self.keys.perform_in_zset(shard)
            while ids := [
                _text(i) for i in self.client.zrangebyscore(key, after, "+inf", 0, CHUNK)
            ]:
                deleted = len(self._run_act("jobs_delete", shard, ids)[0])
                total += deleted
                if deleted == 0:
                    break
        return total

    def morgue_queue_up(self, ids: Iterable[Any]) -> int:
        """Move these dead jobs back to the queue, due now (SPEC §3 rule 4)."""
        return self._by_shard(ids, self._morgue_queue_up)

    def morgue_queue_up_all_jobs(self) -> int:
        """Move every dead job back to the queue, due now."""
        return self._drain(self.keys.morgue_updated_at_zset, self._morgue_queue_up)

    def morgue_delete(self, ids: Iterable[Any]) -> int:
        """Delete these dead jobs."""
        return self._by_shard(ids, self._morgue_delete)

    def morgue_delete_all_jobs(self) -> int:
        """Delete every dead job (a chunk at a time, hot ids' payloads with them)."""
        return self._drain(self.keys.morgue_updated_at_zset, self._morgue_delete)

    def restore_orphaned_batches(self) -> int:
        """Put back into the queue the batches left in processing in shards no process
        holds (a process died, and no live process serves the queue: shown as busy
        forever otherwise); returns how many jobs went back.  Needs the
        ``restore_orphaned`` these actions were made with (:meth:`lowkiq.Worker.actions`
        gives it)."""
        if self._restore_orphaned is None:
            raise ConfigurationError(
                "restore_orphaned_batches needs actions made with restore_orphaned "
                "(use Worker.actions())"
            )
        return self._restore_orphaned(self.queue)

    def _morgue_queue_up(self, shard: int, ids: list[str]) -> int:
        return int(self.queue.run("morgue_queue_up", shard, "", *ids))

    def _morgue_delete(self, shard: int, ids: list[str]) -> int:
        return int(self.queue.run("morgue_delete", shard, *ids))

    # -- acting on ids, on any layout ------------------------------------------

    def _run_act(self, script: str, shard: int, ids: list[str], *args: Any) -> Any:
        """Run an action script (``jobs_*``) on ``ids`` of ``shard``: ``(ids changed,
        ids a reshard is moving)``."""
        changed, moving = self.queue.run(script, shard, *args, *ids)
        return [_text(i) for i in changed], [_text(i) for i in moving]

    def _places(self, layout: Layout) -> Callable[[str], list[int]]:
        """The shards an id's queued jobs may be in: during a reshard its old shard (until
        emptied) and its new one, old first."""
        if layout.previous is None:
            return lambda job_id: [layout.shard_of(job_id)]
        old = Layout(*layout.previous)
        emptied = {int(shard) for shard in self.client.smembers(self.keys.retired_set)}

        def places(job_id: str) -> list[int]:
            first, new = old.shard_of(job_id), layout.shard_of(job_id)
            return [new] if first in emptied else [first, new]

        return places

    def _per_id(self, ids: Iterable[Any], act: Act) -> int:
        """Apply ``act`` to the given ids (each once) in every shard their queued jobs
        may be in, at most :data:`CHUNK` ids a call; returns how many ids it changed."""
        pending = _checked_ids(ids)
        changed: set[str] = set()
        for _ in range(LAYOUT_ROUNDS):
            layout = self.queue.refresh_layout()
            places = self._places(layout)
            by_shard: dict[int, list[str]] = {}
            for job_id in pending:
                for shard in places(job_id):
                    by_shard.setdefault(shard, []).append(job_id)
            # Old shards first: an id a reshard moves meanwhile is acted on in its new one.
            for shard, of_shard in sorted(by_shard.items()):
                for start in range(0, len(of_shard), CHUNK):
                    changed.update(self._settled(shard, of_shard[start : start + CHUNK], act))
            if self.queue.refresh_layout() == layout:
                break
            pending = [job_id for job_id in pending if job_id not in changed]
        return len(changed)

    def _settled(self, shard: int, ids: list[str], act: Act) -> set[str]:
        """``act`` on ``ids`` of ``shard``, again on those a reshard was moving once it
        moved them (they are then gone from ``shard``; the caller acts on their new
        shard next); returns the ids changed."""
        done, moving = act(shard, ids)
        changed = set(done)
        deadline = time.monotonic() + RESHARD_WAIT
        while moving:
            stalled = time.monotonic() > deadline or not self.client.exists(self.keys.reshard_lock)
            if not stalled:
                time.sleep(POLL)
            done, moving = act(shard, moving)
            changed.update(done)
            if moving and stalled:
                raise ReshardStalled(
                    f"{self.queue.name}: {len(moving)} id(s) of shard {shard} are being moved "
                    f"by a reshard that stopped part-way ({', '.join(moving[:5])}); run "
                    f"`lowkiq reshard {self.queue.name} --shards {self.queue.layout.count}` "
                    "again to finish it, then act on them again"
                )
        return changed

    # -- move ---------------------------------------------------------------

    def _move_chunk(
        self, shard: int, ids: list[str], target: Queue, deadline: float, running: list[str]
    ) -> tuple[list[str], list[str]]:
        """Move the queued jobs ``ids`` of ``shard`` to ``target``: read (and hold), put,
        take; an id whose batch runs, once it ended (until ``deadline``; those still
        running then go to ``running``, their hold undone).  Returns the ids moved and
        those a reshard is moving (left alone)."""
        moved: list[str] = []
        moving: list[str] = []
        before: dict[str, bytes] = {}  # perform_in of the running ids before the first hold
        pending = ids
        while pending:
            found, busy, busy_running, hold = self.queue.run(
                "move_read", shard, "", MOVE_HOLD, *pending
            )
            moving += [_text(i) for i in busy]
            jobs = [_Read(_text(found[i]), *found[i + 1 : i + 5]) for i in range(0, len(found), 5)]
            for i in range(0, len(busy_running), 2):
                before.setdefault(_text(busy_running[i]), busy_running[i + 1])
            if jobs:
                self._put(jobs, target)
                self._take(shard, jobs, target, hold)
                moved += [job.job_id for job in jobs]
            pending = [_text(busy_running[i]) for i in range(0, len(busy_running), 2)]
            if pending and time.monotonic() >= deadline:
                release = [arg for i in pending for arg in (i, b"", before[i])]
                self.queue.run("move_take", shard, target.name, hold, *release)
                running += pending
                break
            if pending:
                time.sleep(POLL)
        return moved, moving

    def _put(self, jobs: list[_Read], target: Queue) -> None:
        """Merge ``jobs`` into ``target``, under its current layout."""
        pending = jobs
        for _ in range(MOVE_REROUTES + 1):
            if not pending:
                return
            by_shard: dict[int, list[Any]] = {}
            for job in pending:
                wire = b"" if job.error is None else b"+" + job.error
                by_shard.setdefault(target.shard_of(job.job_id), []).append(
                    (job.job_id, job.packed, wire, job.group)
                )
            source = self.queue.name
            calls = [
                ("move_put", to_shard, ["", source, *(arg for job in moved for arg in job)])
                for to_shard, moved in by_shard.items()
            ]
            replies = target.run_pipelined(calls)
            refused = {shard for shard, reply in zip(by_shard, replies, strict=True) if reply == -1}
            pending = [job for job in pending if target.shard_of(job.job_id) in refused]
            if pending:
                target.refresh_layout()
        if pending:
            raise InvalidQuery(
                f"{target.name} was resharded {MOVE_REROUTES} times during the move; "
                f"{len(pending)} job(s) stay in {self.queue.name}"
            )

    def _take(self, shard: int, jobs: list[_Read], target: Queue, hold: Any) -> None:
        """Take the payloads put into ``target`` out of ``shard``; those a reshard moved
        meanwhile (or is moving) out of their new shard, once moved."""
        args = [arg for job in jobs for arg in (job.job_id, job.packed, job.perform_in)]
        _, elsewhere = self.queue.run("move_take", shard, target.name, hold, *args)
        left = {_text(i) for i in elsewhere}
        if not left:
            return
        self._await_moved(shard, sorted(left))
        layout = self.queue.refresh_layout()
        by_shard: dict[int, list[Any]] = {}
        for job in jobs:
            if job.job_id in left:
                by_shard.setdefault(layout.shard_of(job.job_id), []).extend(
                    (job.job_id, job.packed, job.perform_in)
                )
        for new, of_new in by_shard.items():
            self.queue.run("move_take", new, target.name, hold, *of_new)

    def _await_moved(self, shard: int, ids: list[str]) -> None:
        """Wait until the reshard moving ``ids`` out of ``shard`` removed them from it."""
        key = self.keys.moving_set(shard)
        deadline = time.monotonic() + RESHARD_WAIT
        while any(self.client.smismember(key, ids)):
            if time.monotonic() > deadline or not self.client.exists(self.keys.reshard_lock):
                raise ReshardStalled(
                    f"{self.queue.name}: {len(ids)} moved id(s) of shard {shard} are held "
                    "by a reshard that stopped part-way: run `lowkiq reshard` again to "
                    "finish it; their payloads are in both queues meanwhile"
                )
            time.sleep(POLL)

    def _by_shard(self, ids: Iterable[Any], handle: Callable[[int, list[str]], int]) -> int:
        """Apply ``handle(shard, ids)`` to the given ids (each once), grouped by the shard
        :meth:`Queue.locator` gives, at most :data:`CHUNK` ids a call."""
        by_shard: dict[int, list[str]] = {}
        for text in _checked_ids(ids):
            by_shard.setdefault(self.shard_of(text), []).append(text)
        total = 0
        for shard, chosen in sorted(by_shard.items()):
            for start in range(0, len(chosen), CHUNK):
                total += int(handle(shard, chosen[start : start + CHUNK]))
        return total

    def _each_chunk(
        self, index_key: Callable[[int], str], handle: Callable[[int, list[str]], int]
    ) -> int:
        """Apply ``handle(shard, ids)`` to the ids of each shard's ``index_key(shard)``, a
        chunk at a time, once each (``handle`` leaves them in the index)."""
        total = 0
        for shard in self.queue.shards:
            key = index_key(shard)
            start = 0
            while ids := [_text(i) for i in self.client.zrange(key, start, start + CHUNK - 1)]:
                total += handle(shard, ids)
                start += CHUNK
        return total

    def _drain(
        self, index_key: Callable[[int], str], handle: Callable[[int, list[str]], int]
    ) -> int:
        """Apply ``handle(shard, ids)`` to the ids of each shard's ``index_key(shard)``, a
        chunk at a time, until none are left."""
        total = 0
        for shard in self.queue.shards:
            key = index_key(shard)
            while ids := [_text(i) for i in self.client.zrange(key, 0, CHUNK - 1)]:
                done = handle(shard, ids)
                total += done
                if done == 0:
                    break
        return total


def _checked_ids(ids: Iterable[Any]) -> list[str]:
    """The ids as text, each once, in order; an id with NUL raises before anything changes."""
    chosen: dict[str, None] = {}
    for job_id in ids:
        text = str(job_id)
        if "\0" in text:
            raise InvalidQuery(f"a job id must not contain NUL, got {text!r}")
        chosen[text] = None
    return list(chosen)


def _target_queue(to: Any) -> Queue:
    """The queue of the worker class ``to`` (a move's target)."""
    make = getattr(to, "queue", None)
    if not isinstance(to, type) or not callable(make):
        hint = (
            " (a name: look its class up in lowkiq.settings.workers)" if isinstance(to, str) else ""
        )
        raise TypeError(
            "move(..., to=) takes a worker class (a lowkiq.Worker subclass, e.g. "
            f"to=ArchiveWorker), not {to!r}{hint}"
        )
    queue = make()
    if not isinstance(queue, Queue):
        raise TypeError(f"move(..., to=) takes a worker class; {to!r}.queue() is not a queue")
    return queue


def _text(member: Any) -> str:
    """A sorted-set member read back (bytes) as text."""
    return member.decode() if isinstance(member, bytes) else str(member)
