"""A worker's rate-limit token bucket in Redis, and what a pop needs to spend it.

One hash per queue, in a slot of its own (``lowkiq:{name:rate}:bucket``, see
:mod:`lowkiq.storage.keys`), refilled on Redis's clock.  A shard spends tokens
from a budget of its own (``rate_budget``, in the shard's slot), which pop
refills: on one server from the bucket itself, in the same script; on a Redis
Cluster, where one script cannot reach two slots, from the grant of a
:func:`take` call (the ``rate_take`` script), made only when the budget ran
out.  Both reserve tokens ahead: a reservation takes the whole tokens the bucket
holds (up to what it asks), or when it holds none puts it in debt and names the
time the refill pays for it, so each shard knows when to pop again and shards
waiting for tokens are served in turn.

That time is rounded up to a grid of :data:`PACE_SECONDS` on Redis's clock (less
when the bucket holds less than that much of the rate), and on one server a shard
reserves its share of :data:`RESERVE_SECONDS` of the rate at a time: the waiting
shards of a worker come back together at the steps of the grid, a few at each,
and each pops the batches of its reservation (in one script when they run quickly:
:data:`lowkiq.runtime.shard_handler.POP_SECONDS`), instead of each waking alone for every
token.  A wake-up of an idle thread, and of an idle Redis, costs CPU; few of them,
each serving a dozen jobs, make a job under a limit cost less than one drained flat
out.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

from lowkiq.clients.connection import Client
from lowkiq.storage.keys import QueueKeys
from lowkiq.storage.queue_base import QueueBase

#: On a Redis Cluster, a shard reserves the tokens of this many seconds of the rate
#: per rate_take call (at least a batch, at most the bucket's capacity).
CLUSTER_GRANT_SECONDS = 0.05
#: Seconds of the grid that reservations waiting for the refill are paid on (at most
#: the bucket's capacity's worth of the rate, so no more than ``burst`` jobs start at a
#: step).
PACE_SECONDS = 0.05
#: On one server, a shard reserves whole batches for its share (the rate over the
#: worker's shards) of this many seconds of the rate at a time (at least a batch, at
#: most the capacity): at 500/s over 8 shards and batch 1, 12 tokens, so about two
#: shards pop at each step.  The shards' reservations then come round in this time
#: plus a step, within one nap of a thread waiting for tokens (0.25 s,
#: lowkiq.runtime.idling.THROTTLE_NAP).
RESERVE_SECONDS = 0.2


@dataclass(frozen=True, slots=True)
class Throttle:
    """The rate-limit arguments of one pop: the rate in tokens per ms, the bucket's
    ``capacity``, the tokens to reserve at a time (``want``), those reserved by
    :func:`take` for this pop (``grant``), the grid in ms that reservations waiting
    for the refill are paid on (``pace_ms``, 0: none) and how many batches the pop
    may take at most (``batches``: the tokens it may spend pay for them all, and the
    caller performs them one at a time)."""

    per_ms: float
    capacity: int
    want: int
    grant: int = 0
    pace_ms: int = 0
    batches: int = 1

    def args(self) -> tuple[Any, ...]:
        """The pop script's ARGV[6] to ARGV[11]: batches, then the rate limit's."""
        return (
            self.batches,
            repr(self.per_ms),
            self.capacity,
            self.want,
            self.grant,
            self.pace_ms,
        )


def throttle_for(
    per_second: float, capacity: int, batch_size: int, cluster: bool, shards: int = 1
) -> Throttle:
    """A pop's :class:`Throttle` for a worker of ``shards`` shards.  Reservations that
    wait are paid on a grid of :data:`PACE_SECONDS` (at most ``capacity`` tokens' worth
    of the rate).  A shard reserves whole batches at a time, at least one, at most
    ``capacity``: on one server as many as its share of :data:`RESERVE_SECONDS` of the
    rate holds; on a Redis Cluster as many as :data:`CLUSTER_GRANT_SECONDS` of the rate
    holds, so that a rate_take call serves several pops."""
    pace = min(PACE_SECONDS, capacity / per_second)
    batch = min(batch_size, capacity)
    if cluster:
        tokens = per_second * CLUSTER_GRANT_SECONDS
    else:
        tokens = per_second * RESERVE_SECONDS / max(shards, 1)
    # Whole batches: a reservation ending mid-batch would make the next pop a short one.
    batches = min(math.floor(tokens / batch), capacity // batch)
    return Throttle(
        per_second / 1000.0, capacity, max(1, batches) * batch, pace_ms=math.floor(pace * 1000)
    )


def take(queue: QueueBase, throttle: Throttle) -> tuple[int, float]:
    """Reserve up to ``throttle.want`` tokens of ``queue``'s bucket (those it holds, or
    when it holds none ``want`` tokens paid for by the refill later, on the grid of
    ``pace_ms``), on the queue's client; returns how many and the seconds to wait
    before spending them."""
    args = (repr(throttle.per_ms), throttle.capacity, throttle.want, throttle.pace_ms)
    reply = queue.write("rate_take", [queue.keys.rate_bucket_hash], *args)
    return int(reply[0]), int(reply[1]) / 1000.0


@dataclass(frozen=True)
class BucketState:
    """What a queue's bucket holds: ``tokens`` now (below 0: reservations wait for
    the refill, the last one ``-tokens / rate`` seconds ahead), ``taken`` tokens
    reserved so far and ``waited``: how many reservations had to wait."""

    tokens: float
    taken: int
    waited: int


def bucket_state(
    client: Client, queue_name: str, per_second: float | None, now: float | None = None
) -> BucketState:
    """The queue's bucket, refilled to ``now`` (default this host's clock, which only
    approximates Redis's) at ``per_second`` (``None``: as stored); ``tokens`` is
    ``inf`` before the first reservation."""
    key = QueueKeys(queue_name).rate_bucket_hash
    tokens, at, taken, waited = client.hmget(key, "tokens", "at", "taken", "waited")
    level = float(tokens) if tokens is not None else math.inf
    if tokens is not None and at is not None and per_second:
        elapsed_ms = (time.time() if now is None else now) * 1000 - float(at)
        level += max(0.0, elapsed_ms) * per_second / 1000.0
    return BucketState(level, int(taken or 0), int(waited or 0))


@dataclass
class GroupBucketsState:
    """What a per-group rate limit's buckets say (in the worker's claims slot, see
    :mod:`lowkiq.storage.group_claims`): ``taken`` tokens spent so far, ``waited``:
    how many claims were refused for a group out of tokens, and ``dry``: the groups
    out of tokens now."""

    taken: int
    waited: int
    dry: int


def group_buckets_state(
    client: Client, queue_name: str, now: float | None = None
) -> GroupBucketsState:
    """The counters of ``queue_name``'s per-group buckets; ``dry`` by ``now`` (default
    this host's clock, which only approximates Redis's)."""
    prefix = QueueKeys(queue_name).group_claims_prefix
    taken, waited = client.hmget(prefix + "rate", "taken", "waited")
    now_ms = (time.time() if now is None else now) * 1000
    dry = client.zcount(prefix + "dry", f"({now_ms:.0f}", "+inf")
    return GroupBucketsState(int(taken or 0), int(waited or 0), int(dry))
