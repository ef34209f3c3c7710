"""The assigner recomputes when the membership changed in a way that can move shards:
a process that stopped (weight 0, its shards already moved away) leaving changes
nothing, a serving process leaving does."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
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
    assert assigner.run() is not None
    assert not assigner.due(beat(assigner.membership, weight))


@pytest.fixture
def two_serving(redis_client: redis.Redis) -> Iterator[tuple[Assigner, Membership]]:
    """The assigner and a second process, both serving, the assignment published."""
    assigner = Assigner(Membership(redis_client, "host:1:first", 10.0))
    other = Membership(redis_client, "host:2:second", 10.0)
    publish_as(assigner, 1)
    beat(other, 1)
    publish_as(assigner, 1)
    assert other.assigned()  # it serves half the shards
    yield assigner, other


def recompute_takes_all_shards(assigner: Assigner) -> None:
    """The membership moved: the assigner recomputes, and now serves every shard."""
    after = beat(assigner.membership, 1)
    assert assigner.due(after)
    assert assigner.run() is not None
    assert len(assigner.membership.assigned()) == len(QUEUES["Orders"])


def test_a_stopped_process_leaving_needs_no_recompute(
    two_serving: tuple[Assigner, Membership],
) -> None:
    assigner, stopping = two_serving
    beat(stopping, 0)  # TERM: it takes no shards from now on
    publish_as(assigner, 1)
    assert stopping.assigned() == []
    assert stopping.leave()
    assert not assigner.due(beat(assigner.membership, 1))


def test_a_serving_process_leaving_is_recomputed(two_serving: tuple[Assigner, Membership]) -> None:
    assigner, leaving = two_serving
    assert leaving.leave()
    recompute_takes_all_shards(assigner)


def test_a_stopped_process_leaving_before_the_recompute_is_recomputed(
    two_serving: tuple[Assigner, Membership],
) -> None:
    assigner, stopping = two_serving
    beat(stopping, 0)
    assert stopping.leave()  # before the assigner moved its shards
    recompute_takes_all_shards(assigner)


def test_a_new_assigner_goes_on_from_the_published_assignment(
    two_serving: tuple[Assigner, Membership],
) -> None:
    first, second = two_serving
    kept = set(second.assigned())
    assert first.membership.leave()
    successor = Assigner(second)  # a process that never computed an assignment
    current = beat(second, 1)
    assert current.assigner and successor.due(current)
    assert successor.published() == {key: second.process_id for key in kept} | {
        key: first.membership.process_id for key in set(first.membership.assigned())
    }
    assert successor.run() is not None
    moved = len(QUEUES["Orders"]) - len(kept)  # the shards of the process that left
    assert successor.last is not None and successor.last.shards_moved == moved
    assert set(second.assigned()) == {("Orders", shard) for shard in QUEUES["Orders"]}
