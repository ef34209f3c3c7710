"""A leased shard's lifecycle: every change the diagram has is made, every other one is
refused, and LOST is for good (no Redis)."""

from __future__ import annotations

import itertools

import pytest

from lowkiq.runtime.lifecycle import NEXT, Lifecycle, LifecycleError, State

#: The changes a worker makes, in the order of the module's diagram.
ALLOWED = {
    (State.IDLE, State.POPPING),
    (State.POPPING, State.IDLE),
    (State.POPPING, State.FINISHED),
    (State.POPPING, State.RUNNING),
    (State.RUNNING, State.LEAVING),
    (State.RUNNING, State.SETTLING),
    (State.LEAVING, State.SETTLING),
    (State.RUNNING, State.IDLE),
    (State.LEAVING, State.IDLE),
    (State.SETTLING, State.FINISHED),
    (State.SETTLING, State.IDLE),
    (State.FINISHED, State.POPPING),
    (State.FINISHED, State.IDLE),
    (State.UNSURE, State.IDLE),
}


def at(state: State) -> Lifecycle:
    life = Lifecycle("Worker:0")
    life.state = state
    return life


@pytest.mark.parametrize(("now", "then"), sorted(ALLOWED, key=str))
def test_each_change_of_the_diagram_is_made(now: State, then: State) -> None:
    life = at(now)
    life.to(then)
    assert life.state is then


@pytest.mark.parametrize(
    ("now", "then"),
    [
        (now, then)
        for now, then in itertools.product(State, State)
        if (now, then) not in ALLOWED
        and now is not then
        and now is not State.LOST
        and then not in (State.UNSURE, State.LOST)
    ],
    ids=str,
)
def test_a_change_the_diagram_has_not_is_refused(now: State, then: State) -> None:
    life = at(now)
    with pytest.raises(LifecycleError, match=f"from {now.name} to {then.name}"):
        life.to(then)
    assert life.state is now


@pytest.mark.parametrize("now", [s for s in State if s is not State.LOST])
def test_any_state_may_become_unsure_or_lost(now: State) -> None:
    life = at(now)
    life.to(State.UNSURE)
    assert life.state is State.UNSURE
    life = at(now)
    life.to(State.LOST)
    assert life.state is State.LOST


@pytest.mark.parametrize("then", list(State))
def test_a_lost_shard_stays_lost(then: State) -> None:
    life = at(State.LOST)
    life.to(then)
    assert life.state is State.LOST


def test_the_table_is_the_diagram() -> None:
    assert {(now, then) for now, nexts in NEXT.items() for then in nexts} == ALLOWED
