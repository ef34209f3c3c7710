"""A round's plan, decided without Redis: which shards are considered and when their due
times must be read, which are popped, and which acks go alone."""

from __future__ import annotations

import itertools

import pytest

from lowkiq.runtime.planning import Candidate, Plan, Shares, first_look, plan_round
from lowkiq.strategies.schedulers import LagScheduler, SeqScheduler


def shard(n: int, **options: object) -> Candidate:
    return Candidate(("Q", n), **options)  # type: ignore[arg-type]


def keys(candidates: list[Candidate]) -> list[int]:
    return [candidate.key[1] for candidate in candidates]


def test_candidates_are_considered_popped_longest_ago_first() -> None:
    considered, _ = first_look(
        [shard(0, popped_at=3.0), shard(1, popped_at=1.0), shard(2)], True, False
    )
    assert keys(considered) == [2, 1, 0]


def test_a_scheduler_that_reads_no_due_times_counts_every_shard_due() -> None:
    considered, due = first_look([shard(0), shard(1)], reads_due=False, woken=False)
    assert keys(considered) == [0, 1] and due == [0.0, 0.0]


def test_shards_that_all_had_a_backlog_are_due_without_asking_redis() -> None:
    considered, due = first_look([shard(0, backlog=True), shard(1, backlog=True)], True, False)
    assert keys(considered) == [0, 1] and due == [0.0, 0.0]


def test_after_a_wake_up_only_the_woken_shards_and_those_with_a_backlog_are_due() -> None:
    candidates = [shard(0), shard(1, woken=True), shard(2, backlog=True), shard(3)]
    considered, due = first_look(candidates, True, woken=True)
    assert keys(considered) == [1, 2] and due == [0.0, 0.0]


@pytest.mark.parametrize(
    ("candidates", "woken"),
    [
        ([shard(0), shard(1, backlog=True)], False),  # no wake-up: read them all
        ([shard(0), shard(1)], True),  # a wake-up of none of these shards
        ([], False),
    ],
)
def test_otherwise_the_round_reads_the_due_times(candidates: list[Candidate], woken: bool) -> None:
    considered, due = first_look(candidates, True, woken)
    assert keys(considered) == keys(sorted(candidates, key=lambda c: c.popped_at))
    assert due is None or candidates == []


def test_a_round_pops_the_due_shards_the_longest_waiting_first() -> None:
    considered = [shard(0), shard(1), shard(2), shard(3)]
    plan = plan_round(considered, [0.5, -2.0, None, -0.1], 10, LagScheduler().order, [])
    assert plan == Plan(pops=(("Q", 1), ("Q", 3)))


@pytest.mark.parametrize("room", [-1, 0, 1, 2, 5])
def test_a_round_pops_no_more_shards_than_there_is_room_for(room: int) -> None:
    considered = [shard(n) for n in range(4)]
    plan = plan_round(considered, [0.0] * 4, room, SeqScheduler().order, [])
    assert [key[1] for key in plan.pops] == list(range(4))[: max(room, 0)]


def test_a_popped_shard_s_ack_rides_on_its_pop_and_the_others_go_alone() -> None:
    considered = [shard(0), shard(1)]
    finished = [("Q", 1), ("Q", 7), ("Q", 0)]
    plan = plan_round(considered, [0.0, None], 5, LagScheduler().order, finished)
    assert plan == Plan(pops=(("Q", 0),), acks=(("Q", 1), ("Q", 7)))


def test_a_round_with_nothing_to_pop_or_ack_is_empty() -> None:
    assert plan_round([shard(0)], [None], 5, LagScheduler().order, []).empty
    assert not plan_round([], [], 5, LagScheduler().order, [("Q", 3)]).empty


