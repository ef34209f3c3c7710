"""Enqueueing into one queue on ``redis.asyncio``: :mod:`lowkiq.storage.enqueueing`'s
rules on an event loop.

The same plan (:mod:`lowkiq.storage.push_plan`: jobs by shard, ``perform_in`` and
group, cut into rounds of at most :data:`~lowkiq.storage.push_plan.ROUND_JOBS` jobs
and :data:`~lowkiq.storage.push_plan.ROUND_BYTES` bytes), the same ``push.lua`` and
``group_check.lua``, the same errors: each round is one round trip (one per master,
side by side, on a Redis Cluster; a ``MULTI`` of the shards' pushes on one server),
a reshard's retired shard is pushed again under the new layout, and a failure
part-way says which ids are enqueued (:class:`~lowkiq.errors.EnqueueIncomplete`,
:class:`~lowkiq.errors.RedisFull`).  With replicas to wait for, each shard's push is
followed by ``WAIT`` on its connection, as on the synchronous side.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

import redis
from redis.exceptions import RedisClusterException

from lowkiq.aio.calls import Call, LuaScript, load_lost, run_calls, script_call
from lowkiq.aio.client import AsyncRedis, pipelined
from lowkiq.aio.off_loop import run_sized
from lowkiq.aio.server import cached_layout, read_layout
from lowkiq.storage.enqueueing import (
    PROBE_FROM,
    REFUSED,
    REROUTES,
    _check_args,
    _failed,
    _failure,
    _group_conflict,
    _oom_first,
    _PushFailed,
    _refused_group,
    shard_of,
    split_pushed,
)
from lowkiq.storage.functions import is_lost
from lowkiq.storage.keys import QueueKeys
from lowkiq.storage.layout import Layout
from lowkiq.storage.push_plan import (
    ROUND_BYTES,
    ROUND_JOBS,
    ByPlace,
    NewJob,
    cut_rounds,
    placed,
    placed_unique,
    push_args,
    pushed_ids,
    rerouted,
    round_ids,
)
from lowkiq.storage.queue_base import Replication

log = logging.getLogger("lowkiq.storage")


class AsyncPush:
    """The push of one queue on one loop's client (see the module)."""

    def __init__(
        self,
        redis_: AsyncRedis,
        name: str,
        shards_count: int,
        track_length: int = 0,
        replication: Replication | None = None,
    ) -> None:
        self.redis = redis_
        self.name = name
        self.default_shards_count = shards_count
        self.keys = QueueKeys(name)
        self.push_script = LuaScript.named("push", track_length)
        self.check_script = LuaScript.named("group_check", track_length)
        self.replication = replication if replication and replication.replicas else None
        self.layout: Layout | None = None

    async def push(self, jobs: list[NewJob], merge_perform_in: str = "keep") -> None:
        """Enqueue validated jobs (see :meth:`lowkiq.storage.enqueueing.Enqueueing.push`)."""
        layout = self.layout = await cached_layout(self.redis, self.name, self.default_shards_count)
        rounds, args, places = await run_sized(
            len(jobs), lambda: _plan(jobs, layout, merge_perform_in)
        )
        if places > 1 and any(job[4] for job in jobs):
            await self._check_groups(jobs, layout)
        for number, by_shard in enumerate(args):
            if number and self.layout != layout:  # an earlier round met a reshard
                by_shard = rerouted(list(by_shard.values()), self.layout)
            try:
                await self._push_round(by_shard)
            except _PushFailed as failed:
                before, after = round_ids(rounds[:number]), round_ids(rounds[number + 1 :])
                refused = _refused_group(failed.cause)
                if refused and not (before or failed.enqueued):
                    raise _group_conflict(jobs, *refused) from None
                error = _failure(self.name, failed, before, after)
                raise error from (None if error is failed.cause else failed.cause)

    async def _check_groups(self, jobs: list[NewJob], layout: Layout) -> None:
        """Raise :class:`~lowkiq.errors.InvalidJob` when a job names a group other than the
        one its id is queued in, before anything is written (as the synchronous push)."""
        by_shard: dict[int, dict[str, list[str]]] = {}
        for job_id, _, _, _, group in jobs:
            if group:
                shard = shard_of(job_id, layout.count, layout.base)
                by_shard.setdefault(shard, {}).setdefault(group, []).append(job_id)
        asked = list(by_shard)
        if sum(1 for job in jobs if job[4]) >= PROBE_FROM:
            probes = [
                self._check_call(shard, _check_args(by_shard[shard], False)) for shard in asked
            ]
            replies = _raised(await run_calls(self.redis, probes))
            asked = [shard for shard, reply in zip(asked, replies, strict=True) if reply]
        calls = [self._check_call(shard, _check_args(by_shard[shard], True)) for shard in asked]
        for reply in _raised(await run_calls(self.redis, calls)) if calls else ():
            if reply:
                raise _group_conflict(jobs, reply[0].decode(), reply[1].decode())

    def _check_call(self, shard: int, args: list[Any]) -> Call:
        return (self.check_script, self.keys.prefix(shard), args)

    async def _push_round(self, by_shard: dict[int, list[Any]]) -> None:
        """Push one round, following a reshard up to REROUTES times."""
        done: list[str] = []  # ids whose push ran
        for _ in range(REROUTES):
            try:
                refused = await self._send_pushes(by_shard)
            except _PushFailed as failed:
                failed.enqueued[:0] = done
                raise
            if not refused:
                return
            done += pushed_ids(by_shard, [shard for shard in by_shard if shard not in refused])
            fresh = await read_layout(self.redis, self.name, self.default_shards_count)
            self.layout = fresh
            by_shard = rerouted([by_shard[shard] for shard in refused], fresh)
        failure = f"the queue was resharded {REROUTES} times during one enqueue"
        raise _PushFailed(failure, None, done, pushed_ids(by_shard, by_shard))

    async def _send_pushes(self, by_shard: dict[int, list[Any]]) -> list[int]:
        """Run the push script of each shard; returns the shards that refused (retired).
        A failure raises :class:`_PushFailed`."""
        if self.replication is not None:
            replies = await self._push_one_by_one(by_shard)
        elif self.redis.cluster:
            replies = await self._push_per_master(by_shard)
        else:
            replies = await self._push_in_one_write(by_shard)
        return [shard for shard, reply in zip(by_shard, replies, strict=True) if reply == REFUSED]

    def _calls(self, by_shard: dict[int, list[Any]]) -> list[Call]:
        return [
            (self.push_script, self.keys.prefix(shard), args) for shard, args in by_shard.items()
        ]

    async def _push_in_one_write(self, by_shard: dict[int, list[Any]]) -> list[Any]:
        """The push calls on one server in one write (several in one ``MULTI``)."""
        try:
            replies = await run_calls(self.redis, self._calls(by_shard), len(by_shard) > 1)
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

    async def _push_per_master(self, by_shard: dict[int, list[Any]]) -> list[Any]:
        """The push calls of a cluster, one write per master; the shards whose master
        failed or whose call had an error reply are tried once more after reloading the
        slot map, then :class:`_PushFailed` names what is enqueued."""
        pending = list(by_shard)
        replies: dict[int, Any] = {}
        failure = ""
        for attempt in range(2):
            outcome = await run_calls(self.redis, self._calls({s: by_shard[s] for s in pending}))
            failed: list[int] = []
            errors: list[Exception] = []
            for shard, reply in zip(pending, outcome, strict=True):
                if isinstance(reply, Exception):
                    failed.append(shard)
                    errors.append(reply)
                    failure = f"a push on Redis master {self._master_name(shard)} failed ({reply})"
                else:
                    replies[shard] = reply
            if not failed:
                return [replies[shard] for shard in by_shard]
            pending = failed
            if attempt == 0:
                with contextlib.suppress(redis.RedisError, RedisClusterException):
                    await self.redis.reload_slots()
        ids = split_pushed(by_shard, replies)
        # A call of one shard fails as on one server: its error as it is.
        raise _PushFailed(failure, _oom_first(errors), *ids, plain=len(by_shard) == 1)

    def _master_name(self, shard: int) -> str:
        try:
            return self.redis.master_of(self.keys.prefix(shard))[0]
        except (redis.RedisError, RedisClusterException):
            return "?"

    async def _push_one_by_one(self, by_shard: dict[int, list[Any]]) -> list[Any]:
        """Each shard's push then ``WAIT`` in one write on its server's connection, shard
        after shard; a write that reached fewer replicas than wanted is logged."""
        assert self.replication is not None
        wanted, timeout_ms = self.replication.replicas, self.replication.timeout_ms
        replies: list[Any] = []
        for shard, args in by_shard.items():
            key = self.keys.prefix(shard)
            try:
                server = self.redis.master_of(key)[1] if self.redis.cluster else self.redis.client
                command = await script_call(self.redis, self.push_script, key, args)
                reply, acked = await pipelined(
                    server, [command, ("WAIT", wanted, timeout_ms)], False
                )
                if is_lost(reply, command[0] == "FCALL"):
                    await load_lost(server, self.redis, self.push_script, reply)
                    command = await script_call(self.redis, self.push_script, key, args)
                    reply, acked = await pipelined(
                        server, [command, ("WAIT", wanted, timeout_ms)], False
                    )
                if isinstance(reply, Exception):
                    raise reply
            except (redis.RedisError, RedisClusterException) as exc:
                ids = split_pushed(by_shard, dict(zip(by_shard, replies, strict=False)))
                raise _PushFailed(str(exc), exc, *ids) from exc
            if int(acked) < wanted:
                log.warning(
                    "%s: push reached %d of %d replica(s) within %d ms; it is on the master only",
                    self.name, int(acked), wanted, timeout_ms,
                )  # fmt: skip
            replies.append(reply)
        return replies


def _plan(
    jobs: list[NewJob], layout: Layout, merge_perform_in: str
) -> tuple[list[ByPlace], list[dict[int, list[Any]]], int]:
    """The rounds of a call, each round's push arguments by shard, and how many places
    (shard, perform_in, group) its jobs go to; as the synchronous push plans them."""
    by_place = placed_unique(jobs, layout.count)
    if by_place is None:  # an id more than once: its payloads merge into one member
        by_place = placed(jobs, layout.count)
    rounds = cut_rounds(by_place, ROUND_JOBS, ROUND_BYTES)
    args = [push_args(part, layout.base, "", merge_perform_in) for part in rounds]
    return rounds, args, len(by_place)


def _raised(replies: list[Any]) -> list[Any]:
    """``replies``, the first error among them raised."""
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply
    return replies
