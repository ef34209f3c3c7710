"""Writes to one queue: push, pop, ack, fail, restore.

Each method is one Lua script call, so every state change is atomic and a
crash between two calls leaves the queue consistent (see SPEC §4).
"""

from __future__ import annotations

import contextlib
import logging
import struct
import time
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

import redis
from redis.exceptions import RedisClusterException

from lowkiq.connection import Client, KeyedCommand, is_cluster
from lowkiq.errors import EnqueueIncomplete, LeaseLost
from lowkiq.serializers import Codec, decode_failure
from lowkiq.storage import blob
from lowkiq.storage import layout as layouts
from lowkiq.storage.keys import QueueKeys
from lowkiq.storage.layout import Layout
from lowkiq.storage.scripts import Scripts, run_on_masters, run_pipelined, run_replicated

log = logging.getLogger("lowkiq.storage")

# A processing-area value: perform_in, retry_count, error length (-1: none).
PROCESSING_HEADER = struct.Struct(">dii")


def _now(now: float | None) -> float:
    return time.time() if now is None else now


def shard_of(job_id: str, shards_count: int, base: int = 0) -> int:
    """The shard of a job id: ``base + crc32(id) % shards_count``."""
    return base + zlib.crc32(job_id.encode()) % shards_count


#: A validated job ready to push: id, serialized payload, score, perform_in.
#: A plain tuple: enqueueing builds one per job, and a tuple is the cheapest.
NewJob = tuple[str, bytes, float, float]


@dataclass(slots=True)
class PoppedJob:
    """A job taken into a shard's processing area by :meth:`Queue.pop`."""

    id: str
    retry_count: int
    payloads: list[Any] = field(default_factory=list)
    perform_in: float = 0.0
    #: Why a payload of the job cannot be decoded (``payloads`` is then empty):
    #: the job is not performed but buried (:meth:`Queue.bury`).
    undecodable: str | None = None


#: ``Popped.acked`` when no ack was asked, and when the ack's lease was not held.
NO_ACK = -2
ACK_FENCED = -1


@dataclass(slots=True)
class Popped:
    """What :meth:`Queue.pop` did: the ack it carried, and the batch it took.

    ``acked`` is the size of the acked batch, :data:`NO_ACK` or
    :data:`ACK_FENCED` (the ack's lease was not held: nothing was acked).
    ``occupied``: the processing area still held a batch, nothing was popped.
    ``fenced``: the popped shard's lease was not held, nothing was popped.
    ``held``: a reshard holds the shard (:mod:`lowkiq.resharding`), nothing was popped.
    """

    acked: int
    jobs: list[PoppedJob]
    occupied: bool = False
    fenced: bool = False
    held: bool = False


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
    groups: dict[tuple[int, float], list[bytes]], base: int, now: float
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


@dataclass(frozen=True)
class Replication:
    """How many replicas a write must reach (Redis WAIT), and for how long to wait."""

    replicas: int
    timeout_ms: int


#: What the push script replies when its shard was retired by a reshard.
REFUSED = -1
#: How many times one enqueue follows a reshard before it gives up.
REROUTES = 3


def _fenced(exc: redis.ResponseError) -> bool:
    return str(exc).startswith("FENCED")


class _Prefixes(dict[int, str]):
    """Shard number -> the shard's key prefix, built on first use."""

    def __init__(self, queue_keys: QueueKeys) -> None:
        super().__init__()
        self.queue_keys = queue_keys

    def __missing__(self, shard: int) -> str:
        prefix = self[shard] = self.queue_keys.prefix(shard)
        return prefix


