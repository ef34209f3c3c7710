"""The assigner recomputes when the membership changed in a way that can move shards:
a process that stopped (weight 0, its shards already moved away) leaving changes
nothing, a serving process leaving does."""

from __future__ import annotations

import redis

from lowkiq.ownership.assigner import Assigner
from lowkiq.ownership.membership import Beat, Membership

QUEUES = {"Orders": range(4)}


def beat(membership: Membership, weight: int) -> Beat:
    return membership.beat(weight, QUEUES, None)


def publish_as(assigner: Assigner, weight: int) -> None:
    """Beat as the assigner (with ``weight``) and publish the assignment it asks for."""
    current = beat(assigner.membership, weight)
    assert current.assigner and assigner.due(current)
    assert assigner.run(current.generation) is not None
    assert not assigner.due(beat(assigner.membership, weight))


def test_a_stopped_process_leaving_needs_no_recompute(redis_client: redis.Redis) -> None:
    assigner = Assigner(Membership(redis_client, "host:1:first", 10.0))
    stopping = Membership(redis_client, "host:2:second", 10.0)
    publish_as(assigner, 1)
    beat(stopping, 1)
    publish_as(assigner, 1)
    assert stopping.assigned()  # it serves half the shards
    beat(stopping, 0)  # TERM: it takes no shards from now on
    publish_as(assigner, 1)
    assert stopping.assigned() == []
    assert stopping.leave()
    assert not assigner.due(beat(assigner.membership, 1))


def test_a_serving_process_leaving_is_recomputed(redis_client: redis.Redis) -> None:
    assigner = Assigner(Membership(redis_client, "host:1:first", 10.0))
    leaving = Membership(redis_client, "host:2:second", 10.0)
    publish_as(assigner, 1)
    beat(leaving, 1)
    publish_as(assigner, 1)
    assert leaving.assigned()
    assert leaving.leave()
    after = beat(assigner.membership, 1)
    assert assigner.due(after)
    assert assigner.run(after.generation) is not None
    assert len(assigner.membership.assigned()) == 4


def test_a_stopped_process_leaving_before_the_recompute_is_recomputed(
    redis_client: redis.Redis,
) -> None:
    assigner = Assigner(Membership(redis_client, "host:1:first", 10.0))
    stopping = Membership(redis_client, "host:2:second", 10.0)
    publish_as(assigner, 1)
    beat(stopping, 1)
    publish_as(assigner, 1)
    beat(stopping, 0)
    assert stopping.leave()  # before the assigner moved its shards
    after = beat(assigner.membership, 1)
    assert assigner.due(after)
    assert assigner.run(after.generation) is not None
    assert len(assigner.membership.assigned()) == 4
