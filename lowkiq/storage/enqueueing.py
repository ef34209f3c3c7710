"""Enqueueing into one queue: jobs grouped by shard and time, one push script per
shard in one round trip (per master on a Redis Cluster), sent again under the new
layout when a reshard retired their shard.

Each push is one Lua script call, so a crash between two calls leaves the queue
consistent (see SPEC §4).
"""

from __future__ import annotations

import contextlib
import zlib
from collections.abc import Iterable
from operator import itemgetter
from typing import Any

import redis
from redis.exceptions import RedisClusterException

from lowkiq.errors import EnqueueIncomplete
from lowkiq.storage import blob
from lowkiq.storage.layout import Layout
from lowkiq.storage.queue_base import QueueBase
from lowkiq.storage.scripts import run_on_masters


def shard_of(job_id: str, shards_count: int, base: int = 0) -> int:
    """The shard of a job id: ``base + crc32(id) % shards_count``."""
    return base + zlib.crc32(job_id.encode()) % shards_count


#: A validated job ready to push: id, serialized payload, score, perform_in.
#: A plain tuple: enqueueing builds one per job, and a tuple is the cheapest.
NewJob = tuple[str, bytes, float, float]


#: What the push script replies when its shard was retired by a reshard.
REFUSED = -1
#: How many times one enqueue follows a reshard before it gives up.
REROUTES = 3


def _pushed_ids(by_shard: dict[int, list[Any]], shards: Iterable[int]) -> list[str]:
    """The job ids in the push arguments of ``shards`` (``now``, then groups of
    ``perform_in``, count, members ``id\\0blob``)."""
    ids: list[str] = []
    for shard in shards:
        args = by_shard[shard]
        i = 1
        while i < len(args):
            count = args[i + 1]
            ids += [member.split(b"\0", 1)[0].decode() for member in args[i + 2 : i + 2 + count]]
            i += 2 + count
    return ids


def _grouped_unique(
    jobs: list[NewJob], shards_count: int
) -> dict[tuple[int, float], list[bytes]] | None:
    """Members ``id\\0blob`` by (shard, perform_in), or ``None`` when an id repeats.
    The common case of a call with distinct ids."""
    if len(set(map(itemgetter(0), jobs))) != len(jobs):
        return None
    by_shard: list[dict[float, list[bytes]] | None] = [None] * shards_count
    used: list[tuple[int, dict[float, list[bytes]]]] = []  # by_shard's in use, first come first
    crc32, pack_one = zlib.crc32, blob.pack_one
    for job_id, payload, score, perform_in in jobs:
        id_bytes = job_id.encode()
        shard = crc32(id_bytes) % shards_count
        by_time = by_shard[shard]
        if by_time is None:
            by_time = by_shard[shard] = {}
            used.append((shard, by_time))
        members = by_time.get(perform_in)
        if members is None:
            members = by_time[perform_in] = []
        members.append(id_bytes + b"\0" + pack_one(payload, score))
    return {
        (shard, perform_in): members
        for shard, by_time in used
        for perform_in, members in by_time.items()
    }


def _grouped(jobs: list[NewJob], shards_count: int) -> dict[tuple[int, float], list[bytes]]:
    """Members by (shard, perform_in), the payloads of one id packed into one member
    (the id's first perform_in)."""
    by_id: dict[str, tuple[float, list[tuple[bytes, float]]]] = {}
    for job_id, payload, score, perform_in in jobs:
        entry = by_id.get(job_id)
        if entry is None:
            by_id[job_id] = (perform_in, [(payload, score)])
        else:
            entry[1].append((payload, score))
    groups: dict[tuple[int, float], list[bytes]] = {}
    for job_id, (perform_in, payloads) in by_id.items():
        id_bytes = job_id.encode()
        key = (zlib.crc32(id_bytes) % shards_count, perform_in)
        groups.setdefault(key, []).append(id_bytes + b"\0" + blob.pack(payloads))
    return groups


def _push_args(
    groups: dict[tuple[int, float], list[bytes]], base: int, now: float | str
) -> dict[int, list[Any]]:
    """The push script's arguments per shard (``base`` + the group's shard): ``now``,
    then per perform_in: perform_in, count, members."""
    by_shard: dict[int, list[Any]] = {}
    for (shard, perform_in), members in groups.items():
        args = by_shard.get(base + shard)
        if args is None:
            args = by_shard[base + shard] = [now]
        args += (perform_in, len(members))
        args += members
    return by_shard


def _rerouted(refused: list[list[Any]], layout: Layout) -> dict[int, list[Any]]:
    """The push arguments of shards that refused them, regrouped by ``layout``'s shards."""
    groups: dict[tuple[int, float], list[bytes]] = {}
    for args in refused:
        i = 1
        while i < len(args):
            perform_in, count = args[i], args[i + 1]
            for member in args[i + 2 : i + 2 + count]:
                shard = zlib.crc32(member.split(b"\0", 1)[0]) % layout.count
                groups.setdefault((shard, perform_in), []).append(member)
            i += 2 + count
    return _push_args(groups, layout.base, refused[0][0])


