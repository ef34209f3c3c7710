"""The assignment of shards to live processes: a pure function, no Redis.

Examples first, then properties over random fleets (weights, queue sets,
previous owners) checked against the guarantees of :func:`assign`.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lowkiq.ownership.assignment import Member, ShardKey, assign

QUEUES = {"Orders": range(24), "Shipments": range(8)}

#: A fleet, its queues' shards, and a previous assignment.
Case = tuple[list[Member], dict[str, Sequence[int]], dict[ShardKey, str]]
PROPERTIES = settings(max_examples=100, deadline=None, database=None)


def members(*specs: tuple[str, int]) -> list[Member]:
    return [Member(name, weight, frozenset(QUEUES)) for name, weight in specs]


def moved(before: Mapping[ShardKey, str], after: Mapping[ShardKey, str]) -> int:
    return sum(1 for key, owner in before.items() if after.get(key) != owner)


def loads(owners: Mapping[ShardKey, str]) -> Counter[str]:
    return Counter(owners.values())


# -- examples ---------------------------------------------------------------


def test_every_shard_has_exactly_one_owner_balanced_by_threads() -> None:
    owners = assign(members(("a", 5), ("b", 5), ("c", 10)), QUEUES)
    assert set(owners) == {(q, s) for q, shards in QUEUES.items() for s in shards}
    per_queue = Counter((queue, owner) for (queue, _), owner in owners.items())
    assert per_queue[("Orders", "c")] == 12
    assert per_queue[("Orders", "a")] == per_queue[("Orders", "b")] == 6
    assert per_queue[("Shipments", "c")] == 4
    assert loads(owners) == {"a": 8, "b": 8, "c": 16}


def test_from_scratch_each_queue_is_dealt_round_robin_in_the_order_of_ids() -> None:
    owners = assign(members(("c", 1), ("a", 1), ("b", 1)), {"Orders": range(7)})
    assert [owners[("Orders", s)] for s in range(7)] == ["a", "b", "c", "a", "b", "c", "a"]


def test_many_queues_each_a_few_shards_more_than_members_balance_in_total() -> None:
    queues = {f"Queue{q}": range(15) for q in range(10)}
    listed = [Member(f"p{i}", 1, frozenset(queues)) for i in range(10)]
    owners = assign(listed, queues)
    assert set(loads(owners).values()) == {15}
    per_queue = Counter((queue, owner) for (queue, _), owner in owners.items())
    assert set(per_queue.values()) == {1, 2}


def test_a_thousand_members_over_ten_queues_of_a_thousand_take_one_shard_of_each() -> None:
    queues = {f"Queue{q}": range(1000) for q in range(10)}
    listed = [Member(f"p{i:04d}", 1, frozenset(queues)) for i in range(1000)]
    owners = assign(listed, queues)
    per_queue = Counter((queue, owner) for (queue, _), owner in owners.items())
    assert len(per_queue) == 10_000 and set(per_queue.values()) == {1}


def test_every_process_computes_the_same_assignment_whatever_the_order() -> None:
    listed = members(("a", 5), ("b", 3), ("c", 5))
    before = assign(listed[:2], QUEUES)
    assert assign(listed, QUEUES, before) == assign(list(reversed(listed)), QUEUES, before)


def test_a_process_leaving_moves_only_its_own_shards() -> None:
    before = assign(members(("a", 5), ("b", 5), ("c", 5), ("d", 5)), QUEUES)
    after = assign(members(("a", 5), ("b", 5), ("c", 5)), QUEUES, before)
    orphaned = {key for key in before if before[key] == "d"}
    assert {key for key in before if before[key] != after[key]} == orphaned
    assert sorted(loads(after).values()) == [10, 11, 11]


def test_a_process_joining_takes_its_share_and_nothing_else_moves() -> None:
    before = assign(members(("a", 5), ("b", 5), ("c", 5)), QUEUES)
    after = assign(members(("a", 5), ("b", 5), ("c", 5), ("d", 5)), QUEUES, before)
    moves = {key for key in before if before[key] != after[key]}
    assert {key for key in moves if after[key] == "d"} == moves
    assert len(moves) == loads(after)["d"] == 8


def test_quiet_processes_and_processes_without_the_queue_take_nothing() -> None:
    listed = [
        Member("quiet", 0, frozenset(QUEUES)),
        Member("orders-only", 5, frozenset({"Orders"})),
        Member("all", 5, frozenset(QUEUES)),
    ]
    owners = assign(listed, QUEUES)
    assert "quiet" not in owners.values()
    assert {owners[("Shipments", s)] for s in range(8)} == {"all"}
    assert assign([Member("quiet", 0, frozenset(QUEUES))], QUEUES) == {}


def test_a_previous_owner_gone_quiet_or_without_the_queue_gives_its_shards_up() -> None:
    listed = members(("a", 1), ("b", 1))
    before = assign(listed, QUEUES)
    after = assign([Member("a", 0, frozenset(QUEUES)), listed[1]], QUEUES, before)
    assert set(after.values()) == {"b"}
    narrowed = assign([Member("a", 1, frozenset({"Orders"})), listed[1]], QUEUES, before)
    assert {narrowed[("Shipments", s)] for s in range(8)} == {"b"}


def test_a_duplicate_member_or_a_negative_weight_is_refused() -> None:
    with pytest.raises(ValueError, match="'a' is listed twice"):
        assign(members(("a", 1), ("a", 2)), QUEUES)
    with pytest.raises(ValueError, match="negative weight"):
        assign(members(("a", -1)), QUEUES)


@pytest.mark.parametrize("queues", [1, 10])
@pytest.mark.parametrize("join_first", [True, False])
def test_a_rolling_deploy_moves_about_each_shard_twice(queues: int, join_first: bool) -> None:
    names = [f"Queue{q}" for q in range(queues)]
    shards = {name: range(200 // queues) for name in names}
    fleet = [Member(f"old{i:02d}", 1, frozenset(names)) for i in range(20)]
    assert rolling_deploy_moves(fleet, shards, assign(fleet, shards), join_first) <= 2 * 200


def rolling_deploy_moves(
    fleet: list[Member],
    shards: Mapping[str, Sequence[int]],
    owners: dict[ShardKey, str],
    join_first: bool,
) -> int:
    """Shards moved when each member is replaced by a new one, one at a time (the new one
    joins first, or the old one leaves first)."""
    total = 0
    for old in list(fleet):
        new = Member(f"new-{old.id}", 1, old.queues)
        for step in ("join", "leave") if join_first else ("leave", "join"):
            fleet = [*fleet, new] if step == "join" else [m for m in fleet if m != old]
            after = assign(fleet, shards, owners)
            total += moved(owners, after)
            owners = after
    return total


# -- properties -------------------------------------------------------------

QUEUE_NAMES = ["A", "B", "C", "D"]


@st.composite
def fleets(draw: st.DrawFn, equal: bool = False) -> tuple[list[Member], dict[str, Sequence[int]]]:
    """Up to 8 members (weights 0..5, or 1 with ``equal``) serving subsets of up to 4
    queues of up to 40 shards, numbered from any start."""
    names = draw(st.lists(st.sampled_from(QUEUE_NAMES), min_size=1, max_size=4, unique=True))
    shards: dict[str, Sequence[int]] = {}
    for name in names:
        start = draw(st.integers(0, 5))
        shards[name] = range(start, start + draw(st.integers(0, 40)))
    ids = draw(st.lists(st.text("pqrs", min_size=1, max_size=3), max_size=8, unique=True))
    listed = [
        Member(
            id,
            1 if equal else draw(st.integers(0, 5)),
            frozenset(draw(st.lists(st.sampled_from([*QUEUE_NAMES, "E"]), max_size=5))),
        )
        for id in ids
    ]
    return listed, shards


@st.composite
def fleets_with_previous(
    draw: st.DrawFn,
) -> Case:
    """A fleet and an arbitrary previous owner map (stale keys and departed owners too)."""
    listed, shards = draw(fleets())
    keys = [(q, s) for q, numbers in shards.items() for s in numbers] + [("Z", 0), ("A", 99)]
    owners = st.sampled_from([m.id for m in listed] + ["gone"])
    previous = draw(st.dictionaries(st.sampled_from(keys), owners, max_size=60))
    return listed, shards, previous


def shares(
    listed: Sequence[Member], shards: Mapping[str, Sequence[int]]
) -> dict[tuple[str, str], Fraction]:
    """``(member, queue) -> n_q * w / W_q`` for each live member and queue it serves."""
    result = {}
    for queue, numbers in shards.items():
        serving = [m for m in listed if m.weight > 0 and queue in m.queues]
        total = sum(m.weight for m in serving)
        for m in serving:
            result[(m.id, queue)] = Fraction(len(numbers) * m.weight, total)
    return result


def assert_served_by_servers(
    listed: Sequence[Member], shards: Mapping[str, Sequence[int]], owners: Mapping[ShardKey, str]
) -> None:
    """Each shard of a served queue has one owner, a live member that serves the queue."""
    by_id = {m.id: m for m in listed}
    served = {q for q in shards if any(m.weight > 0 and q in m.queues for m in listed)}
    assert set(owners) == {(q, s) for q in served for s in shards[q]}
    for (queue, _), owner in owners.items():
        assert by_id[owner].weight > 0 and queue in by_id[owner].queues


def assert_shares(
    listed: Sequence[Member], shards: Mapping[str, Sequence[int]], owners: Mapping[ShardKey, str]
) -> None:
    """Each member owns its share, rounded, of each queue and in total."""
    per_queue = Counter((owner, queue) for (queue, _), owner in owners.items())
    fair = shares(listed, shards)
    for cell, share in fair.items():
        assert math.floor(share) <= per_queue[cell] <= math.ceil(share), cell
    totals = loads(owners)
    for m in listed:
        share = sum((s for (id, _), s in fair.items() if id == m.id), Fraction(0))
        assert math.floor(share) <= totals[m.id] <= math.ceil(share), m.id


@PROPERTIES
@given(fleets_with_previous())
def test_each_shard_of_a_served_queue_has_one_owner_that_serves_it(
    case: Case,
) -> None:
    listed, shards, previous = case
    assert_served_by_servers(listed, shards, assign(listed, shards, previous))


@PROPERTIES
@given(fleets_with_previous())
def test_each_member_owns_its_share_rounded_per_queue_and_in_total(
    case: Case,
) -> None:
    listed, shards, previous = case
    assert_shares(listed, shards, assign(listed, shards, previous))


@PROPERTIES
@given(fleets_with_previous(), st.randoms(use_true_random=False))
def test_the_result_depends_on_the_members_not_on_their_order(
    case: Case,
    random: object,
) -> None:
    listed, shards, previous = case
    shuffled = list(listed)
    random.shuffle(shuffled)  # type: ignore[attr-defined]
    assert assign(shuffled, shards, previous) == assign(listed, shards, previous)


@PROPERTIES
@given(fleets_with_previous())
def test_a_shard_stays_with_its_previous_owner_up_to_that_owners_count(
    case: Case,
) -> None:
    listed, shards, previous = case
    owners = assign(listed, shards, previous)
    count = Counter((owner, queue) for (queue, _), owner in owners.items())
    held = Counter(
        (owner, queue)
        for (queue, shard), owner in previous.items()
        if queue in shards and shard in shards[queue] and (owner, queue) in count
    )
    kept = Counter(
        (owner, queue)
        for (queue, shard), owner in owners.items()
        if previous.get((queue, shard)) == owner
    )
    for cell, had in held.items():
        assert kept[cell] == min(had, count[cell]), cell


def history(data: st.DataObject, equal: bool) -> Case:
    """A fleet and its assignment after a few members were replaced, one at a time;
    with ``equal``, every member has weight 1 and serves every queue."""
    listed, shards = data.draw(fleets(equal=equal))
    if equal:
        listed = [Member(m.id, 1, frozenset(shards)) for m in listed]
    owners = assign(listed, shards)
    for step in range(data.draw(st.integers(0, 3))):
        if not listed:
            break
        leaving = data.draw(st.sampled_from(listed))
        listed = [m for m in listed if m != leaving] + [
            Member(f"new{step}", leaving.weight, leaving.queues)
        ]
        owners = assign(listed, shards, owners)
    return listed, shards, owners


def bound(own: int, queues: int, equal: bool) -> int:
    """The most shards one join or leave moves, ``own`` of them the member's own."""
    return own + min(own, queues + 1) if equal else 2 * own + 2 * queues


