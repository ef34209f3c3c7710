"""The assignment of shards to live processes: a pure function, no Redis."""

from __future__ import annotations

from collections import Counter

from lowkiq.ownership.assignment import Member, assign, deal_sticky

QUEUES = {"Orders": range(24), "Shipments": range(8)}


def members(*specs: tuple[str, int]) -> list[Member]:
    return [Member(name, weight, frozenset(QUEUES)) for name, weight in specs]


def test_every_shard_has_exactly_one_owner_balanced_by_threads() -> None:
    owners = assign(members(("a", 5), ("b", 5), ("c", 10)), QUEUES)
    assert set(owners) == {(q, s) for q, shards in QUEUES.items() for s in shards}
    per_queue = Counter((queue, owner) for (queue, _), owner in owners.items())
    assert per_queue[("Orders", "c")] == 12
    assert per_queue[("Orders", "a")] == per_queue[("Orders", "b")] == 6
    assert per_queue[("Shipments", "c")] == 4


def test_every_process_computes_the_same_assignment_whatever_the_order() -> None:
    listed = members(("a", 5), ("b", 3), ("c", 5))
    assert assign(listed, QUEUES) == assign(list(reversed(listed)), QUEUES)


def test_a_process_leaving_moves_only_its_own_shards() -> None:
    before = assign(members(("a", 5), ("b", 5), ("c", 5), ("d", 5)), QUEUES)
    after = assign(members(("a", 5), ("b", 5), ("c", 5)), QUEUES)
    moved = [key for key in before if before[key] != after[key]]
    orphaned = [key for key in before if before[key] == "d"]
    assert set(orphaned) <= set(moved)
    assert len(moved) <= len(orphaned) + 4  # a few shuffle among the others


def test_a_process_joining_takes_about_its_share_and_little_else_moves() -> None:
    before = assign(members(("a", 5), ("b", 5), ("c", 5)), QUEUES)
    after = assign(members(("a", 5), ("b", 5), ("c", 5), ("d", 5)), QUEUES)
    moved = [key for key in before if before[key] != after[key]]
    to_newcomer = [key for key in moved if after[key] == "d"]
    assert len(to_newcomer) == sum(1 for owner in after.values() if owner == "d") == 8
    assert len(moved) <= len(to_newcomer) + 4  # a few shuffle among the others


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


def test_dealing_to_threads_is_round_robin_and_never_moves_a_dealt_shard() -> None:
    wanted = [("A", s) for s in range(5)]
    dealt = deal_sticky(wanted, {}, 3)
    assert dealt == {("A", 0): 0, ("A", 1): 1, ("A", 2): 2, ("A", 3): 0, ("A", 4): 1}
    fewer = deal_sticky([("A", 0), ("A", 2), ("A", 4), ("B", 0)], dealt, 3)
    assert fewer == {("A", 0): 0, ("A", 2): 2, ("A", 4): 1, ("B", 0): 0}


def test_on_a_cluster_each_thread_is_dealt_shards_of_one_master_when_it_can() -> None:
    # 12 shards over 3 masters (5, 4 and 3 of them), dealt to 5 threads.
    master = {s: "m1" if s % 3 == 0 or s == 11 else "m2" if s % 3 == 1 else "m3" for s in range(12)}
    wanted = [("A", s) for s in range(12)]
    dealt = deal_sticky(wanted, {}, 5, lambda key: master[key[1]])
    lanes: dict[int, set[str]] = {}
    for key, lane in dealt.items():
        lanes.setdefault(lane, set()).add(master[key[1]])
    assert len(lanes) == 5 and all(len(masters) == 1 for masters in lanes.values())
    loads = Counter(dealt.values())
    assert max(loads.values()) == 3  # no thread holds more than round-robin would give it
    # A dealt shard stays put; a new one joins the thread of its master that has room.
    grown = deal_sticky(
        [*wanted, ("A", 12)], dealt, 5, lambda key: "m1" if key[1] == 12 else master[key[1]]
    )
    assert {k: v for k, v in grown.items() if k != ("A", 12)} == dealt
    assert master[next(k[1] for k, v in dealt.items() if v == grown[("A", 12)])] == "m1"


def test_a_thread_takes_another_masters_shard_rather_than_exceed_its_fair_load() -> None:
    wanted = [("A", s) for s in range(4)]
    dealt = deal_sticky(wanted, {}, 2, lambda key: "one master")
    assert Counter(dealt.values()) == {0: 2, 1: 2}
