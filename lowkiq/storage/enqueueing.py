"""Enqueueing into one queue: jobs grouped by shard and time, one push script per
shard in one round trip (per master on a Redis Cluster), sent again under the new
layout when a reshard retired their shard.

Each push is one Lua script call, so a crash between two calls leaves the queue
consistent (see SPEC §4).  A call of more than :data:`ROUND_JOBS` jobs or
:data:`ROUND_BYTES` bytes is sent in *rounds* of at most that much, one round trip
each, so that no round keeps Redis busy for long (other clients are served between
two rounds); a failure part-way says which job ids are enqueued.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
import zlib
from collections.abc import Iterable, Mapping
from typing import Any, NoReturn, cast

import redis
from redis.exceptions import RedisClusterException

from lowkiq.clients.connection import Client, pipelined
from lowkiq.errors import EnqueueIncomplete, InvalidJob, RedisFull, is_out_of_memory
from lowkiq.storage.layout import Layout
from lowkiq.storage.push_plan import (
    ROUND_BYTES,
    ROUND_JOBS,
    NewJob,
    cut_rounds,
    one_push_args,
    placed,
    placed_unique,
    push_args,
    pushed_ids,
    rerouted,
    round_ids,
)
from lowkiq.storage.queue_base import QueueBase
from lowkiq.storage.scripts import run_on_masters

__all__ = [
    "DEFAULT_BULK_LEN",
    "MIN_BULK_LEN",
    "REFUSED",
    "REROUTES",
    "Enqueueing",
    "NewJob",
    "max_bulk_len",
    "shard_of",
]


def shard_of(job_id: str, shards_count: int, base: int = 0) -> int:
    """The shard of a job id: ``base + crc32(id) % shards_count``."""
    return base + zlib.crc32(job_id.encode()) % shards_count


#: Redis's default ``proto-max-bulk-len``: the largest argument it accepts (bytes).
DEFAULT_BULK_LEN = 512 * 1024 * 1024
#: The smallest ``proto-max-bulk-len`` Redis allows: a member this long always fits.
MIN_BULK_LEN = 1024 * 1024
_BULK_LENS: weakref.WeakKeyDictionary[Client, int] = weakref.WeakKeyDictionary()
_BULK_LOCK = threading.Lock()


def max_bulk_len(client: Client) -> int:
    """Redis's ``proto-max-bulk-len``, read once per client with ``CONFIG GET`` (the
    smallest of a cluster's answers); :data:`DEFAULT_BULK_LEN` when ``CONFIG`` is
    forbidden or renamed, as on managed Redis."""
    with _BULK_LOCK:
        known = _BULK_LENS.get(client)
    if known is not None:
        return known
    try:
        reply: Any = client.config_get("proto-max-bulk-len")
    except redis.ResponseError:  # NOPERM, or an unknown (renamed) command
        reply = {}
    limit = min(_bulk_lens(reply), default=DEFAULT_BULK_LEN)
    with _BULK_LOCK:
        _BULK_LENS[client] = limit
    return limit


def _bulk_lens(reply: Any) -> list[int]:
    """The ``proto-max-bulk-len`` values in a ``CONFIG GET`` reply (a dict, or on a
    cluster a dict per node)."""
    if not isinstance(reply, dict):
        return []
    found: list[int] = []
    for key, value in reply.items():
        if isinstance(value, dict):
            found += _bulk_lens(value)
        elif (key.decode() if isinstance(key, bytes) else key) == "proto-max-bulk-len":
            found.append(int(value))
    return found


#: What the push script replies when its shard was retired by a reshard.
REFUSED = -1


def split_pushed(
    by_shard: dict[int, list[Any]], replied: Mapping[int, Any]
) -> tuple[list[str], list[str]]:
    """The ids of a call's rounds enqueued (their shard's push replied and was not
    refused) and the others."""
    done = [shard for shard, reply in replied.items() if reply != REFUSED]
    missing = [shard for shard in by_shard if shard not in done]
    return pushed_ids(by_shard, done), pushed_ids(by_shard, missing)


#: How the push script's error reply begins when a job names a group other than the
#: one its queued id is in (then the id's length in bytes, a space, the id and the queued
#: group, ``''`` being the default one).
GROUP_REFUSED = "GROUP "
#: How many times one enqueue follows a reshard before it gives up.
REROUTES = 3
#: Jobs of a group in a call of several shards from which the check of their groups first
#: asks each shard whether it needs their ids (one round trip more for the shards that
#: hold several groups, against every id sent to every shard).
PROBE_FROM = 100


def _incomplete(
    queue: str, failure: str, enqueued: list[str], missing: list[str]
) -> EnqueueIncomplete:
    """The error of a push that enqueued the job ids ``enqueued`` and not ``missing``."""
    return EnqueueIncomplete(
        f"{queue}: {failure}: {len(enqueued)} job id(s) enqueued, {len(missing)} not "
        f"confirmed (enqueueing them again is safe: jobs of one id merge): not "
        f"confirmed: {_sample(missing)}",
        enqueued,
        missing,
    )


def _full(queue: str, enqueued: list[str], missing: list[str]) -> RedisFull:
    """The error of a push Redis refused for want of memory after ``enqueued`` ran."""
    return RedisFull(
        f"{queue}: Redis is full: it reached maxmemory and refused the write (OOM "
        f"command not allowed): {len(enqueued)} job id(s) enqueued, {len(missing)} not "
        f"enqueued; free memory or raise maxmemory, then enqueue those again: "
        f"{_sample(missing)}",
        enqueued,
        missing,
    )


def _sample(ids: list[str]) -> str:
    """The first ids of a list, for a message."""
    return f"{ids[:20]}" + (" ..." if len(ids) > 20 else "")


class _PushFailed(Exception):
    """Push calls failed: the job ids ``enqueued`` ran, ``missing`` did not or are not
    confirmed.  ``plain``: the error of a single server's call, raised as it is when
    it concerns a whole call of one round (as ``perform_async`` always did)."""

    def __init__(
        self,
        failure: str,
        cause: Exception | None,
        enqueued: list[str],
        missing: list[str],
        plain: bool = False,
    ) -> None:
        super().__init__(failure)
        self.failure = failure
        self.cause = cause
        self.enqueued = enqueued
        self.missing = missing
        self.plain = plain


def _group_conflict(jobs: list[NewJob], job_id: str, queued: str) -> InvalidJob:
    """The error of a job that names a group other than ``queued``, its id's queued one."""
    index, group = next((i, job[4]) for i, job in enumerate(jobs) if job[0] == job_id and job[4])
    return InvalidJob(
        index,
        "group",
        f"is {group!r}, but id {job_id!r} is queued in "
        f"{repr(queued) if queued else 'the default group'}: an id keeps its group while "
        f"it is queued (give that group, or none)",
    )


