"""The lifecycle of a leased shard in a worker process: one state, changed in one place.

::

    IDLE --pop sent--> POPPING
    POPPING --nothing popped, or its batch put back--> IDLE
    POPPING --not sent (its master is out): its ack still waits--> FINISHED
    POPPING --its batch handed to the executor--> RUNNING
    RUNNING --asked back (a hand-over, a stop)--> LEAVING
    RUNNING, LEAVING --the executor handed it back--> SETTLING
    RUNNING --taken back before a thread started it, and put back--> IDLE
    SETTLING --a batch succeeded: its ack waits--> FINISHED
    SETTLING --failed (one script), yielded and acked, or put back--> IDLE
    FINISHED --the next pop carries the ack--> POPPING
    FINISHED --acked in the round's write, or alone--> IDLE
    any --a Redis call of the shard failed: what it did is unknown--> UNSURE
    UNSURE --a finished batch it may have acked acked by its number, then its processing
             area restored (whatever batch it holds)--> IDLE
    any --Redis refused the lease token--> LOST (never popped again)

The shard's handler (:mod:`lowkiq.runtime.shard_handler`) holds the state; every change
goes through :meth:`Lifecycle.to`, which refuses one the diagram does not have (a bug:
raised, so the dispatcher's loop logs it and restores the shard).  The dispatcher
(:mod:`lowkiq.runtime.dispatcher`) sends the pops and hands batches to the executor;
a RUNNING or LEAVING shard's batch always ends in the executor before anything else
happens to the shard, so the same shard (even under a new lease) never has two
batches in flight.
"""

from __future__ import annotations

from enum import Enum


class State(Enum):
    """Where a leased shard is in its lifecycle (see the module)."""

    IDLE = "idle"
    POPPING = "popping"
    RUNNING = "running"
    LEAVING = "handing over"
    SETTLING = "settling"
    FINISHED = "finished"
    UNSURE = "unsure"
    LOST = "lost"


#: The states each state may change to (besides UNSURE and LOST, reachable from any
#: state but LOST).
NEXT: dict[State, frozenset[State]] = {
    State.IDLE: frozenset({State.POPPING}),
    State.POPPING: frozenset({State.IDLE, State.RUNNING, State.FINISHED}),
    State.RUNNING: frozenset({State.LEAVING, State.SETTLING, State.IDLE}),
    State.LEAVING: frozenset({State.SETTLING, State.IDLE}),
    State.SETTLING: frozenset({State.FINISHED, State.IDLE}),
    State.FINISHED: frozenset({State.POPPING, State.IDLE}),
    State.UNSURE: frozenset({State.IDLE}),
    State.LOST: frozenset(),
}


class LifecycleError(RuntimeError):
    """A change of state the lifecycle does not have: a bug of lowkiq's."""


# Each state's NEXT, with UNSURE and LOST, as a tuple on the member itself: a change is
# checked on every pop and settle, and an Enum member hashes in Python (a dict or a set
# of them costs a call), while a tuple is searched by identity.
for _state in State:
    _state.next_states = (*NEXT[_state], State.UNSURE, State.LOST)  # type: ignore[attr-defined]


class Lifecycle:
    """A leased shard's state (see the module)."""

    __slots__ = ("name", "state")

    def __init__(self, name: str) -> None:
        self.name = name
        self.state = State.IDLE

    def to(self, state: State) -> None:
        """Change to ``state``; :class:`LifecycleError` when the diagram has no such change
        (a LOST shard stays LOST, whatever is asked)."""
        now = self.state
        if now is LOST or state is now:
            return
        if state in now.next_states:  # type: ignore[attr-defined]
            self.state = state
            return
        raise LifecycleError(f"{self.name}: no change from {now.name} to {state.name}")

    def __repr__(self) -> str:
        return f"<Lifecycle {self.name} {self.state.name}>"


# The states by their plain names (in State's order), for the code that changes them on
# every pop and settle (a member read through its Enum class costs a lookup each time).
IDLE, POPPING, RUNNING, LEAVING, SETTLING, FINISHED, UNSURE, LOST = State

#: The states in which the shard's processing area holds the batch it popped, not yet
#: ended (a FINISHED batch ended: it waits only for its ack).
HOLDING = (POPPING, RUNNING, LEAVING, SETTLING)