@PROPERTIES
@given(st.data(), st.booleans())
def test_one_member_joining_moves_its_share_and_few_others(
    data: st.DataObject, equal: bool
) -> None:
    listed, shards, before = history(data, equal)
    weight = 1 if equal else data.draw(st.integers(1, 5))
    newcomer = Member("newcomer", weight, frozenset(shards))
    joined = [*listed, newcomer]
    after = assign(joined, shards, before)
    share = sum(shares(joined, shards)[("newcomer", q)] for q in shards)
    assert moved(before, after) <= bound(math.ceil(share), len(shards), equal)


@PROPERTIES
@given(st.data(), st.booleans())
def test_one_member_leaving_moves_its_shards_and_few_others(
    data: st.DataObject, equal: bool
) -> None:
    listed, shards, before = history(data, equal)
    if not listed:
        return
    leaving = data.draw(st.sampled_from(listed))
    after = assign([m for m in listed if m != leaving], shards, before)
    assert moved(before, after) <= bound(loads(before)[leaving.id], len(shards), equal)


@PROPERTIES
@given(st.data(), st.booleans())
def test_a_rolling_deploy_moves_each_shard_about_twice(
    data: st.DataObject, join_first: bool
) -> None:
    listed, shards, owners = history(data, equal=True)
    total = rolling_deploy_moves(listed, shards, owners, join_first)
    assert total <= 2 * len(owners) + 2 * len(listed)