@pytest.mark.parametrize(
    ("dues", "room", "finished"),
    list(
        itertools.product(
            itertools.product([None, -1.0, 0.0, 2.0], repeat=3), [0, 1, 2, 3], [(), (0,), (0, 2)]
        )
    ),
)
def test_every_plan_pops_due_shards_only_each_once_and_acks_each_finished_shard_once(
    dues: tuple[float | None, ...], room: int, finished: tuple[int, ...]
) -> None:
    considered = [shard(n) for n in range(3)]
    plan = plan_round(
        considered, list(dues), room, LagScheduler().order, [("Q", n) for n in finished]
    )
    popped = [key[1] for key in plan.pops]
    assert len(popped) == len(set(popped)) <= room
    assert all(dues[n] is not None and dues[n] <= 0 for n in popped)  # type: ignore[operator]
    assert len(popped) == min(room, sum(d is not None and d <= 0 for d in dues))
    # Each finished shard is acked once: by its pop, or alone.
    assert sorted([n for n in finished if n in popped] + [key[1] for key in plan.acks]) == sorted(
        finished
    )


# -- workers taking turns by weight --------------------------------------------------------


def crowded_rounds(shares: Shares, shards: dict[str, int], rounds: int) -> dict[str, int]:
    """Pops per queue over ``rounds`` rounds with room for one pop, every shard due."""
    considered = [Candidate((queue, n)) for queue, count in shards.items() for n in range(count)]
    popped = dict.fromkeys(shards, 0)
    for _ in range(rounds):
        plan = plan_round(considered, [0.0] * len(considered), 1, LagScheduler().order, [], shares)
        for key in plan.pops:
            popped[key[0]] += 1
            shares.started(key[0], 1)
    return popped


def test_crowded_workers_pop_in_proportion_to_their_weights_whatever_their_shard_counts() -> None:
    shares = Shares(weights={"A": 3.0, "B": 1.0})
    # B has eight times A's shards; without weights a round-robin over shards favours it 8:1.
    assert crowded_rounds(shares, {"A": 1, "B": 8}, 400) == {"A": 300, "B": 100}


def test_equal_weights_share_the_pops_equally() -> None:
    assert crowded_rounds(Shares(), {"A": 2, "B": 16, "C": 1}, 300) == {
        "A": 100,
        "B": 100,
        "C": 100,
    }


def test_a_round_with_room_for_every_due_shard_pops_them_all_whatever_the_weights() -> None:
    considered = [Candidate(("A", 0)), Candidate(("B", 0)), Candidate(("B", 1))]
    shares = Shares(weights={"A": 100.0, "B": 1.0})
    plan = plan_round(considered, [0.0, 0.0, 0.0], 3, LagScheduler().order, [], shares)
    assert sorted(plan.pops) == [("A", 0), ("B", 0), ("B", 1)]


def test_a_worker_without_a_backlog_banks_no_turns() -> None:
    shares = Shares(weights={"A": 1.0, "B": 1.0})
    crowded_rounds(shares, {"A": 4}, 100)  # A alone, crowded: 100 batches started
    # B's backlog begins: it is level with A, not 100 turns ahead of it.
    assert crowded_rounds(shares, {"A": 4, "B": 4}, 20) == {"A": 10, "B": 10}


def test_a_new_crowded_spell_starts_level() -> None:
    shares = Shares(weights={"A": 1.0, "B": 1.0})
    for _ in range(50):
        shares.started("A", 1)  # A ran alone while rounds had room for everything
    shares.calm()
    assert crowded_rounds(shares, {"A": 1, "B": 1}, 10) == {"A": 5, "B": 5}


def test_batches_started_count_not_pops() -> None:
    shares = Shares(weights={"A": 1.0, "B": 1.0})
    considered = [Candidate(("A", 0)), Candidate(("B", 0))]
    order = LagScheduler().order
    first = plan_round(considered, [0.0, 0.0], 1, order, [], shares).pops[0]
    shares.started(first[0], 10)  # that pop took ten batches
    other = "B" if first[0] == "A" else "A"
    pops = [plan_round(considered, [0.0, 0.0], 1, order, [], shares).pops[0] for _ in range(10)]
    for key in pops:
        shares.started(key[0], 1)
    assert [key[0] for key in pops] == [other] * 10
