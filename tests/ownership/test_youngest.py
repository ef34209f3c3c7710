"""Against a real Redis: the membership records when each process joined, the assigner
role goes to the youngest process when it is free, and the assigner places the shards
of a process that died, and those still waiting out its lease, on the youngest."""

from __future__ import annotations

import time

import redis

from lowkiq.ownership.assigner import Assigner, RecentMoves
from lowkiq.ownership.membership import Membership
from lowkiq.storage.keys import OwnershipKeys

QUEUES = {"Orders": range(6)}
KEYS = OwnershipKeys()


def join(client: redis.Redis, name: str, weight: int = 1) -> Membership:
    """A process that joins now (a few ms after the one before: join times are in ms)."""
    time.sleep(0.005)
    membership = Membership(client, f"host:{name}:x", 10.0)
    membership.beat(weight, QUEUES, None)
    return membership


def assigner_id(client: redis.Redis) -> str:
    return client.hget(KEYS.state_hash, "assigner").decode()


def test_the_snapshot_tells_when_each_process_joined(redis_client: redis.Redis) -> None:
    first, second = join(redis_client, "1"), join(redis_client, "2")
    first.beat(1, QUEUES, None)  # a later beat keeps the time it joined
    joined = {m.id: m.joined for m in first.snapshot().members}
    assert 0 < joined[first.process_id] <= joined[second.process_id]


def test_a_free_assigner_role_goes_to_the_youngest_serving_process(
    redis_client: redis.Redis,
) -> None:
    oldest = join(redis_client, "1")
    middle = join(redis_client, "2")
    youngest = join(redis_client, "3")
    stopping = join(redis_client, "4", weight=0)  # joined last, but takes no shards
    assert assigner_id(redis_client) == oldest.process_id  # the role was free at its join
    assert oldest.leave()
    beat = middle.beat(1, QUEUES, None)  # the role is free: this beat gives it away
    assert not beat.assigner
    assert assigner_id(redis_client) == youngest.process_id
    assert youngest.wait_for_nudge(1.0)  # woken to compute at once
    assert youngest.beat(1, QUEUES, None).assigner
    assert not stopping.beat(0, QUEUES, None).assigner


def test_a_dead_processs_shards_and_those_waiting_on_its_lease_go_to_the_youngest(
    redis_client: redis.Redis,
) -> None:
    assigner = Assigner(join(redis_client, "1"))
    dying = join(redis_client, "2")
    assert assigner.run() is not None
    before = assigner.published()
    youngest = join(redis_client, "3")
    assert assigner.run() is not None  # the youngest takes its share, some from `dying`
    taken = {key for key in youngest.assigned() if before[key] == dying.process_id}
    orphans = set(dying.assigned())
    assert taken and orphans
    assert dying.leave()  # as if its beat had lapsed: gone, its leases maybe not
    alive = {assigner.membership.process_id, youngest.process_id}
    assert assigner.recent.waiting(alive) == taken  # it may still hold their leases
    assert assigner.run() is not None
    assert orphans | taken <= set(youngest.assigned())
    assert len(youngest.assigned()) == len(assigner.membership.assigned()) == 3


def test_recent_moves_are_forgotten_after_the_horizon() -> None:
    now = [0.0]
    recent = RecentMoves(10.0, clock=lambda: now[0])
    recent.record({("Orders", 0): "dead", ("Orders", 1): "alive"}, {("Orders", 0): "young"})
    assert recent.waiting({"young", "alive"}) == {("Orders", 0)}
    assert recent.waiting({"young", "alive", "dead"}) == set()
    now[0] = 10.5
    assert recent.waiting({"young"}) == set()
