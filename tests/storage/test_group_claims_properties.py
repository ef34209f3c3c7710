"""Group claims under random claims, releases and renewals (``group_claims.lua``), on one
server and on the 3-master cluster, checked against a plain model: a claim is granted
exactly when every group of it (but the default one) has a free place or the claimant
holds one already, all or none; no group ever has more than ``cap`` holders; and the
groups said to be at their cap are exactly those the model has full."""

from __future__ import annotations

import redis
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from storage_support import run_machine

import lowkiq
from lowkiq.storage.group_claims import GroupClaims

CAP = 2
GROUPS = ("", "A", "B", "C")
CLAIMANTS = tuple(f"{shard} 1" for shard in range(5))


class Claimed(lowkiq.Worker):
    """The worker whose claims slot the machine uses."""

    shards_count = 5


class ClaimsMachine(RuleBasedStateMachine):
    """Random claims against a model of each group's holders."""

    client: redis.Redis

    @initialize()
    def start(self) -> None:
        self.client.flushall()
        lowkiq.settings.workers = [Claimed]
        self.claims = GroupClaims(Claimed.queue(self.client), CAP, ttl=600.0)
        self.holders: dict[str, set[str]] = {group: set() for group in GROUPS if group}
        self.full: frozenset[str] = frozenset()

    def _answer(self, reply: tuple[bool, frozenset[str], dict[str, float]]) -> bool:
        granted, self.full, dry = reply
        assert dry == {}  # no rate: no bucket
        return granted

    @rule(
        who=st.sampled_from(CLAIMANTS),
        groups=st.sets(st.sampled_from(GROUPS), min_size=1, max_size=3),
    )
    def claim(self, who: str, groups: set[str]) -> None:
        capped = [g for g in groups if g]
        free = all(who in self.holders[g] or len(self.holders[g]) < CAP for g in capped)
        granted = self._answer(self.claims.call("claim", who, dict.fromkeys(groups, 1)))
        assert granted == free, (who, groups, self.holders)
        if granted:
            for group in capped:
                self.holders[group].add(who)

    @rule(who=st.sampled_from(CLAIMANTS), groups=st.sets(st.sampled_from(GROUPS[1:]), min_size=1))
    def release(self, who: str, groups: set[str]) -> None:
        self._answer(self.claims.call("release", who, dict.fromkeys(groups, 0)))
        for group in groups:
            self.holders[group].discard(who)

    @rule(who=st.sampled_from(CLAIMANTS))
    def renew(self, who: str) -> None:
        mine = [g for g, holders in self.holders.items() if who in holders]
        if mine:
            assert self._answer(self.claims.call("renew", who, dict.fromkeys(mine, 0)))

    @invariant()
    def at_most_cap_holders_and_the_full_groups_said(self) -> None:
        if not hasattr(self, "claims"):
            return
        prefix = self.claims.queue.keys.group_claims_prefix
        for group, holders in self.holders.items():
            stored = {m.decode() for m in self.client.zrange(prefix + "held:" + group, 0, -1)}
            assert stored == holders and len(stored) <= CAP, group
        granted, full, _ = self.claims.call("full")
        assert full == {g for g, holders in self.holders.items() if len(holders) >= CAP}


def test_claims_follow_the_model(redis_client: redis.Redis) -> None:
    ClaimsMachine.client = redis_client
    run_machine(ClaimsMachine, max_examples=40, steps=30)
