"""Per group of a worker: at most N batches running at once (``Worker.group_concurrency``)
and at most so many jobs started per second (``RateLimit(..., per_group=True)``), across
every process and host.

A batch claims, for each group of its jobs, a place (not for the default group, jobs
without one) and a token per job, in the worker's claims slot
(``lowkiq:{name:groups}:``), after its pop and before it runs: all or none, so a
refused batch goes back to its queue unrun.  A group may have a cap and a rate of its
own, set at run time (:mod:`lowkiq.storage.group_limits`), read by the same call.  A
place lives the lease TTL unless its
process renews it, so the places of a process that died come back with its leases; a
finished batch releases its places.  Each group's tokens are a bucket refilled at the
rate.  Every answer also names the groups at their cap or out of tokens, which the
process's pops then skip (``lowkiq/storage/lua/group_claims.lua``).

A claimant is ``"shard epoch"``: the epoch of the lease the batch was popped under, so a
process whose lease lapsed never releases the places of the shard's next owner.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, NamedTuple

from lowkiq.clients.connection import KeyedCommand
from lowkiq.limits.rate_limit import RateLimit
from lowkiq.storage.queue import Queue

Operation = Literal["claim", "release", "renew", "full"]


class ClaimCall(NamedTuple):
    """One call of the claims script: the operation, the claimant, the jobs of each
    group (a release or renewal: any count), the per-group rate in force."""

    op: Operation
    who: str
    jobs: Mapping[str, int]
    rate: RateLimit | None


def claimant(shard: int, token: str) -> str:
    """The claimant of a batch popped from ``shard`` under the lease ``token``."""
    return f"{shard} {token.partition(' ')[0]}"


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def read_claims(reply: list[Any]) -> tuple[bool, frozenset[str], dict[str, float]]:
    """A call's answer: whether its claim was granted (or its places renewed), the
    groups at their cap, and the groups out of tokens with the seconds until their
    bucket holds one again."""
    granted, capped, dry = reply
    waits = {_text(dry[i]): int(dry[i + 1]) / 1000 for i in range(0, len(dry), 2)}
    return bool(granted), frozenset(_text(g) for g in capped), waits


class GroupClaims:
    """The claims of one worker's batches on its groups' places and tokens."""

    def __init__(self, queue: Queue, cap: int | None, ttl: float, batch_size: int = 1) -> None:
        #: The worker's queue (its claims slot and scripts).
        self.queue = queue
        #: ``Worker.group_concurrency`` (``None``: no cap).
        self.cap = cap
        #: How long a place lives unless renewed, milliseconds (the lease TTL).
        self.ttl_ms = max(1, round(ttl * 1000))
        #: The worker's batch size (a group's bucket holds at least a batch).
        self.batch_size = batch_size
        #: Whether some group has a cap or a rate of its own, set at run time
        #: (:mod:`lowkiq.storage.group_limits`): the script then reads them.
        self.own_limits = False
        self._key = queue.keys.group_claims_prefix

    def _args(self, call: ClaimCall) -> tuple[Any, ...]:
        op, who, jobs, rate = call
        cap = "" if self.cap is None else self.cap
        if rate is None:
            tokens: tuple[Any, ...] = ("", "")
        else:
            tokens = (repr(rate.per_second / 1000), rate.capacity(self.batch_size))
        own = self.batch_size if self.own_limits else ""
        pairs = (arg for group, count in jobs.items() for arg in (group, count))
        return (op, cap, self.ttl_ms, who, *tokens, own, *pairs)

    def call(
        self,
        op: Operation,
        who: str = "",
        jobs: Mapping[str, int] | None = None,
        rate: RateLimit | None = None,
    ) -> tuple[bool, frozenset[str], dict[str, float]]:
        """Run ``op`` for the claimant ``who`` on ``jobs`` (group -> jobs of it in the
        batch), under the per-group ``rate`` (see the module)."""
        return read_claims(self.reply(ClaimCall(op, who, jobs or {}, rate)))

    def reply(self, call: ClaimCall) -> Any:
        """``call``'s reply, in a round trip of its own, unread (for :func:`read_claims`)."""
        return self.queue.scripts.group_claims(keys=[self._key], args=self._args(call))

    def command(self, call: ClaimCall) -> KeyedCommand:
        """``call``'s command, packed to go out in one write with a round's pops and acks
        (a processing client's ``run_keyed``); its reply is read by :func:`read_claims`."""
        client: Any = self.queue.client
        script = self.queue.scripts.group_claims
        return (self._key, client.pack_script(script, (self._key,), self._args(call)), script)
