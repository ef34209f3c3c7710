"""``Worker.group_concurrency`` in one process: what its dispatcher knows of a capped
worker's groups, and the places its running batches hold.

The dispatcher (:mod:`lowkiq.runtime.dispatcher`) pops a capped worker's shards skipping
the groups at their cap (:attr:`GroupCaps.full`, as Redis last said), claims the places
of the groups of each batch it popped before the batch runs (one write for the round;
a refused batch goes back to its queue unrun), renews the places of its running batches
every quarter of the lease TTL, and releases a batch's places once it is settled
(:mod:`lowkiq.storage.group_claims`).  While a group is at its cap the process asks
again which groups are every :data:`FULL_REFRESH` seconds, and a shard that gave no
job waits that long before its next pop: a place freed by another process is seen
within about that time.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable
from typing import Any

from lowkiq.clients.connection import KeyedCommand
from lowkiq.storage.group_claims import GroupClaims, Operation, claimant, read_claims

#: One claims call: the operation, the claimant, the groups.
Call = tuple[Operation, str, tuple[str, ...]]

#: Seconds between two questions "which groups are at their cap?" while some are.
FULL_REFRESH = 0.1


class GroupCaps:
    """One capped worker's groups in this process (see the module)."""

    def __init__(self, claims: GroupClaims, clock: Callable[[], float] = time.monotonic) -> None:
        self.claims = claims
        self.clock = clock
        #: The groups at their cap, as the last answer said.
        self.full: frozenset[str] = frozenset()
        self._answered_at = 0.0
        #: The places held by each running batch: shard key -> (claimant, groups).
        self.held: dict[Hashable, tuple[str, frozenset[str]]] = {}
        self._renewed_at = clock()
        #: Places to release (of settled batches), sent with the next write.
        self.releases: list[tuple[str, frozenset[str]]] = []

    def answer(self, reply: Any) -> bool:
        """Read a claims call's reply: whether it was granted; it says the groups full."""
        granted, self.full = read_claims(reply)
        self._answered_at = self.clock()
        return granted

    def claim_call(self, shard: int, token: str, groups: frozenset[str]) -> Call:
        """The claim of a batch popped from ``shard`` under ``token`` on ``groups``."""
        return ("claim", claimant(shard, token), tuple(sorted(groups)))

    def command(self, call: Call) -> KeyedCommand:
        """``call`` packed, to go out in one write with others."""
        return self.claims.command(*call)

    def run(self, call: Call) -> Any:
        """``call`` in a round trip of its own; its reply (for :meth:`answer`)."""
        op, who, groups = call
        return self.claims.reply(op, who, groups)

    def granted(self, key: Hashable, shard: int, token: str, groups: frozenset[str]) -> None:
        """The batch of shard ``key`` holds places of ``groups`` now."""
        self.held[key] = (claimant(shard, token), groups)

    def release(self, key: Hashable) -> None:
        """The batch of shard ``key`` is settled (or given back): its places go."""
        held = self.held.pop(key, None)
        if held is not None:
            self.releases.append(held)

    def upkeep(self) -> list[Call]:
        """The calls due now: releases, renewals (every quarter of the claims' life), and
        the question which groups are full while some are (every FULL_REFRESH).  The
        releases are taken: give them back (:meth:`unsent`) when the calls fail."""
        calls: list[Call] = [
            ("release", who, tuple(sorted(groups))) for who, groups in self.releases
        ]
        self.releases = []
        now = self.clock()
        if self.held and now - self._renewed_at > self.claims.ttl_ms / 4000:
            self._renewed_at = now
            calls += [("renew", who, tuple(sorted(groups))) for who, groups in self.held.values()]
        if not calls and self.full and now - self._answered_at > FULL_REFRESH:
            calls.append(("full", "", ()))
        return calls

    def unsent(self, calls: list[Call]) -> None:
        """``calls`` of :meth:`upkeep` failed: their releases go with the next ones (a
        place not released lapses with its claim at the latest)."""
        self.releases += [(who, frozenset(groups)) for op, who, groups in calls if op == "release"]

    def waits_for_places(self) -> bool:
        """Whether some group is at its cap (the process then looks again soon)."""
        return bool(self.full)