def _check_args(sections: dict[str, list[str]], with_ids: bool) -> list[Any]:
    """The arguments of ``group_check`` for one shard's ids by group: each group, how
    many ids, the ids (``with_ids``; else none of them, count 0)."""
    args: list[Any] = []
    for group, ids in sections.items():
        args += (group, len(ids), *ids) if with_ids else (group, 0)
    return args


def _refused_group(error: Exception | None) -> tuple[str, str] | None:
    """The id and queued group of a push refused for a job's group, else ``None``."""
    if not isinstance(error, redis.ResponseError) or not str(error).startswith(GROUP_REFUSED):
        return None
    length, _, rest = str(error)[len(GROUP_REFUSED) :].partition(" ")
    text = rest.encode()
    return text[: int(length)].decode(), text[int(length) :].decode()


def _oom_first(errors: list[Exception]) -> Exception:
    """The error to report of several: a refusal for want of memory, else the first."""
    return next((error for error in errors if is_out_of_memory(error)), errors[0])


def _failure(queue: str, failed: _PushFailed, before: list[str], after: list[str]) -> Exception:
    """The error ``perform_async`` raises when a round failed after the ids ``before``
    were enqueued, ``after`` being the ids of the rounds not sent."""
    enqueued, missing = before + failed.enqueued, failed.missing + after
    if failed.cause is not None and is_out_of_memory(failed.cause):
        return _full(queue, enqueued, missing)
    if failed.plain and failed.cause is not None and not (before or failed.enqueued or after):
        return failed.cause
    return _incomplete(queue, failed.failure, enqueued, missing)