class Queue:
    """The storage of one worker's queue, bound to one Redis client.

    ``shards_count`` is the class's; the queue's layout in Redis
    (:mod:`lowkiq.storage.layout`, written from it at the queue's first use,
    changed only by a reshard) says where its shards are.
    """

    def __init__(
        self,
        client: Client,
        name: str,
        shards_count: int,
        codec: Codec | None = None,
        replication: Replication | None = None,
        layout: Layout | None = None,
    ) -> None:
        self.client = client
        self.name = name
        #: The class's ``shards_count``: the layout written when Redis has none yet.
        self.default_shards_count = shards_count
        self._layout = layout
        self.codec = codec or Codec()
        self.keys = QueueKeys(name)
        self.scripts = Scripts.for_client(client)
        self._prefixes = _Prefixes(self.keys)
        #: Whether ``client`` talks to a Redis Cluster (each shard a slot of its own).
        self.cluster = is_cluster(client)
        # A processing thread's client runs scripts on its own connection (fast path).
        self._run_script = getattr(client, "run_script", None)
        #: With replicas to wait for, every write waits until they have it.
        self.replication = replication if replication and replication.replicas else None
        #: Whether :meth:`pop_command` packs pops: on a processing thread's client, when
        #: no write waits for replicas.
        self.pipelines_pops = self._run_script is not None and self.replication is None

    @property
    def layout(self) -> Layout:
        """Where the queue's shards are (read from Redis at most every
        :data:`~lowkiq.storage.layout.MAX_AGE` seconds, unless given)."""
        if self._layout is not None:
            return self._layout
        return layouts.cached(self.client, self.name, self.default_shards_count)

    def refresh_layout(self, known: Layout | None = None) -> Layout:
        """Read the layout from Redis now (or take ``known``, just read) and keep it;
        returns it."""
        self._layout = known or layouts.read(self.client, self.name, self.default_shards_count)
        return self._layout

    @property
    def shards_count(self) -> int:
        """How many shards new jobs are spread over."""
        return self.layout.count

    @property
    def shards(self) -> range:
        """The numbers of every shard that may hold jobs (see :attr:`Layout.shards`)."""
        return self.layout.shards

    def shard_of(self, job_id: str) -> int:
        """The shard new jobs of ``job_id`` go to."""
        return self.layout.shard_of(job_id)

    def locator(self) -> Callable[[str], int]:
        """A function giving the shard an id's jobs are read and changed in: the one new
        jobs go to; during a reshard, the id's old shard until that one is emptied."""
        current = self.layout
        if current.previous is None:
            return current.shard_of
        old = Layout(*current.previous)
        emptied = {int(shard) for shard in self.client.smembers(self.keys.retired_set)}

        def located(job_id: str) -> int:
            shard = old.shard_of(job_id)
            return current.shard_of(job_id) if shard in emptied else shard

        return located

    def run(self, script_name: str, shard: int, *args: Any) -> Any:
        """Run one of the Lua scripts on ``shard`` with ``args`` as ``ARGV``."""
        script = getattr(self.scripts, script_name)
        return script(keys=[self.keys.prefix(shard)], args=args)

    def write(self, script_name: str, keys: list[str], *args: Any) -> Any:
        """Run a script that changes state; with :attr:`replication`, wait (Redis WAIT,
        same round trip) until enough replicas have the change."""
        script = getattr(self.scripts, script_name)
        if self.replication is None:
            if self._run_script is None:
                return script(keys=keys, args=args)
            return self._run_script(script, keys, args)
        wanted, timeout_ms = self.replication.replicas, self.replication.timeout_ms
        reply, acked = run_replicated(self.client, (script, keys, args), wanted, timeout_ms)
        if acked < wanted:
            log.warning(
                "%s: %s reached %d of %d replica(s) within %d ms; it is on the master only",
                self.name, script_name, acked, wanted, timeout_ms,
            )  # fmt: skip
        return reply

    def run_pipelined(
        self, calls: Sequence[tuple[str, int, Sequence[Any]]], transaction: bool = False
    ) -> list[Any]:
        """Run ``(script name, shard, args)`` calls in one round trip (see
        :func:`~lowkiq.storage.scripts.run_pipelined`); returns their replies."""
        return run_pipelined(
            self.client,
            [
                (getattr(self.scripts, name), [self.keys.prefix(shard)], args)
                for name, shard, args in calls
            ],
            transaction,
        )

    def run_fenced(self, script_name: str, shard: int, token: str, *args: Any) -> Any:
        """Run a script that needs the shard's lease; :class:`LeaseLost` when it is stale."""
        try:
            return self.write(script_name, [self._prefixes[shard]], token, *args)
        except redis.ResponseError as exc:
            if _fenced(exc):
                raise LeaseLost(f"{self.name}:{shard}: the lease is not held") from None
            raise

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
        by_shard = _push_args(groups, current.base, _now(now))
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

    def pop(
        self,
        shard: int,
        token: str,
        limit: int,
        now: float | None = None,
        ack_shard: int | None = None,
        ack_token: str = "",
    ) -> Popped:
        """Move up to ``limit`` due jobs of ``shard`` into its processing area.

        ``token`` is the shard's lease token.  ``ack_shard`` (this shard or
        another of this queue, with its lease token ``ack_token``) has its
        finished batch acked first, in the same script: a thread acks its
        last batch and pops the next in one round trip (on a Redis Cluster,
        another shard's ack is a call of its own, first).  The popped jobs come
        earliest ``perform_in`` first (none when nothing is due).
        """
        if ack_shard is not None and ack_shard != shard and self.cluster:
            return self._pop_acking_apart(shard, token, limit, _now(now), ack_shard, ack_token)
        if self.pipelines_pops:
            # A processing thread's client: the pop's command is packed once but for the time.
            client: Any = self.client
            command = self.pop_command(shard, token, limit, _now(now), ack_shard, ack_token)
            reply = client.run_command(command)
        else:
            keys = self._pop_keys(shard, ack_shard)
            reply = self.write("pop", list(keys), token, _now(now), limit, ack_token)
        return self.read_popped(reply)

    def pop_command(
        self, shard: int, token: str, limit: int, now: float, ack_shard: int | None, ack_token: str
    ) -> KeyedCommand:
        """:meth:`pop`'s command, packed, for the processing thread's client to send alone
        (``run_command``) or with others in one write (``run_keyed``); its reply is read
        by :meth:`read_popped`.
        Only when :attr:`pipelines_pops`; on a Redis Cluster, ``ack_shard`` is ``None`` or
        ``shard``."""
        keys = self._pop_keys(shard, ack_shard)
        client: Any = self.client
        packed = client.pack_around(self.scripts.pop, keys, (token,), now, (limit, ack_token))
        return (keys[0], packed, self.scripts.pop)

    def _pop_keys(self, shard: int, ack_shard: int | None) -> tuple[str, ...]:
        if ack_shard is None:
            return (self._prefixes[shard],)
        return (self._prefixes[shard], self._prefixes[ack_shard])

    def _pop_acking_apart(
        self, shard: int, token: str, limit: int, now: float, ack_shard: int, ack_token: str
    ) -> Popped:
        """:meth:`pop` with the ack of another shard on a Redis Cluster, where two shards
        are two slots: the ack is a call of its own, first.  (A processing thread on a
        cluster never asks for it: each shard's ack rides on that shard's next pop,
        see :class:`~lowkiq.shard_handler.DeferredAck`.)"""
        try:
            acked = self.ack(ack_shard, ack_token)
        except LeaseLost:
            acked = ACK_FENCED
        popped = self.pop(shard, token, limit, now)
        popped.acked = acked
        return popped

    def read_popped(self, reply: list[Any]) -> Popped:
        """A pop's reply, read (its ack's result, status, then the jobs)."""
        acked, status = reply[0], reply[1]
        if status != 1:
            return Popped(acked, [], status == 0, status == -1, status == -2)
        jobs = [
            self._popped_job(
                reply[i].decode(), int(reply[i + 1]), float(reply[i + 2]), reply[i + 3]
            )
            for i in range(2, len(reply), 4)
        ]
        return Popped(acked, jobs)

    def _popped_job(
        self, job_id: str, retry_count: int, perform_in: float, data: bytes
    ) -> PoppedJob:
        load = self.codec.load_payload
        pairs = blob.unpack(data)
        try:
            payloads = [load(payload) for payload, _ in pairs]
        except Exception:
            for n, (payload, _) in enumerate(pairs, 1):
                try:
                    load(payload)
                except Exception as exc:
                    reason = decode_failure(f"payload {n} of {len(pairs)}", exc)
                    break
            return PoppedJob(job_id, retry_count, [], perform_in, undecodable=reason)
        return PoppedJob(job_id, retry_count, payloads, perform_in)

    def ack(self, shard: int, token: str) -> int:
        """The batch of ``shard`` succeeded: clear its processing area; returns its size.

        Raises :class:`LeaseLost` (and changes nothing) when ``token`` is stale.
        """
        return int(self.run_fenced("ack", shard, token))

    def fail(
        self,
        shard: int,
        token: str,
        batch: Sequence[PoppedJob],
        error: str,
        retry_in: Callable[[int], float],
        max_retry_count: int,
        now: float | None = None,
    ) -> list[dict[str, Any]]:
        """The batch of ``shard`` raised: retry or bury each job, atomically (SPEC §4).

        ``retry_in(retry_count)`` gives each job's delay.  Returns the jobs sent
        to the morgue as ``{"id", "payloads", "error"}`` for ``retries_exhausted``,
        ``payloads`` being ``[[payload, score]]`` like every job dict of the API.
        Raises :class:`LeaseLost` (and changes nothing) when ``token`` is stale.
        """
        now = _now(now)
        args: list[Any] = [now, self.codec.error_bytes(error), max_retry_count]
        for job in batch:
            args += (job.id, now + float(retry_in(job.retry_count + 1)))
        reply = self.run_fenced("fail", shard, token, *args)
        return [
            {
                "id": reply[i].decode(),
                "payloads": self.load_pairs(blob.unpack(reply[i + 1])),
                "error": error,
            }
            for i in range(0, len(reply), 2)
        ]

    def restore(self, shard: int, token: str, now: float | None = None) -> int:
        """Put the shard's processing area back into the queue; returns its size.

        Only the lease holder restores (a new owner does it when it acquires the
        lease); raises :class:`LeaseLost` when ``token`` is stale.
        """
        return int(self.run_fenced("restore", shard, token, _now(now)))

    def bury(
        self, shard: int, token: str, jobs: Sequence[tuple[str, str]], now: float | None = None
    ) -> int:
        """Move jobs of ``shard``'s batch, whole, to the morgue with their own error
        (``(id, error)`` pairs): jobs that retrying cannot help, such as a payload
        ``load_payload`` cannot read.  The payloads keep their stored bytes.
        Returns how many moved; raises :class:`LeaseLost` when ``token`` is stale.
        """
        args: list[Any] = [_now(now)]
        for job_id, error in jobs:
            args += (job_id, self.codec.error_bytes(error))
        return int(self.run_fenced("bury", shard, token, *args))

    def load_pairs(self, pairs: Iterable[tuple[bytes, float]]) -> list[list[Any]]:
        """``[[payload, score], ...]`` of stored ``(payload bytes, score)`` pairs; a payload
        that cannot be decoded comes as :class:`~lowkiq.serializers.Undecodable`."""
        load = self.codec.payload_or_undecodable
        return [[load(payload), score] for payload, score in pairs]

    def earliest_perform_in(self, shards: Sequence[int]) -> list[float | None]:
        """The earliest ``perform_in`` queued in each shard, or ``None`` when it is empty."""
        pipe = self.client.pipeline(transaction=False)
        for shard in shards:
            pipe.zrange(self.keys.perform_in_zset(shard), 0, 0, withscores=True)
        return [head[0][1] if head else None for head in pipe.execute()]
