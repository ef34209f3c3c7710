"""An assignment computed from an older membership snapshot never overwrites a newer
one: not when two runs of the assigner overlap, and not when a stopping process's
``close()`` meets its coordinator thread's round."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence

import redis

import lowkiq
from lowkiq.ownership import membership
from lowkiq.ownership.assigner import Assigner
from lowkiq.ownership.assignment import Member, ShardKey, assign
from lowkiq.ownership.membership import Membership
from lowkiq.storage.keys import OwnershipKeys
from tests.ownership.stand_in import coordinator_of

QUEUES = {"Orders": range(4)}
KEYS = OwnershipKeys()


def state(client: redis.Redis) -> tuple[int, int]:
    """The published assignment's generation and the membership version it is of."""
    generation, assigned = client.hmget(KEYS.state_hash, "generation", "assigned")
    return int(generation or 0), int(assigned or -1)


def overtaken_by(newer: Assigner) -> Assigner:
    """An assigner of the same process whose run, between its snapshot and its publish,
    lets ``run_between`` publish first (as a second thread of the process would)."""
    ran: list[bool] = []

    def compute(
        members: Sequence[Member],
        shards: Mapping[str, Sequence[int]],
        previous: Mapping[ShardKey, str],
    ) -> dict[ShardKey, str]:
        if not ran:
            ran.append(True)
            run_between()
            assert newer.run() is not None
        return assign(members, shards, previous)

    run_between = lambda: None  # noqa: E731 - replaced by the test
    older = Assigner(newer.membership, compute)
    older.run_between = run_between  # type: ignore[attr-defined]
    return older


def test_an_older_snapshot_published_last_is_refused(redis_client: redis.Redis) -> None:
    first = Membership(redis_client, "host:1:first", 10.0)
    second = Membership(redis_client, "host:2:second", 10.0)
    first.beat(1, QUEUES, None)
    second.beat(1, QUEUES, None)
    assert Assigner(first).run() is not None
    assert len(second.assigned()) == 2
    second.beat(0, QUEUES, None)  # TERM: the older run reads this snapshot ...
    newer = Assigner(first)
    versions: list[int] = []

    def compute(
        members: Sequence[Member],
        shards: Mapping[str, Sequence[int]],
        previous: Mapping[ShardKey, str],
    ) -> dict[ShardKey, str]:
        if not versions:
            # ... and before it publishes, the process is back with its thread, and a
            # newer run (another thread of the assigner) publishes that membership's.
            versions.append(second.beat(1, QUEUES, None).version)
            assert newer.run() is not None
        return assign(members, shards, previous)

    older = Assigner(first, compute)
    assert older.run() is None  # refused: it read an older snapshot
    generation, assigned = state(redis_client)
    assert assigned == versions[0]
    assert newer.last is not None and generation == newer.last.generation
    assert len(second.assigned()) == 2  # it serves again: its shards stay with it
    owners = newer.published()
    assert sorted(owners) == [("Orders", n) for n in range(4)]
    assert sum(owner == second.process_id for owner in owners.values()) == 2


def test_a_publication_against_a_replaced_generation_writes_nothing(
    redis_client: redis.Redis,
) -> None:
    first = Membership(redis_client, "host:1:first", 10.0)
    beat = first.beat(1, QUEUES, None)
    assert first.publish(beat.version, 0, [(first.process_id, '{"Orders":[0,1,2,3]}')], []) == 1
    before = redis_client.hgetall(KEYS.assignment_hash)
    # Computed against generation 0, which generation 1 replaced.
    assert first.publish(beat.version, 0, [(first.process_id, "")], []) == membership.STALE
    # Computed from a membership version older than the published one.
    assert first.publish(beat.version - 1, 1, [(first.process_id, "")], []) == membership.STALE
    assert redis_client.hgetall(KEYS.assignment_hash) == before
    assert state(redis_client) == (1, beat.version)


class Orders(lowkiq.Worker):
    shards_count = 4


def test_close_does_not_race_the_coordinator_threads_assigner(redis_client: redis.Redis) -> None:
    coordinator = coordinator_of(redis_client, "host:1:stopping", Orders, 10.0, 1.0)
    coordinator.beat()
    assert len(coordinator.holdings.owned()) == 4
    other = Membership(redis_client, "host:2:other", 10.0)
    other.beat(1, {"Orders": range(4)}, None)  # the assigner must recompute
    in_compute = threading.Event()
    closed = threading.Event()
    first_call: list[bool] = []

    def compute(
        members: Sequence[Member],
        shards: Mapping[str, Sequence[int]],
        previous: Mapping[ShardKey, str],
    ) -> dict[ShardKey, str]:
        if not first_call:  # the coordinator thread's run, from the snapshot before TERM
            first_call.append(True)
            in_compute.set()
            closed.wait(1.0)  # close() runs meanwhile, unless it waits for this round
        return assign(members, shards, previous)

    coordinator.assigner.compute = compute
    beating = threading.Thread(target=coordinator.beat)
    beating.start()
    assert in_compute.wait(5.0)
    coordinator.close()  # TERM, on the main thread
    closed.set()
    beating.join(10.0)
    assert not beating.is_alive()
    # The stopping process's shards all went to the other one at once; no older
    # assignment landed after that.
    assert coordinator.membership.assigned() == []
    assert sorted(other.assigned()) == [("Orders", n) for n in range(4)]
    _, assigned = state(redis_client)
    assert assigned == coordinator.membership.snapshot().version
    coordinator.leave()
