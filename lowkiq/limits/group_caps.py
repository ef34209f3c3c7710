"""``Worker.group_concurrency`` and per-group rate limits in one process: what its
dispatcher knows of a worker's groups, and the places its running batches hold.

The dispatcher (:mod:`lowkiq.runtime.dispatcher`) pops the worker's shards skipping the
groups at their cap or out of tokens (as Redis last said), claims each batch's places
and tokens before it runs (a refused batch goes back to its queue unrun), renews them
every quarter of the lease TTL, and releases them once the batch is settled
(:mod:`lowkiq.storage.group_claims`).  While a group is at its cap the process asks
again which groups are, :data:`FULL_REFRESH` seconds after an answer that changed
them, twice as long after each that did not, up to :data:`FULL_REFRESH_MAX`: a place
freed elsewhere is seen within that time, and a fleet whose group stays at its cap
asks about once a second per process, not ten times.

A group may also be paused, or given a cap and a rate of its own, at run time
(:mod:`lowkiq.storage.group_actions`), read whenever the config version moves
(:meth:`GroupCaps.follow`): pops skip the paused groups, and the claims script reads
the groups' own caps and rates itself.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Hashable, Mapping
from typing import Any

from lowkiq.limits.rate_limit import RateLimit
from lowkiq.limits.throttling import RateLimits
from lowkiq.storage import group_limits
from lowkiq.storage.group_claims import ClaimCall, GroupClaims, claimant, read_claims
from lowkiq.storage.group_limits import GroupLimits

log = logging.getLogger("lowkiq.groups")

#: Seconds between two questions "which groups are at their cap, or out of tokens?"
#: while some are, at first and after an answer that changed them.
FULL_REFRESH = 0.1
#: The most seconds between two such questions (each answer that changed nothing
#: doubles the time to the next).
FULL_REFRESH_MAX = 1.6
#: Seconds before a shard that gave no job while some group is paused is popped again
#: (its due jobs may all be of paused groups); a resumed group's jobs start within it.
PAUSED_RETRY = 0.5
NO_LIMITS = GroupLimits()


class GroupCaps:
    """One worker's group caps and per-group rate in this process (see the module)."""

    def __init__(
        self,
        claims: GroupClaims,
        rate_limits: RateLimits | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.claims = claims
        self.rate_limits = rate_limits
        self.clock = clock
        #: The groups at their cap, as the last answer said.
        self.full: frozenset[str] = frozenset()
        #: The groups out of tokens, and until when (``clock``), as the last answer said.
        self.dry: dict[str, float] = {}
        self._answered_at = 0.0
        #: Seconds from an answer to the next question while some group is full.
        self.refresh = FULL_REFRESH
        #: The places held by each running batch: shard key -> (claimant, groups).
        self.held: dict[Hashable, tuple[str, frozenset[str]]] = {}
        self._renewed_at = clock()
        #: Places to release (of settled batches), sent with the next write.
        self.releases: list[tuple[str, frozenset[str]]] = []
        #: The groups set at run time, with their settings, as last read.
        self.own: dict[str, GroupLimits] = {}
        #: The paused groups among them.
        self.paused: frozenset[str] = frozenset()
        if rate_limits is not None:
            rate_limits.followers.append(self.follow)

    def follow(self, client: Any) -> None:
        """Read the groups set at run time (on each change of the config); log what changed."""
        found = group_limits.read_limits(client, self.claims.queue.keys)
        if found == self.own:
            return
        name = self.claims.queue.name
        for group in sorted(found.keys() | self.own.keys()):
            before, after = self._own(group), found.get(group, NO_LIMITS)
            if before != after:
                log.info("%s: group %r is now %s", name, group, _describe(after))
        self.own = found
        self.paused = frozenset(group for group, limits in found.items() if limits.paused)
        self.claims.own_limits = any(limits.limited for limits in found.values())

    def rate(self) -> RateLimit | None:
        """The worker's per-group rate limit in force now (``None``: none)."""
        if self.rate_limits is None:
            return None
        limit = self.rate_limits.get(self.claims.queue.name)
        return limit if limit is not None and limit.per_group else None

    def active(self) -> bool:
        """Whether the worker's groups are capped, rate-limited or paused now."""
        return self.claims.cap is not None or self.rate() is not None or bool(self.own)

    def skipped(self) -> frozenset[str] | None:
        """The groups a pop skips now: paused, at their cap or out of tokens (``None``:
        its groups are neither capped, rate-limited nor paused)."""
        if not self.active():
            return None
        skipped = self.full | self.paused if self.paused else self.full
        if not self.dry:
            return skipped
        now = self.clock()
        return skipped | {group for group, until in self.dry.items() if until > now}

    def answer(self, reply: Any) -> bool:
        """Read a claims call's reply: whether it was granted; it says the groups at
        their cap and those out of tokens, with when they have one again."""
        granted, full, waits = read_claims(reply)
        if full != self.full:
            self.refresh = FULL_REFRESH  # places move: look again soon
        self.full = full
        now = self._answered_at = self.clock()
        self.dry = {group: now + wait for group, wait in waits.items()}
        return granted

    def claim_call(self, shard: int, token: str, jobs: Mapping[str, int]) -> ClaimCall | None:
        """The claim of a batch popped from ``shard`` under ``token`` with ``jobs`` of
        each group, or ``None`` when it needs none (only jobs of the default group, and
        no per-group rate)."""
        rate = self.rate()
        capped = self.claims.cap is not None
        wanted = (
            dict(jobs)
            if rate is not None
            else {g: n for g, n in jobs.items() if g and (capped or self._own(g).limited)}
        )
        return ClaimCall("claim", claimant(shard, token), wanted, rate) if wanted else None

    def granted(self, key: Hashable, call: ClaimCall) -> None:
        """The claim ``call`` of shard ``key``'s batch was granted: its places are held
        (the default group has none; a group holds places under a cap of the worker or
        its own)."""
        capped = self.claims.cap is not None
        groups = frozenset(
            g for g in call.jobs if g and (capped or self._own(g).concurrency is not None)
        )
        if groups:
            self.held[key] = (call.who, groups)

    def _own(self, group: str) -> GroupLimits:
        """``group``'s run-time settings (the defaults when it has none)."""
        return self.own.get(group, NO_LIMITS)

    def release(self, key: Hashable) -> None:
        """The batch of shard ``key`` is settled (or given back): its places go."""
        held = self.held.pop(key, None)
        if held is not None:
            self.releases.append(held)

    def upkeep(self) -> list[ClaimCall]:
        """The calls due now: releases, renewals (every quarter of the places' life), and
        the question which groups are full while some are (every FULL_REFRESH).  The
        releases are taken: give them back (:meth:`unsent`) when the calls fail."""
        calls: list[ClaimCall] = [
            ClaimCall("release", who, dict.fromkeys(groups, 0), None)
            for who, groups in self.releases
        ]
        self.releases = []
        now = self.clock()
        if self.held and now - self._renewed_at > self.claims.ttl_ms / 4000:
            self._renewed_at = now
            calls += [
                ClaimCall("renew", who, dict.fromkeys(groups, 0), None)
                for who, groups in self.held.values()
            ]
        if not calls and self.full and now - self._answered_at > self.refresh:
            calls.append(ClaimCall("full", "", {}, self.rate()))
            self.refresh = min(self.refresh * 2, FULL_REFRESH_MAX)  # unless the answer changes
        return calls

    def retry_in(self) -> float:
        """Seconds before a shard that gave no job is popped again: until the first group
        out of tokens has one, or the next question which groups are full is due."""
        now = self.clock()
        soonest = min((until - now for until in self.dry.values() if until > now), default=None)
        asked = PAUSED_RETRY if self.paused else FULL_REFRESH
        if self.full:  # the next question, due now at the earliest (the next turn asks it)
            asked = max(self._answered_at + self.refresh - now, FULL_REFRESH / 10)
        return asked if soonest is None else min(asked, soonest)

    def unsent(self, calls: list[ClaimCall]) -> None:
        """``calls`` of :meth:`upkeep` failed: their releases go with the next ones (a
        place not released lapses at the latest with its claim)."""
        self.releases += [(c.who, frozenset(c.jobs)) for c in calls if c.op == "release"]

    def waits_for_places(self) -> bool:
        """Whether some group is at its cap or out of tokens (the process then looks
        again soon)."""
        return bool(self.full or self.dry or self.paused) and self.active()


def _describe(limits: GroupLimits) -> str:
    """A group's run-time settings for the log."""
    parts = ["paused"] if limits.paused else ["running"]
    if limits.concurrency is not None:
        parts.append(f"at most {limits.concurrency} batches at once")
    if limits.rate is not None:
        parts.append(f"rate {limits.rate!r}")
    return ", ".join(parts)
