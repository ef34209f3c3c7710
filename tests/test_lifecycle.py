"""A shard's state in the dispatcher, read from its handler's flags (no Redis)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from lowkiq.runtime.lifecycle import State, state_of


@dataclass
class Flags:
    lost: bool = False
    unsure: bool = False
    unacked: bool = False


@pytest.mark.parametrize(
    ("flags", "running", "leaving", "state"),
    [
        (Flags(), False, False, State.IDLE),
        (Flags(unacked=True), False, False, State.UNACKED),
        (Flags(), True, False, State.RUNNING),
        # Asked back while its batch runs: given up once the batch is settled.
        (Flags(), True, True, State.LEAVING),
        # A Redis call failed: restored before its next pop.
        (Flags(unsure=True), False, False, State.UNSURE),
        # A lost lease wins over everything: the shard is never popped again.
        (Flags(lost=True, unacked=True), True, True, State.LOST),
    ],
)
def test_state_of(flags: Flags, running: bool, leaving: bool, state: State) -> None:
    assert state_of(flags, running, leaving) is state