def _incomplete(
    queue: str, failure: str, enqueued: list[str], missing: list[str]
) -> EnqueueIncomplete:
    """The error of a push that enqueued the job ids ``enqueued`` and not ``missing``."""
    return EnqueueIncomplete(
        f"{queue}: {failure}: {len(enqueued)} job id(s) enqueued, {len(missing)} not "
        f"confirmed (enqueueing them again is safe: jobs of one id merge): not "
        f"confirmed: {missing[:20]}" + (" ..." if len(missing) > 20 else ""),
        enqueued,
        missing,
    )


def _incomplete_shards(
    queue: str, failure: str, by_shard: dict[int, list[Any]], done: list[int]
) -> EnqueueIncomplete:
    """The error of a push whose shards ``done`` wrote their jobs, the others maybe not."""
    pending = [shard for shard in by_shard if shard not in done]
    return _incomplete(queue, failure, _pushed_ids(by_shard, done), _pushed_ids(by_shard, pending))


class Enqueueing(QueueBase):
    """Pushing jobs into the queue (see the module)."""

    def push(self, jobs: Iterable[NewJob], now: float | None = None) -> None:
        """Enqueue jobs in one round trip (a script call per shard, in one transaction);
        same-id jobs merge (SPEC §3 rule 2).

        On a Redis Cluster, a round trip per master; when one fails,
        :class:`~lowkiq.errors.EnqueueIncomplete` says which jobs are enqueued.
        The jobs of a shard a reshard retired (the push script refuses them and
        writes nothing) are sent again under the queue's new layout; refused
        REROUTES times, :class:`~lowkiq.errors.EnqueueIncomplete` says which are
        enqueued.
        """
        jobs = jobs if isinstance(jobs, list) else list(jobs)
        current = self.layout
        groups = _grouped_unique(jobs, current.count)
        if groups is None:  # an id more than once: its payloads merge into one member
            groups = _grouped(jobs, current.count)
        by_shard = _push_args(groups, current.base, "" if now is None else now)
        done: list[str] = []  # ids whose push ran
        for _ in range(REROUTES):
            refused = self._send_pushes(by_shard)
            if not refused:
                return
            done += _pushed_ids(by_shard, [shard for shard in by_shard if shard not in refused])
            current = self.refresh_layout()
            by_shard = _rerouted([by_shard[shard] for shard in refused], current)
        raise _incomplete(
            self.name,
            f"the queue was resharded {REROUTES} times during one enqueue",
            done,
            _pushed_ids(by_shard, by_shard),
        )

    def _send_pushes(self, by_shard: dict[int, list[Any]]) -> list[int]:
        """Run the push script of each shard; returns the shards that refused (retired)."""
        if len(by_shard) == 1:
            ((shard, args),) = by_shard.items()
            replies = [self.write("push", [self._prefixes[shard]], *args)]
        elif self.replication is not None:
            replies = self._push_one_by_one(by_shard)
        elif self.cluster:
            replies = self._push_per_master(by_shard)
        else:
            calls = [("push", shard, args) for shard, args in by_shard.items()]
            replies = self.run_pipelined(calls, True)
        return [shard for shard, reply in zip(by_shard, replies, strict=True) if reply == REFUSED]

    def _push_per_master(self, by_shard: dict[int, list[Any]]) -> list[Any]:
        """The push calls of a cluster, one write per master, all sent before any reply
        is read; returns their replies in the order of ``by_shard``.  The shards whose
        master failed, or whose call had an error reply, are tried once more after
        reloading the slot map (a replica may have taken over); then
        :class:`EnqueueIncomplete` names what is enqueued."""
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
            for (master, (_, shards)), outcome in zip(by_master.items(), outcomes, strict=True):
                if isinstance(outcome, redis.RedisError):
                    failed += shards
                    failure = f"Redis master {master} failed ({outcome})"
                    continue
                for shard, reply in zip(shards, outcome, strict=True):
                    if isinstance(reply, Exception):
                        failed.append(shard)
                        failure = f"a push on Redis master {master} failed ({reply})"
                    else:
                        replies[shard] = reply
            if not failed:
                return [replies[shard] for shard in by_shard]
            pending = failed
            if attempt == 0:
                with contextlib.suppress(redis.RedisError, RedisClusterException):
                    cluster.nodes_manager.initialize()
        done = [shard for shard, reply in replies.items() if reply != REFUSED]
        raise _incomplete_shards(self.name, failure, by_shard, done)

    def _push_one_by_one(self, by_shard: dict[int, list[Any]]) -> list[Any]:
        """The push calls, a round trip per shard (each waits for the replicas); returns
        their replies."""
        replies: list[Any] = []
        for shard, args in by_shard.items():
            try:
                replies.append(self.write("push", [self._prefixes[shard]], *args))
            except (redis.RedisError, RedisClusterException) as exc:
                done = [s for s, reply in zip(by_shard, replies, strict=False) if reply != REFUSED]
                raise _incomplete_shards(self.name, str(exc), by_shard, done) from exc
        return replies
