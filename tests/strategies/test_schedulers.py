"""Schedulers are pure: given each idle shard's due time, the order to pop them in."""

from __future__ import annotations

import lowkiq
from lowkiq.strategies.schedulers import (
    LagScheduler,
    SeqScheduler,
    build_lag_scheduler,
    build_seq_scheduler,
)


def test_lag_pops_the_due_shards_the_longest_waiting_first() -> None:
    # Shard 1 is due for 5 s, shard 3 for 1 s, shard 0 in a second, shard 2 is empty.
    assert LagScheduler().order([1.0, -5.0, None, -1.0]) == [1, 3]


def test_lag_breaks_ties_by_the_order_given_the_shard_popped_longest_ago_first() -> None:
    # The dispatcher lists idle shards by their last pop: equal lags keep that order,
    # so with every shard backlogged (all read as due now) they are taken in turn.
    assert LagScheduler().order([0.0, 0.0, 0.0]) == [0, 1, 2]
    assert LagScheduler().order([0.0, -2.0, 0.0]) == [1, 0, 2]


def test_lag_pops_nothing_when_nothing_is_due() -> None:
    assert LagScheduler().order([0.5, None, 3.0]) == []


def test_seq_pops_every_idle_shard_in_turn_without_reading_due_times() -> None:
    scheduler = SeqScheduler()
    assert scheduler.reads_due is False
    assert scheduler.order([0.0, 0.0, 0.0]) == [0, 1, 2]
    assert LagScheduler.reads_due is True


def test_the_builders_are_the_public_defaults() -> None:
    assert isinstance(build_lag_scheduler(), LagScheduler)
    assert isinstance(build_seq_scheduler(), SeqScheduler)
    assert lowkiq.settings.build_scheduler is lowkiq.build_lag_scheduler
