"""Orphans (shards of a process that died) go to the youngest processes: no Redis.

A rolling restart stops the oldest processes first; an orphan placed on the next
one to go would wait out a second lease.  Examples first, then properties over
random fleets with random join times.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from hypothesis import given
from hypothesis import strategies as st

from lowkiq.ownership.assignment import Member, ShardKey, assign
from lowkiq.ownership.orphans import shelter
from tests.ownership.test_assignment import (
    PROPERTIES,
    Case,
    assert_served_by_servers,
    assert_shares,
    fleets_with_previous,
    loads,
    moved,
)

ORDERS = {"Orders": range(60)}


def aged(count: int, queues: Mapping[str, Sequence[int]] = ORDERS) -> list[Member]:
    """``count`` members serving ``queues``: ``m1`` joined first, the last one last."""
    return [Member(f"m{n}", 1, frozenset(queues), joined=1000 * n) for n in range(1, count + 1)]


def orphans_of(before: Mapping[ShardKey, str], gone: str) -> set[ShardKey]:
    return {key for key, owner in before.items() if owner == gone}


# -- examples ---------------------------------------------------------------


def test_a_dead_processs_shard_goes_to_the_youngest_not_the_oldest() -> None:
    fleet = aged(6)
    shards = {"Orders": range(5)}
    before = assign(fleet, shards)
    assert "m1" not in before.values()  # dealt youngest first: the oldest has none
    (orphan,) = orphans_of(before, "m6")
    after = assign(fleet[:-1], shards, before)
    # m1 is the one member with room; the youngest of the others takes the orphan instead
    # and gives m1 its own shard.
    assert after[orphan] == "m5"
    assert loads(after) == {"m1": 1, "m2": 1, "m3": 1, "m4": 1, "m5": 1}
    assert moved(before, after) == 2


def test_a_dead_processs_shards_all_go_to_the_youngest_which_stays_balanced() -> None:
    fleet = aged(6)
    before = assign(fleet, ORDERS)
    orphans = orphans_of(before, "m3")
    after = assign([m for m in fleet if m.id != "m3"], ORDERS, before)
    assert {after[key] for key in orphans} == {"m6"}
    assert set(loads(after).values()) == {12}
    # Each orphan costs at most one kept shard moving to an older process.
    assert moved(before, after) <= 2 * len(orphans)


def test_a_stopping_processs_shards_are_handed_over_without_exchanges() -> None:
    fleet = aged(6)
    before = assign(fleet, ORDERS)
    quiet = Member("m3", 0, frozenset(ORDERS), joined=3000)
    after = assign([quiet if m.id == "m3" else m for m in fleet], ORDERS, before)
    assert moved(before, after) == len(orphans_of(before, "m3"))


def test_processes_that_joined_at_the_same_time_exchange_nothing() -> None:
    same = [Member(f"m{n}", 1, frozenset(ORDERS), joined=7) for n in range(1, 7)]
    unknown = [Member(m.id, 1, m.queues) for m in same]
    before = assign(same, ORDERS)
    assert before == assign(unknown, ORDERS)
    assert assign(same[1:], ORDERS, before) == assign(unknown[1:], ORDERS, before)


def test_a_shard_waiting_out_a_dead_processs_lease_moves_to_the_youngest() -> None:
    fleet = aged(3)
    shards = {"Orders": range(6)}
    before = assign(fleet, shards)
    waiting = min(orphans_of(before, "m1"))
    after = assign(fleet, shards, before, waiting=[waiting])
    assert after[waiting] == "m3"
    assert loads(after) == {"m1": 2, "m2": 2, "m3": 2}
    assert moved(before, after) == 2


def test_an_orphan_is_exchanged_for_a_shard_of_another_queue_where_counts_allow() -> None:
    old, young = 0, 1
    owner_of = {("A", 0): old, ("B", 0): young}
    bounds = {(i, queue): (0, 1) for i in (old, young) for queue in "AB"}
    assert shelter(owner_of, [("A", 0)], {("B", 0)}, [1, 2], lambda i, q: bounds[(i, q)]) == 1
    assert owner_of == {("A", 0): young, ("B", 0): old}


def test_an_orphan_stays_where_no_exchange_keeps_the_counts() -> None:
    old, young = 0, 1
    owner_of = {("A", 0): old, ("A", 1): young, ("B", 0): young}
    bounds = {(i, queue): (0, 1) for i in (old, young) for queue in "AB"}
    kept = {("A", 1), ("B", 0)}
    orphans = [("A", 0)]
    assert shelter(owner_of, orphans, kept, [1, 2], lambda i, q: bounds[(i, q)]) == 1
    assert owner_of[("A", 0)] == young  # exchanged for the young one's shard of A
    # The young one does not serve A: it cannot take the orphan.
    stuck = {("A", 0): old, ("B", 0): young}
    serving = {key: value for key, value in bounds.items() if key != (young, "A")}
    assert shelter(stuck, orphans, {("B", 0)}, [1, 2], lambda i, q: serving.get((i, q))) == 0
    assert stuck == {("A", 0): old, ("B", 0): young}


# -- properties -------------------------------------------------------------


@st.composite
def aged_fleets(draw: st.DrawFn) -> Case:
    """A fleet (with join times, some equal) and an arbitrary previous owner map."""
    listed, shards, previous = draw(fleets_with_previous())
    members = [Member(m.id, m.weight, m.queues, draw(st.integers(0, 4))) for m in listed]
    return members, shards, previous


@PROPERTIES
@given(aged_fleets())
def test_with_join_times_each_member_still_owns_its_share_of_served_queues(case: Case) -> None:
    listed, shards, previous = case
    owners = assign(listed, shards, previous)
    assert_served_by_servers(listed, shards, owners)
    assert_shares(listed, shards, owners)


@PROPERTIES
@given(aged_fleets(), st.randoms(use_true_random=False))
def test_with_join_times_the_result_does_not_depend_on_the_members_order(
    case: Case, random: object
) -> None:
    listed, shards, previous = case
    shuffled = list(listed)
    random.shuffle(shuffled)  # type: ignore[attr-defined]
    assert assign(shuffled, shards, previous) == assign(listed, shards, previous)


@PROPERTIES
@given(aged_fleets())
def test_each_orphan_moves_at_most_one_more_shard(case: Case) -> None:
    listed, shards, previous = case
    present = {m.id for m in listed}
    after = assign(listed, shards, previous)
    unaged = assign([Member(m.id, m.weight, m.queues) for m in listed], shards, previous)
    orphans = [key for key in after if previous.get(key, "") not in present | {""}]
    assert moved(previous, after) <= moved(previous, unaged) + len(orphans)


@PROPERTIES
@given(st.lists(st.integers(0, 9), min_size=1, max_size=8), st.integers(1, 40), st.data())
def test_in_one_queue_no_orphan_sits_on_an_older_member_than_a_shard_that_is_not_one(
    ages: list[int], count: int, data: st.DataObject
) -> None:
    shards = {"Q": range(count)}
    fleet = [Member(f"p{n}", 1, frozenset(shards), age) for n, age in enumerate(ages)]
    owners = st.sampled_from([*(m.id for m in fleet), "gone1", "gone2"])
    previous = {("Q", s): data.draw(owners) for s in range(count)}
    after = assign(fleet, shards, previous)
    joined = {m.id: m.joined for m in fleet}
    lost = [joined[after[key]] for key in after if previous.get(key, "").startswith("gone")]
    held = [joined[after[key]] for key in after if not previous.get(key, "").startswith("gone")]
    if lost and held:
        assert min(lost) >= max(held)
