"""The claims of ``Worker.group_concurrency`` (``group_claims.lua``): at most ``cap`` batches
per group hold a place, a batch's places are all granted or none, a claim expires
unless renewed, a release frees a place, and each answer names the groups at the cap;
on one server and on a Redis Cluster."""

from __future__ import annotations

import time

import pytest
import redis

import lowkiq
from lowkiq.limits.rate_limit import rate_limit_status
from lowkiq.storage.group_claims import GroupClaims, claimant
from tests.leasing import token


class Capped(lowkiq.Worker):
    """A worker whose claims the tests make by hand."""

    shards_count = 4


def answer(claims: GroupClaims, *args: object, **kwargs: object) -> tuple[bool, frozenset[str]]:
    """A claims call's answer: granted, and the groups at their cap or out of tokens."""
    granted, capped, dry = claims.call(*args, **kwargs)  # type: ignore[arg-type]
    return granted, capped | frozenset(dry)


@pytest.fixture
def claims(redis_client: redis.Redis) -> GroupClaims:
    lowkiq.settings.workers = [Capped]
    return GroupClaims(Capped.queue(), cap=2, ttl=30.0)


def test_at_most_cap_batches_hold_a_place_of_a_group(claims: GroupClaims) -> None:
    assert answer(claims, "claim", "0 1", {"A": 1}) == (True, frozenset())
    assert answer(claims, "claim", "1 1", {"A": 1, "B": 1}) == (True, frozenset({"A"}))
    granted, full = answer(claims, "claim", "2 1", {"B": 1, "A": 1})
    assert (granted, full) == (False, frozenset({"A"}))
    assert answer(claims, "full") == (True, frozenset({"A"}))  # B's refused place was not taken
    assert answer(claims, "claim", "2 1", {"B": 1}) == (True, frozenset({"A", "B"}))
    assert answer(claims, "claim", "0 1", {"A": 1})[0]  # a claimant holding a place keeps it
    assert answer(claims, "release", "0 1", {"A": 1}) == (True, frozenset({"B"}))
    assert answer(claims, "claim", "3 7", {"A": 1}) == (True, frozenset({"A", "B"}))


def test_a_claim_not_renewed_expires_and_a_renewal_keeps_it(
    redis_client: redis.Redis, claims: GroupClaims
) -> None:
    short = GroupClaims(claims.queue, cap=1, ttl=0.3)
    held_b = claims.queue.keys.group_claims_prefix + "held:B"
    assert answer(short, "claim", "0 1", {"A": 1}) == (True, frozenset({"A"}))
    assert answer(short, "claim", "1 1", {"B": 1})[0]
    expiry = redis_client.zscore(held_b, "1 1")
    time.sleep(0.05)
    assert answer(short, "renew", "1 1", {"B": 1})[0]
    assert redis_client.zscore(held_b, "1 1") > expiry  # renewed for its whole life again
    time.sleep(0.35)  # past A's life (its claim was not renewed)
    assert "A" not in answer(short, "full")[1]
    assert answer(short, "claim", "2 1", {"A": 1})[0]
    assert not answer(short, "renew", "0 1", {"A": 1})[0]  # lapsed, and its place taken
    time.sleep(0.35)
    assert answer(short, "full") == (True, frozenset())
    held = redis_client.keys(claims.queue.keys.group_claims_prefix + "held:*")
    assert held == []  # a group's claims leave no key behind


def test_a_claimant_names_the_lease_it_was_popped_under(claims: GroupClaims) -> None:
    first, next_owner = claimant(3, "170 host:1:a"), claimant(3, "171 host:2:b")
    assert first == "3 170" and next_owner == "3 171"
    one = GroupClaims(claims.queue, cap=1, ttl=30.0)
    assert answer(one, "claim", next_owner, {"A": 1})[0]
    answer(one, "release", first, {"A": 1})  # the old owner's release frees nothing of the new
    assert answer(one, "full") == (True, frozenset({"A"}))


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
        assert set(popped.groups) - {""} == groups
        taken[str(shard)] = [job.id for job in popped.jobs]
        queue.ack(shard, token(queue, shard), popped.batch)
    assert sorted(i for ids in taken.values() for i in ids) == ["b1", "c1", "n1"]
    for shard in {queue.shard_of("a1"), queue.shard_of("a2")}:  # A's place came free
        popped = queue.pop(shard, token(queue, shard), 10, now=NOW, capped=frozenset())
        assert {job.id for job in popped.jobs} <= {"a1", "a2"} and popped.groups == {
            "A": len(popped.jobs)
        }
        queue.ack(shard, token(queue, shard), popped.batch)
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
    assert [job.id for job in popped.jobs] == [mine[5]] and popped.groups == {"G5": 1}
    queue.ack(shard, token(queue, shard), popped.batch)
    none = queue.pop(shard, token(queue, shard), 1, now=NOW, capped=frozenset(groups))
    assert none.jobs == [] and not none.fenced
    assert Capped.metrics()["length"] == 5


def test_a_per_group_rate_gives_each_group_its_own_tokens(
    redis_client: redis.Redis, claims: GroupClaims
) -> None:
    rated = GroupClaims(claims.queue, cap=None, ttl=30.0, batch_size=1)
    ten = lowkiq.RateLimit(10, per=1.0, burst=3, per_group=True)  # 10 a second, 3 at once
    assert answer(rated, "claim", "0 1", {"A": 2}, ten) == (True, frozenset())
    assert answer(rated, "claim", "1 1", {"A": 1, "": 3}, ten) == (True, frozenset({"A", ""}))
    granted, dry = answer(rated, "claim", "2 1", {"A": 1, "B": 1}, ten)
    assert not granted and dry == {"A", ""}  # all or none: B's token was not spent
    assert answer(rated, "claim", "2 1", {"B": 3}, ten)[0]
    time.sleep(0.15)  # one token back for A, the default group and B
    assert answer(rated, "full", rate=ten) == (True, frozenset())
    assert answer(rated, "claim", "3 1", {"A": 1}, ten)[0]
    assert not answer(rated, "claim", "4 1", {"A": 3}, ten)[0]  # at most 2 of 3 left
    # What the dashboard and Prometheus show: tokens spent, claims refused, groups dry.
    status = rate_limit_status(redis_client, claims.queue.name, ten)
    assert (status.taken, status.waited, status.dry_groups) == (10, 2, 1)
    assert not redis_client.keys(claims.queue.keys.group_claims_prefix + "held:*")  # no cap
    time.sleep(0.35)  # every bucket full again: none is kept
    assert answer(rated, "full", rate=ten) == (True, frozenset())
    assert not redis_client.keys(claims.queue.keys.group_claims_prefix + "bucket:*")


def test_a_cap_and_a_rate_together_and_the_default_group_has_no_place(
    claims: GroupClaims,
) -> None:
    both = GroupClaims(claims.queue, cap=1, ttl=30.0)
    fast = lowkiq.RateLimit(1000, per_group=True)
    assert answer(both, "claim", "0 1", {"A": 1, "": 1}, fast) == (True, frozenset({"A"}))
    assert answer(both, "claim", "1 1", {"": 1}, fast)[0]  # the default group is never capped
    assert not answer(both, "claim", "2 1", {"A": 1}, fast)[0]
