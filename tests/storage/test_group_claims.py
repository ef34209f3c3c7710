"""The claims of ``Worker.group_concurrency`` (``group_claims.lua``): at most ``cap`` batches
per group hold a place, a batch's places are all granted or none, a claim expires
unless renewed, a release frees a place, and each answer names the groups at the cap;
on one server and on a Redis Cluster."""

from __future__ import annotations

import time

import pytest
import redis

import lowkiq
from lowkiq.storage.group_claims import GroupClaims, claimant
from tests.leasing import token


class Capped(lowkiq.Worker):
    """A worker whose claims the tests make by hand."""

    shards_count = 4


@pytest.fixture
def claims(redis_client: redis.Redis) -> GroupClaims:
    lowkiq.settings.workers = [Capped]
    return GroupClaims(Capped.queue(), cap=2, ttl=30.0)


def test_at_most_cap_batches_hold_a_place_of_a_group(claims: GroupClaims) -> None:
    assert claims.call("claim", "0 1", ["A"]) == (True, frozenset())
    assert claims.call("claim", "1 1", ["A", "B"]) == (True, frozenset({"A"}))
    granted, full = claims.call("claim", "2 1", ["B", "A"])
    assert (granted, full) == (False, frozenset({"A"}))
    assert claims.call("full") == (True, frozenset({"A"}))  # B's refused place was not taken
    assert claims.call("claim", "2 1", ["B"]) == (True, frozenset({"A", "B"}))
    assert claims.call("claim", "0 1", ["A"])[0]  # a claimant holding a place keeps it
    assert claims.call("release", "0 1", ["A"]) == (True, frozenset({"B"}))
    assert claims.call("claim", "3 7", ["A"]) == (True, frozenset({"A", "B"}))


def test_a_claim_not_renewed_expires_and_a_renewal_keeps_it(
    redis_client: redis.Redis, claims: GroupClaims
) -> None:
    short = GroupClaims(claims.queue, cap=1, ttl=0.3)
    assert short.call("claim", "0 1", ["A"]) == (True, frozenset({"A"}))
    assert short.call("claim", "1 1", ["B"])[0]
    time.sleep(0.2)
    assert short.call("renew", "1 1", ["B"]) == (True, frozenset({"A", "B"}))
    time.sleep(0.2)
    assert short.call("full") == (True, frozenset({"B"}))  # A's claim lapsed
    assert short.call("claim", "2 1", ["A"])[0]
    assert not short.call("renew", "0 1", ["A"])[0]  # lapsed, and its place taken
    time.sleep(0.4)
    assert short.call("full") == (True, frozenset())
    held = redis_client.keys(claims.queue.keys.group_claims_prefix + "held:*")
    assert held == []  # a group's claims leave no key behind


def test_a_claimant_names_the_lease_it_was_popped_under(claims: GroupClaims) -> None:
    first, next_owner = claimant(3, "170 host:1:a"), claimant(3, "171 host:2:b")
    assert first == "3 170" and next_owner == "3 171"
    one = GroupClaims(claims.queue, cap=1, ttl=30.0)
    assert one.call("claim", next_owner, ["A"])[0]
    one.call("release", first, ["A"])  # the old owner's release frees nothing of the new
    assert one.call("full") == (True, frozenset({"A"}))


NOW = 1_700_000_000.0


def test_a_pop_skips_the_groups_at_their_cap_and_names_the_groups_it_took(
    claims: GroupClaims,
) -> None:
    queue = claims.queue
    jobs = [("a1", "A"), ("b1", "B"), ("c1", "C"), ("a2", "A"), ("n1", None)]
    Capped.perform_async(
        [{"id": i, "payload": 1, "group": g, "perform_in": NOW} for i, g in jobs if g]
        + [{"id": i, "payload": 1, "perform_in": NOW} for i, g in jobs if not g]
    )
    by_shard: dict[int, list[str]] = {}
    for job_id, _ in jobs:
        by_shard.setdefault(queue.shard_of(job_id), []).append(job_id)
    taken: dict[str, list[str]] = {}
    for shard in by_shard:
        popped = queue.pop(shard, token(queue, shard), 10, now=NOW, capped=frozenset({"A"}))
        assert all(job.id not in ("a1", "a2") for job in popped.jobs)
        groups = {dict(jobs)[job.id] for job in popped.jobs} - {None}
        assert popped.groups == groups
        taken[str(shard)] = [job.id for job in popped.jobs]
        queue.ack(shard, token(queue, shard))
    assert sorted(i for ids in taken.values() for i in ids) == ["b1", "c1", "n1"]
    for shard in {queue.shard_of("a1"), queue.shard_of("a2")}:  # A's place came free
        popped = queue.pop(shard, token(queue, shard), 10, now=NOW, capped=frozenset())
        assert {job.id for job in popped.jobs} <= {"a1", "a2"} and popped.groups == {"A"}
        queue.ack(shard, token(queue, shard))
    assert Capped.metrics()["length"] == 0


def test_a_one_job_pop_passes_over_every_capped_group_to_a_due_one(claims: GroupClaims) -> None:
    queue = claims.queue
    ids = [f"x{n}" for n in range(40)]
    shard = queue.shard_of(ids[0])
    mine = [i for i in ids if queue.shard_of(i) == shard][:6]
    groups = ["G0", "G1", "G2", "G3", "G4", "G5"]
    Capped.perform_async(
        [
            {"id": i, "payload": 1, "group": g, "perform_in": NOW}
            for i, g in zip(mine, groups, strict=True)
        ]
    )
    popped = queue.pop(shard, token(queue, shard), 1, now=NOW, capped=frozenset(groups[:5]))
    assert [job.id for job in popped.jobs] == [mine[5]] and popped.groups == {"G5"}
    queue.ack(shard, token(queue, shard))
    none = queue.pop(shard, token(queue, shard), 1, now=NOW, capped=frozenset(groups))
    assert none.jobs == [] and not none.fenced
    assert Capped.metrics()["length"] == 5