class Enqueueing(QueueBase):
    """Pushing jobs into the queue (see the module)."""

    def push(
        self, jobs: Iterable[NewJob], now: float | None = None, merge_perform_in: str = "keep"
    ) -> None:
        """Enqueue jobs in one round trip (a script call per shard, in one transaction);
        same-id jobs merge (SPEC §3 rule 2; ``merge_perform_in``: ``keep`` the queued
        job's perform_in, take the ``latest``, or the later of the two, ``max``).  A call
        of more than :data:`ROUND_JOBS` jobs or :data:`ROUND_BYTES` bytes takes a round
        trip per round.

        Redis refusing a write for want of memory raises
        :class:`~lowkiq.errors.RedisFull`, which says which job ids are enqueued
        (none, when the call fit in one round).  On a Redis Cluster, a round trip per
        master; when one fails, or a later round of a split call fails,
        :class:`~lowkiq.errors.EnqueueIncomplete` says which jobs are enqueued.
        The jobs of a shard a reshard retired (the push script refuses them and
        writes nothing) are sent again under the queue's new layout; refused
        REROUTES times, :class:`~lowkiq.errors.EnqueueIncomplete` says which are
        enqueued.
        """
        jobs = jobs if isinstance(jobs, list) else list(jobs)
        layout = self.layout
        if len(jobs) == 1:  # the usual perform_async: one shard, one round
            try:
                self._push_round(
                    one_push_args(jobs[0], layout, "" if now is None else now, merge_perform_in)
                )
            except _PushFailed as failed:
                self._raise_failure(jobs, failed, [], [])
            return
        by_place = placed_unique(jobs, layout.count)
        if by_place is None:  # an id more than once: its payloads merge into one member
            by_place = placed(jobs, layout.count)
        rounds = cut_rounds(by_place, ROUND_JOBS, ROUND_BYTES)
        if len(by_place) > 1 and any(job[4] for job in jobs):
            self._check_groups(jobs, layout)
        for number, part in enumerate(rounds):
            by_shard = push_args(part, layout.base, "" if now is None else now, merge_perform_in)
            if number and self.layout != layout:  # an earlier round met a reshard
                by_shard = rerouted(list(by_shard.values()), self.layout)
            try:
                self._push_round(by_shard)
            except _PushFailed as failed:
                before, after = round_ids(rounds[:number]), round_ids(rounds[number + 1 :])
                self._raise_failure(jobs, failed, before, after)

    def _raise_failure(
        self, jobs: list[NewJob], failed: _PushFailed, before: list[str], after: list[str]
    ) -> NoReturn:
        """Raise what ``perform_async`` raises for the round that failed (``before``: the
        ids of the rounds enqueued before it, ``after``: of those not sent)."""
        refused = _refused_group(failed.cause)
        if refused and not (before or failed.enqueued):
            raise _group_conflict(jobs, *refused) from None
        error = _failure(self.name, failed, before, after)
        raise error from (None if error is failed.cause else failed.cause)

    def _check_groups(self, jobs: list[NewJob], layout: Layout) -> None:
        """Raise :class:`InvalidJob` when a job names a group other than the one its id
        is queued in (read before anything of a call of several shards is written; each
        push script checks its own shard again)."""
        by_shard: dict[int, dict[str, list[str]]] = {}
        for job_id, _, _, _, group in jobs:
            if group:
                shard = shard_of(job_id, layout.count, layout.base)
                by_shard.setdefault(shard, {}).setdefault(group, []).append(job_id)
        asked = list(by_shard)
        if sum(1 for job in jobs if job[4]) >= PROBE_FROM:
            # First each shard's groups alone: most shards need no id looked up (all of
            # their queued jobs are of the pushed group), and the others say so.
            calls = [("group_check", shard, _check_args(by_shard[shard], False)) for shard in asked]
            replies = self.run_pipelined(calls)
            asked = [shard for shard, reply in zip(asked, replies, strict=True) if reply]
        calls = [("group_check", shard, _check_args(by_shard[shard], True)) for shard in asked]
        for reply in self.run_pipelined(calls) if calls else ():
            if reply:
                raise _group_conflict(jobs, reply[0].decode(), reply[1].decode())

    def _push_round(self, by_shard: dict[int, list[Any]]) -> None:
        """Push one round, following a reshard up to REROUTES times."""
        done: list[str] = []  # ids whose push ran
        for _ in range(REROUTES):
            try:
                refused = self._send_pushes(by_shard)
            except _PushFailed as failed:
                failed.enqueued[:0] = done
                raise
            if not refused:
                return
            done += pushed_ids(by_shard, [shard for shard in by_shard if shard not in refused])
            by_shard = rerouted([by_shard[shard] for shard in refused], self.refresh_layout())
        failure = f"the queue was resharded {REROUTES} times during one enqueue"
        raise _PushFailed(failure, None, done, pushed_ids(by_shard, by_shard))

    def _send_pushes(self, by_shard: dict[int, list[Any]]) -> list[int]:
        """Run the push script of each shard; returns the shards that refused (retired).
        A failure raises :class:`_PushFailed`."""
        if self.replication is not None and len(by_shard) > 1:
            replies = self._push_one_by_one(by_shard)
        elif self.cluster and len(by_shard) > 1:
            replies = self._push_per_master(by_shard)
        else:
            replies = self._push_in_one_write(by_shard)
        return [shard for shard, reply in zip(by_shard, replies, strict=True) if reply == REFUSED]

    def _push_in_one_write(self, by_shard: dict[int, list[Any]]) -> list[Any]:
        """The push calls on one server: a single call, or several in one MULTI; returns
        their replies, or raises :class:`_PushFailed` naming the shards that ran."""
        try:
            if len(by_shard) > 1 or self._pipelines_push:
                replies = self._push_pipelined(by_shard, len(by_shard) > 1)
            else:  # a Redis Cluster's, a thread's own client, or a write waiting for replicas
                ((shard, args),) = by_shard.items()
                replies = [self.write("push", [self._prefixes[shard]], *args)]
        except (redis.RedisError, RedisClusterException) as exc:
            raise _PushFailed(str(exc), exc, [], pushed_ids(by_shard, by_shard), True) from exc
        errors = [reply for reply in replies if isinstance(reply, Exception)]
        if errors:
            done = [s for s, r in zip(by_shard, replies, strict=True) if not _failed(r)]
            pending = [shard for shard in by_shard if shard not in done]
            error = _oom_first(errors)
            raise _PushFailed(
                str(error), error, pushed_ids(by_shard, done), pushed_ids(by_shard, pending), True
            )
        return replies

    @property
    def _pipelines_push(self) -> bool:
        """Whether one shard's push goes by :func:`pipelined` too: on a pooled client of
        one server with no replicas waited for (hiredis packs it, and redis-py's command
        layers are skipped: an enqueue into an idle process runs less Python before its
        bytes leave)."""
        client: Any = self.client
        single = self.cluster or self.replication is not None or self._run_script is not None
        return not single and getattr(client, "connection", None) is None

    def _push_pipelined(self, by_shard: dict[int, list[Any]], transaction: bool) -> list[Any]:
        """The push calls in one write (``transaction``: in one MULTI); their replies, an
        error reply in its place (a call Redis refused for want of memory wrote nothing,
        the others ran)."""
        client = cast(redis.Redis, self.client)
        push = self.scripts.push
        commands = [push.command([self._prefixes[shard]], args) for shard, args in by_shard.items()]
        replies = pipelined(client, commands, transaction)
        missing = [i for i, reply in enumerate(replies) if push.is_lost(reply, commands[i])]
        if missing:  # a restarted or flushed server
            push.load(replies[missing[0]], client.execute_command)
            again = pipelined(client, [push.again(commands[i]) for i in missing], transaction)
            for i, reply in zip(missing, again, strict=True):
                replies[i] = reply
        return replies

    def _push_per_master(self, by_shard: dict[int, list[Any]]) -> list[Any]:
        """The push calls of a cluster, one write per master, all sent before any reply
        is read; returns their replies in the order of ``by_shard``.  The shards whose
        master failed, or whose call had an error reply, are tried once more after
        reloading the slot map (a replica may have taken over); then
        :class:`_PushFailed` names what is enqueued."""
        cluster: Any = self.client
        push = self.scripts.push
        pending: list[int] = list(by_shard)
        replies: dict[int, Any] = {}
        for attempt in range(2):
            by_master: dict[str, tuple[Any, list[int]]] = {}
            for shard in pending:
                node = cluster.get_node_from_key(self._prefixes[shard])
                by_master.setdefault(node.name, (node, []))[1].append(shard)
            outcomes = run_on_masters(
                cluster,
                [
                    (node, [(push, [self._prefixes[shard]], by_shard[shard]) for shard in shards])
                    for node, shards in by_master.values()
                ],
            )
            failed: list[int] = []
            errors: list[Exception] = []
            for (master, (_, shards)), outcome in zip(by_master.items(), outcomes, strict=True):
                if isinstance(outcome, redis.RedisError):
                    failed += shards
                    errors.append(outcome)
                    failure = f"Redis master {master} failed ({outcome})"
                    continue
                for shard, reply in zip(shards, outcome, strict=True):
                    if isinstance(reply, Exception):
                        failed.append(shard)
                        errors.append(reply)
                        failure = f"a push on Redis master {master} failed ({reply})"
                    else:
                        replies[shard] = reply
            if not failed:
                return [replies[shard] for shard in by_shard]
            pending = failed
            if attempt == 0:
                with contextlib.suppress(redis.RedisError, RedisClusterException):
                    cluster.nodes_manager.initialize()
        raise _PushFailed(failure, _oom_first(errors), *split_pushed(by_shard, replies))

    def _push_one_by_one(self, by_shard: dict[int, list[Any]]) -> list[Any]:
        """The push calls, a round trip per shard (each waits for the replicas); returns
        their replies, or raises :class:`_PushFailed` naming the shards that ran."""
        replies: list[Any] = []
        for shard, args in by_shard.items():
            try:
                replies.append(self.write("push", [self._prefixes[shard]], *args))
            except (redis.RedisError, RedisClusterException) as exc:
                ids = split_pushed(by_shard, dict(zip(by_shard, replies, strict=False)))
                raise _PushFailed(str(exc), exc, *ids) from exc
        return replies


def _failed(reply: Any) -> bool:
    """Whether a push reply says its jobs were not written (an error, or refused)."""
    return isinstance(reply, Exception) or reply == REFUSED
