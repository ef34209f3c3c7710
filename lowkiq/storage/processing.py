"""The processing lifecycle of one queue's batches: pop (due jobs into a shard's
processing area), then ack, fail (retry or bury), bury or restore; every call fenced
by the shard's lease.

Each method is one Lua script call, so every state change is atomic and a crash
between two calls leaves the queue consistent (see SPEC §4).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from lowkiq.clients.connection import KeyedCommand
from lowkiq.errors import LeaseLost, StaleBatch
from lowkiq.outcomes import Fate
from lowkiq.serializers import decode_failure
from lowkiq.storage import blob
from lowkiq.storage import workflow_tags as tags
from lowkiq.storage.queue_base import QueueBase
from lowkiq.storage.rate_bucket import Throttle

# A processing-area value: perform_in, retry_count, error length (-1: none).
PROCESSING_HEADER = struct.Struct(">dii")
#: A processing-area value of one payload and no error (the header, then the blob's):
#: perform_in, retry_count, -1, the payload's score and length.
_PLAIN_ONE = struct.Struct(">diidI")
#: The byte a processing-area value of a job of a group (not the default one) starts
#: with, then ``>I`` the group's length and the group, then the value as above.
GROUP_MARK = 0xFF


def processing_group(value: bytes) -> tuple[str | None, int]:
    """The group of a processing-area value (``None``: the default one) and the offset
    of its :data:`PROCESSING_HEADER`."""
    if value[0] != GROUP_MARK:
        return None, 0
    (length,) = struct.unpack_from(">I", value, 1)
    return value[5 : 5 + length].decode(), 5 + length


def processing_blob(value: bytes) -> bytes:
    """The blob (payloads) of a processing-area value."""
    return popped_fields(value)[2]


def popped_fields(value: bytes) -> tuple[int, float, bytes]:
    """The retry_count, perform_in and blob of a processing-area value (as a pop returns
    each job it takes)."""
    offset = 0
    if value[0] == GROUP_MARK:
        offset = 5 + int.from_bytes(value[1:5], "big")
    perform_in, retry_count, error_length = PROCESSING_HEADER.unpack_from(value, offset)
    return retry_count, perform_in, value[offset + PROCESSING_HEADER.size + max(error_length, 0) :]


def _job_groups(jobs: list[PoppedJob], told: list[Any]) -> dict[str, int]:
    """Give each popped job its group, from a pop's list of groups (see ``pop.lua``: the
    group of each job joined by NULs, or one group for every job); returns the jobs taken
    of each group."""
    if not told or not jobs:
        return {}
    names = told[0].split(b"\0")
    if len(names) == 1:
        group = names[0].decode()
        for job in jobs:
            job.group = group
        return {group: len(jobs)}
    counts: dict[str, int] = {}
    for job, name in zip(jobs, names, strict=True):
        group = job.group = name.decode()
        counts[group] = counts.get(group, 0) + 1
    return counts


def _now(now: float | None) -> float | str:
    """A script's ``now`` argument: ``""`` (the script reads Redis's clock), or the
    time a test fixes."""
    return "" if now is None else now


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
    #: The job's group, when its shard holds jobs of groups (``""``: the default one;
    #: ``None``: not told, a shard whose jobs have none).
    group: str | None = None
    #: The workflows its payloads are members of (:mod:`lowkiq.workflows`), in order
    #: (a tuple when none: no list made per job).
    workflows: Sequence[str] = ()
    #: When equal payloads in and out of workflows came as one (``payloads``), the
    #: positions of the stored payloads behind each (``yield_rest`` gives all back).
    stored: list[list[int]] | None = None


@dataclass(frozen=True, slots=True)
class JobEnd:
    """How one job of a batch that raised ends (:meth:`Processing.settle_failed`): its
    fate, its error text (retried and killed jobs) and, for a retry, the seconds until
    it is due again."""

    id: str
    fate: Fate
    error: str | None = None
    retry_in: float = 0.0


#: Why a batch goes back into the queue unrun, as its jobs' ``restored`` events say
#: (``reason``; none: its process died or stopped running it): ``group_full`` (a group
#: of the batch was at its ``group_concurrency`` cap, or out of tokens), ``given_up``
#: (the shard was handed over, or the process stopped, before it ran),
#: ``suspect_waits`` (another suspect batch runs first, alone), ``redis_error`` (a
#: Redis error left what the processing area holds unknown).
RESTORE_REASONS = frozenset({"group_full", "given_up", "suspect_waits", "redis_error"})

#: ``Popped.acked`` when no ack was asked, when the ack's lease was not held, and when
#: the processing area held another batch than the one the ack named.
NO_ACK = -2
ACK_FENCED = -1
ACK_STALE = -3


@dataclass(slots=True)
class Popped:
    """What :meth:`Queue.pop` did: the ack it carried, and the batch it took.

    ``acked`` is the size of the acked batch, :data:`NO_ACK`, :data:`ACK_FENCED`
    (the ack's lease was not held: nothing was acked) or :data:`ACK_STALE` (the
    processing area held another batch than the one the ack named: nothing was acked).
    ``batch``: the number of the batch popped (0: none), which its ack, fail, yield,
    bury and restore name.
    ``occupied``: the processing area still held a batch, nothing was popped.
    ``fenced``: the popped shard's lease was not held, nothing was popped.
    ``held``: a reshard holds the shard (:mod:`lowkiq.ownership.resharding`), nothing was popped.
    ``limited``: the worker's rate limit gave no token now, nothing was popped.
    ``wait``: with a rate limit, seconds before the shard may be popped again.
    ``suspect``: the one job popped had ended a process running it before (it was
    restored by the shard's next owner), so it runs with no other batch of the process
    in processing (:mod:`lowkiq.runtime.suspects`).
    ``needs_tokens``: on a Redis Cluster, the shard's rate-limit budget ran out and
    due jobs remain: reserve tokens (:func:`~lowkiq.storage.rate_bucket.take`) for its
    next pop.
    ``groups``: with ``capped`` groups given, the jobs taken of each group (the default
    one ``""``), whose places and tokens the batch claims
    (:mod:`lowkiq.storage.group_claims`).
    ``members``: some job popped holds workflow members (:mod:`lowkiq.workflows`).
    ``empty``: nothing was popped, and the shard holds no job at all (a pop without an
    ack or a rate limit says so).
    """

    acked: int
    jobs: list[PoppedJob]
    batch: int = 0
    occupied: bool = False
    fenced: bool = False
    held: bool = False
    limited: bool = False
    wait: float = 0.0
    needs_tokens: bool = False
    suspect: bool = False
    groups: Mapping[str, int] = field(default_factory=dict)
    members: bool = False
    empty: bool = False


#: The fields of a pop's reply before its jobs (:meth:`Processing.read_popped`).
POP_REPLY_HEAD = 4
#: A pop's whole reply when it acked nothing and its shard holds no job (an idle shard's).
EMPTY_SHARD = -1


def holds_jobs(reply: Any) -> bool:
    """Whether the reply of a pop (read, :class:`Popped`, or not yet) holds jobs: one
    that took none, was refused or failed has no field past its head."""
    if isinstance(reply, Popped):
        return bool(reply.jobs)
    return isinstance(reply, list) and len(reply) > POP_REPLY_HEAD


def _tail_args(
    throttle: Throttle | None,
    batches: int,
    weights: tuple[Any, ...],
    capped: frozenset[str] | None = None,
) -> tuple[Any, ...]:
    """A pop's arguments after its ack batch: the number of batches and the rate limit's
    (a throttle says how many batches it takes), or without a limit the number of
    batches alone (none for one), then, before the groups' ``weights`` (pairs group,
    weight), empty ones.  With ``capped`` (``Worker.group_concurrency``: the groups at
    their cap, maybe none), a NUL first, and those groups weigh 0: the pop skips them and
    names the groups it took."""
    if capped is not None:
        weights = ("\0", *weights, *(arg for group in capped for arg in (group, 0)))
    if throttle is not None:
        return throttle.args() + weights
    if weights:
        return (batches, "", "", "", "", "", *weights)
    if batches > 1:
        return (batches,)
    return ()


def _pop_args(
    token: str,
    now: Any,
    limit: int,
    ack: tuple[str, int | str] | None,
    tail: tuple[Any, ...],
) -> tuple[Any, ...]:
    """The pop script's ARGV; ``ack``: the acked shard's token and batch (``None``: no
    ack).  A pop that acks nothing and has nothing after the ack's arguments (one batch,
    no rate limit, no weights: an idle shard's) sends no ack arguments (each argument of
    a script call costs Redis about 1.1 k instructions)."""
    if ack is None:
        if not tail:
            return (token, now, limit)
        ack = ("", 0)
    return (token, now, limit, *ack, *tail)


class Processing(QueueBase):
    """Taking batches out of the queue's shards and settling them (see the module)."""

    #: The pop's share of each group (``Worker.group_weights``) as its arguments: pairs
    #: group, weight; a group not named weighs 1.
    group_weight_args: tuple[Any, ...] = ()

    def set_group_weights(self, weights: Mapping[str, float]) -> None:
        """Take due jobs across groups in proportion to ``weights`` (group -> weight)."""
        self.group_weight_args = tuple(
            arg for group, weight in weights.items() for arg in (group, repr(float(weight)))
        )

    def pop(
        self,
        shard: int,
        token: str,
        limit: int,
        now: float | None = None,
        ack_shard: int | None = None,
        ack_token: str = "",
        throttle: Throttle | None = None,
        batches: int = 1,
        capped: frozenset[str] | None = None,
        ack_batch: int | str = 0,
    ) -> Popped:
        """Move up to ``limit`` due jobs of ``shard`` into its processing area.

        ``token`` is the shard's lease token.  ``ack_shard`` (this shard or
        another of this queue, with its lease token ``ack_token``) has its
        finished batch ``ack_batch`` acked first, in the same script: a thread acks its
        last batch and pops the next in one round trip (on a Redis Cluster,
        another shard's ack is a call of its own, first); ``ack_batch`` as a string, the
        number then ``w``: the batch holds workflow members (see :meth:`ack`).  The
        popped jobs come
        earliest ``perform_in`` first (none when nothing is due).  With a ``throttle``
        (the worker's rate limit) it pops at most the tokens the shard may spend.
        ``capped``: see :meth:`pop_command`.
        """
        if ack_shard is not None and ack_shard != shard and self.cluster:
            return self._pop_acking_apart(
                shard, token, limit, now, ack_shard, ack_token, ack_batch, throttle
            )
        if self.pipelines_pops and now is None:
            # A processing thread's client: the pop's command is packed once.
            client: Any = self.client
            command = self.pop_command(
                shard, token, limit, ack_shard, ack_token, throttle, batches, capped, ack_batch
            )
            reply = client.run_command(command)
        else:
            keys = self._pop_keys(shard, ack_shard, throttle)
            rate = _tail_args(throttle, batches, self.group_weight_args, capped)
            ack = None if ack_shard is None else (ack_token, ack_batch)
            reply = self.write("pop", list(keys), *_pop_args(token, _now(now), limit, ack, rate))
        return self.read_popped(reply)

    def pop_command(
        self,
        shard: int,
        token: str,
        limit: int,
        ack_shard: int | None,
        ack_token: str,
        throttle: Throttle | None = None,
        batches: int = 1,
        capped: frozenset[str] | None = None,
        ack_batch: int | str = 0,
    ) -> KeyedCommand:
        """:meth:`pop`'s command, packed, for the processing thread's client to send alone
        (``run_command``) or with others in one write (``run_keyed``); its reply is read
        by :meth:`read_popped`.
        Only when :attr:`pipelines_pops`; on a Redis Cluster, ``ack_shard`` is ``None`` or
        ``shard``.  ``capped`` (``Worker.group_concurrency``): the groups at their cap,
        which the pop skips; the reply then names the groups of the jobs taken."""
        keys = self._pop_keys(shard, ack_shard, throttle)
        client: Any = self.client
        tail = _tail_args(throttle, batches, self.group_weight_args, capped)
        ack = None if ack_shard is None else (ack_token, ack_batch)
        args = _pop_args(token, "", limit, ack, tail)
        packed = client.pack_script(self.scripts.pop, keys, args)
        return (keys[0], packed, self.scripts.pop)

    def ack_command(
        self, shard: int, token: str, batch: int, members: bool = False
    ) -> KeyedCommand:
        """:meth:`ack`'s command, packed to go out with others in one write (``run_keyed``);
        its reply is the acked batch's size, or a ``FENCED`` or ``STALE`` error reply."""
        client: Any = self.client
        key = self._prefixes[shard]
        args = (token, batch, "1") if members else (token, batch)
        packed = client.pack_script(self.scripts.ack, (key,), args)
        return (key, packed, self.scripts.ack)

    def _pop_keys(
        self, shard: int, ack_shard: int | None, throttle: Throttle | None = None
    ) -> tuple[str, ...]:
        ack = "" if ack_shard is None else self._prefixes[ack_shard]
        if throttle is not None and not self.cluster:
            # One server: the pop takes tokens from the worker's bucket itself.
            return (self._prefixes[shard], ack, self.keys.rate_bucket_hash)
        return (self._prefixes[shard],) if ack_shard is None else (self._prefixes[shard], ack)

    def _pop_acking_apart(
        self,
        shard: int,
        token: str,
        limit: int,
        now: float | None,
        ack_shard: int,
        ack_token: str,
        ack_batch: int | str,
        throttle: Throttle | None = None,
    ) -> Popped:
        """:meth:`pop` with the ack of another shard on a Redis Cluster, where two shards
        are two slots: the ack is a call of its own, first.  (A worker process never asks
        for it: each shard's ack rides on that shard's own next pop.)"""
        members = isinstance(ack_batch, str) and ack_batch.endswith("w")
        try:
            acked = self.ack(ack_shard, ack_token, int(str(ack_batch).rstrip("w")), members)
        except LeaseLost:
            acked = ACK_FENCED
        except StaleBatch:
            acked = ACK_STALE
        popped = self.pop(shard, token, limit, now, throttle=throttle)
        popped.acked = acked
        return popped

    def read_popped(self, reply: list[Any] | int) -> Popped:
        """A pop's reply, read (its ack's result, status, the rate limit's wait, the batch's
        number, after a pop given ``capped`` groups the jobs taken of each group, a list,
        then the jobs; or :data:`EMPTY_SHARD` alone)."""
        if reply == EMPTY_SHARD:
            return Popped(NO_ACK, [], empty=True)
        reply = cast(list[Any], reply)
        acked, status, wait, batch = reply[0], reply[1], reply[2], reply[3]
        if status not in (1, 2):
            if status == -3:
                return Popped(
                    acked, [], limited=True, wait=max(wait, 0) / 1000, needs_tokens=wait < 0
                )
            return Popped(acked, [], occupied=status == 0, fenced=status == -1, held=status == -2)
        if batch == -1:
            return Popped(acked, [], empty=True)
        # A job's id is a string: a list there is the groups of the jobs taken.
        counted = len(reply) > POP_REPLY_HEAD and isinstance(reply[POP_REPLY_HEAD], list)
        first = POP_REPLY_HEAD + 1 if counted else POP_REPLY_HEAD
        # Workflow members are rare: one search of all the jobs' bytes for their mark.
        marked = b"".join(reply[first + 1 :: 2]).find(tags.MARK) != -1
        if marked:
            jobs = [
                self._popped_job(reply[i].decode(), *popped_fields(reply[i + 1]))
                for i in range(first, len(reply), 2)
            ]
        else:
            jobs = self._plain_jobs(reply, first)
        suspect = status == 2
        members = marked and any(job.workflows for job in jobs)
        groups = _job_groups(jobs, reply[POP_REPLY_HEAD] if counted else [])
        if wait:
            return Popped(
                acked,
                jobs,
                batch,
                wait=max(wait, 0) / 1000,
                needs_tokens=wait < 0,
                suspect=suspect,
                groups=groups,
                members=members,
            )
        return Popped(acked, jobs, batch, suspect=suspect, groups=groups, members=members)

    def _popped_job(
        self, job_id: str, retry_count: int, perform_in: float, data: bytes
    ) -> PoppedJob:
        if data.find(tags.MARK) != -1:  # (`in` tries the mark as an int first: an error)
            return self._member_job(job_id, retry_count, perform_in, blob.unpack(data))
        return self._plain_job(job_id, retry_count, perform_in, data)

    def _plain_jobs(self, reply: list[Any], first: int) -> list[PoppedJob]:
        """The jobs of a pop's reply (from ``reply[first]``: id, processing-area value of
        each) none of whose payloads is a workflow member.  Most are one payload of the
        default group, with no error: read with one unpack."""
        load = self.codec.load_payload
        unpack = _PLAIN_ONE.unpack_from
        size = _PLAIN_ONE.size
        jobs = []
        for i in range(first, len(reply), 2):
            job_id, value = reply[i].decode(), reply[i + 1]
            if value[0] != GROUP_MARK:
                perform_in, retry_count, error_length, _, length = unpack(value)
                if error_length < 0 and length == len(value) - size:
                    try:
                        payloads = [load(value[size:])]
                        jobs.append(PoppedJob(job_id, retry_count, payloads, perform_in))
                        continue
                    except Exception:  # noqa: S112 - read again below, as undecodable
                        pass
            jobs.append(self._plain_job(job_id, *popped_fields(value)))
        return jobs

    def _plain_job(
        self, job_id: str, retry_count: int, perform_in: float, data: bytes
    ) -> PoppedJob:
        """A popped job none of whose payloads is a workflow member."""
        pairs = blob.unpack(data)
        load = self.codec.load_payload
        try:
            return PoppedJob(job_id, retry_count, [load(p) for p, _ in pairs], perform_in)
        except Exception:
            reason = self._undecodable(pairs)
            return PoppedJob(job_id, retry_count, [], perform_in, undecodable=reason)

    def _member_job(
        self, job_id: str, retry_count: int, perform_in: float, pairs: list[tuple[bytes, float]]
    ) -> PoppedJob:
        """A popped job with payloads tagged as workflow members (:mod:`lowkiq.workflows`)."""
        kept, workflows = tags.untagged(pairs)
        stored = tags.origins(pairs) if len(kept) < len(pairs) else None
        load = self.codec.load_payload
        try:
            payloads = [load(payload) for payload, _ in kept]
        except Exception:
            reason = self._undecodable(kept)
            return PoppedJob(
                job_id, retry_count, [], perform_in, undecodable=reason, workflows=workflows
            )
        return PoppedJob(
            job_id, retry_count, payloads, perform_in, workflows=workflows, stored=stored
        )

    def _undecodable(self, pairs: list[tuple[bytes, float]]) -> str:
        """Why a payload of ``pairs`` cannot be decoded (the first that cannot)."""
        for n, (payload, _) in enumerate(pairs, 1):
            try:
                self.codec.load_payload(payload)
            except Exception as exc:
                return decode_failure(f"payload {n} of {len(pairs)}", exc)
        return decode_failure(f"{len(pairs)} payloads", ValueError("not decodable"))

    def ack(self, shard: int, token: str, batch: int, members: bool = False) -> int:
        """Batch ``batch`` of ``shard`` succeeded: clear its processing area; returns its
        size.  ``members``: the area holds workflow members, noted done in the shard's
        outbox (:mod:`lowkiq.workflows.relay`).

        Raises :class:`LeaseLost` (and changes nothing) when ``token`` is stale, and
        :class:`StaleBatch` when the area holds another batch.
        """
        if members:
            return int(self.run_fenced("ack", shard, token, batch, "1"))
        return int(self.run_fenced("ack", shard, token, batch))

    def ack_yield(
        self,
        shard: int,
        token: str,
        batch: int,
        yields: Mapping[str, Sequence[int]],
        now: float | None = None,
    ) -> int:
        """The batch of ``shard`` succeeded, but the ids of ``yields`` gave payloads back:
        those at the given positions (0-based, in the order of the id's popped payloads)
        go back to the queue, due now, with their scores; the rest of the processing
        area is acked.  Returns how many ids gave payloads back.

        Raises :class:`LeaseLost` (and changes nothing) when ``token`` is stale, and
        :class:`StaleBatch` when the area holds another batch than ``batch``.
        """
        args: list[Any] = [batch, _now(now)]
        for job_id, positions in yields.items():
            args += (job_id, len(positions), *(position + 1 for position in positions))
        return int(self.run_fenced("ack_yield", shard, token, *args)[1])

    def count_stale(self, shard: int) -> None:
        """Count a call that named a batch no longer in ``shard``'s processing area (it
        changed nothing): the ``stale_calls`` metric."""
        self.client.incr(self.keys.stale_counter(shard))

    def announce_stop(self, shard: int, token: str) -> None:
        """This process stops with a batch of ``shard`` running: should it be killed before
        the batch is settled, the next owner restores it without counting a restore.

        Raises :class:`LeaseLost` (and changes nothing) when ``token`` is stale.
        """
        self.run_fenced("announce_stop", shard, token)

    def fail(
        self,
        shard: int,
        token: str,
        batch: int,
        jobs: Sequence[PoppedJob],
        error: str,
        retry_in: Callable[[int], float],
        max_retry_count: int,
        now: float | None = None,
    ) -> list[dict[str, Any]]:
        """Batch ``batch`` (its ``jobs``) of ``shard`` raised: retry or bury each job,
        atomically (SPEC §4).

        ``retry_in(retry_count)`` gives each job's delay, added to Redis's clock by the
        script (``now``: a time a test fixes instead).  Returns the jobs sent
        to the morgue as ``{"id", "payloads", "error"}`` for ``retries_exhausted``,
        ``payloads`` being ``[[payload, score]]`` like every job dict of the API.
        Raises :class:`LeaseLost` (and changes nothing) when ``token`` is stale.
        """
        ends = [
            JobEnd(job.id, Fate.RETRY, error, float(retry_in(job.retry_count + 1))) for job in jobs
        ]
        return self.settle_failed(shard, token, batch, ends, max_retry_count, now)

    def settle_failed(
        self,
        shard: int,
        token: str,
        batch: int,
        ends: Sequence[JobEnd],
        max_retry_count: int,
        now: float | None = None,
    ) -> list[dict[str, Any]]:
        """The batch of ``shard`` raised: each job of ``ends`` ends as its fate says
        (retried or buried under SPEC §4, killed, discarded or acked), in one script.

        Returns the jobs sent to the morgue (killed, or out of retries) as
        ``{"id", "payloads", "error"}`` for ``retries_exhausted``.  Raises
        :class:`LeaseLost` (and changes nothing) when ``token`` is stale.
        """
        texts: dict[str, int] = {}
        jobs: list[Any] = []
        for end in ends:
            index = 0 if end.error is None else texts.setdefault(end.error, len(texts) + 1)
            jobs += (end.id, end.fate.value, index, end.retry_in)
        errors = [self.codec.error_bytes(text) for text in texts]
        args = [batch, _now(now), max_retry_count, len(errors), *errors, *jobs]
        reply = self.run_fenced("fail", shard, token, *args)
        error_of = {end.id: end.error for end in ends}
        return [
            {
                "id": (job_id := reply[i].decode()),
                "payloads": self.load_pairs(blob.unpack(reply[i + 1])),
                "error": error_of[job_id],
            }
            for i in range(0, len(reply), 2)
        ]

    def restore(
        self,
        shard: int,
        token: str,
        batch: int | None = None,
        now: float | None = None,
        reason: str = "",
    ) -> int:
        """Put batch ``batch`` of the shard back into the queue (``None``: whatever batch
        its processing area holds); returns its size.  ``reason``: why it goes back, one
        of :data:`RESTORE_REASONS` (its jobs' ``restored`` events say it).

        Only the lease holder restores (a new owner does it when it acquires the
        lease); raises :class:`LeaseLost` when ``token`` is stale, and
        :class:`StaleBatch` when the area holds another batch than ``batch``.
        """
        if reason and reason not in RESTORE_REASONS:
            raise ValueError(f"restore reason {reason!r} is not one of {sorted(RESTORE_REASONS)}")
        return int(
            self.run_fenced(
                "restore", shard, token, "" if batch is None else batch, _now(now), reason
            )
        )

    def bury(
        self,
        shard: int,
        token: str,
        batch: int,
        jobs: Sequence[tuple[str, str]],
        now: float | None = None,
    ) -> int:
        """Move jobs of ``shard``'s batch, whole, to the morgue with their own error
        (``(id, error)`` pairs): jobs that retrying cannot help, such as a payload
        ``load_payload`` cannot read.  The payloads keep their stored bytes.
        Returns how many moved; raises :class:`LeaseLost` when ``token`` is stale, and
        :class:`StaleBatch` when the area holds another batch than ``batch``.
        """
        args: list[Any] = [batch, _now(now)]
        for job_id, error in jobs:
            args += (job_id, self.codec.error_bytes(error))
        return int(self.run_fenced("bury", shard, token, *args))

    def due_in(self, shards: Sequence[int]) -> list[float | None]:
        """Seconds until the earliest job of each shard is due on Redis's clock (negative:
        due already), or ``None`` when it holds no job; one round trip."""
        replies = self.run_pipelined([("due_in", shard, ()) for shard in shards])
        return [None if reply is None else float(reply) for reply in replies]

    def due_in_command(self, shard: int) -> KeyedCommand:
        """:meth:`due_in` of one shard, packed for the processing thread's client (see
        :meth:`pop_command`); its reply is ``None`` or the seconds as bytes."""
        client: Any = self.client
        key = self._prefixes[shard]
        return (key, client.pack_script(self.scripts.due_in, (key,), ()), self.scripts.due_in)
