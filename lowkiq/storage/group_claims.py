"""``Worker.group_concurrency``: at most N batches running jobs of one group across every
process and host.

A batch claims a place of each group of its jobs (the default group, jobs without one,
is never capped) in the worker's claims slot (``lowkiq:{name:groups}:``), after its pop
and before it runs, all places or none: a refused batch goes back to its queue unrun.
A claim lives the lease TTL unless its process renews it, so the places of a process
that died come back with its leases; a finished batch releases its places.  Every
answer also names the groups at the cap, which the process's pops then skip
(``lowkiq/storage/lua/group_claims.lua``).

A claimant is ``"shard epoch"``: the epoch of the lease the batch was popped under, so a
process whose lease lapsed never releases the places of the shard's next owner.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

from lowkiq.clients.connection import KeyedCommand
from lowkiq.storage.queue import Queue

Operation = Literal["claim", "release", "renew", "full"]


def claimant(shard: int, token: str) -> str:
    """The claimant of a batch popped from ``shard`` under the lease ``token``."""
    return f"{shard} {token.partition(' ')[0]}"


def read_claims(reply: list[Any]) -> tuple[bool, frozenset[str]]:
    """A call's answer: whether its claims were granted (or renewed), and the groups at
    the cap now."""
    granted, full = reply
    return bool(granted), frozenset(g.decode() if isinstance(g, bytes) else g for g in full)


class GroupClaims:
    """The claims of one worker's batches on its groups' places."""

    def __init__(self, queue: Queue, cap: int, ttl: float) -> None:
        #: The worker's queue (its claims slot and scripts).
        self.queue = queue
        #: ``Worker.group_concurrency``.
        self.cap = cap
        #: How long a claim lives unless renewed, milliseconds (the lease TTL).
        self.ttl_ms = max(1, round(ttl * 1000))
        self._key = queue.keys.group_claims_prefix

    def _args(self, op: Operation, who: str, groups: Iterable[str]) -> tuple[Any, ...]:
        return (op, self.cap, self.ttl_ms, who, *groups)

    def call(
        self, op: Operation, who: str = "", groups: Iterable[str] = ()
    ) -> tuple[bool, frozenset[str]]:
        """Run ``op`` for the claimant ``who`` on ``groups`` now (see the module)."""
        return read_claims(self.reply(op, who, groups))

    def reply(self, op: Operation, who: str = "", groups: Iterable[str] = ()) -> Any:
        """:meth:`call`'s reply, unread (for :func:`read_claims`)."""
        return self.queue.scripts.group_claims(keys=[self._key], args=self._args(op, who, groups))

    def command(self, op: Operation, who: str = "", groups: Iterable[str] = ()) -> KeyedCommand:
        """:meth:`call`'s command, packed to go out in one write with a round's pops and
        acks (a processing client's ``run_keyed``); its reply is read by
        :func:`read_claims`."""
        client: Any = self.queue.client
        script = self.queue.scripts.group_claims
        packed = client.pack_script(script, (self._key,), self._args(op, who, groups))
        return (self._key, packed, script)
