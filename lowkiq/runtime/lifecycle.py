"""The states of a shard in a worker process, from the dispatcher's point of view.

::

    IDLE --pop takes batches--> RUNNING --settled, a batch succeeded--> UNACKED
    UNACKED --its ack rides on the shard's next pop, or on the round's write--> IDLE
    RUNNING --settled, every batch failed (each failure is one script)--> IDLE
    RUNNING --asked back (a hand-over)--> LEAVING --settled--> given up
    IDLE, UNACKED --asked back--> given up (ack and lease release in one write each)
    any --a Redis call of the shard failed--> UNSURE --restored--> IDLE
    any --Redis refused the lease token--> LOST (never popped again)

A given-up or lost shard leaves the dispatcher; a RUNNING or LEAVING shard's batch
always ends in the executor before anything else happens to the shard, so the
same shard (even under a new lease) never has two batches in flight.  The
dispatcher (:mod:`lowkiq.runtime.dispatcher`) makes these transitions; the
shard's handler (:mod:`lowkiq.runtime.shard_handler`) keeps the flags they are read from.
"""

from __future__ import annotations

from enum import Enum
from typing import Protocol


class State(Enum):
    """Where a shard is in its lifecycle (see the module)."""

    IDLE = "idle"
    RUNNING = "running"
    UNACKED = "unacked"
    LEAVING = "handing over"
    UNSURE = "unsure"
    LOST = "lost"


class ShardFlags(Protocol):
    """What a shard's handler keeps of its state."""

    lost: bool
    unsure: bool
    unacked: bool


def state_of(handler: ShardFlags, running: bool, leaving: bool) -> State:
    """The state of a shard whose handler has these flags, ``running``: a batch of it
    is in flight, ``leaving``: it was asked back meanwhile."""
    if handler.lost:
        return State.LOST
    if leaving:
        return State.LEAVING
    if running:
        return State.RUNNING
    if handler.unsure:
        return State.UNSURE
    if handler.unacked:
        return State.UNACKED
    return State.IDLE
