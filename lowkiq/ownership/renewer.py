"""Lease renewals, every ``lease_ttl / 3``, one call per Redis master.

A round renews every lease of the process, across all queues, in one script
call on a single server, or one pipelined write per master on a Redis Cluster
(a script touches one slot there).  On a single server the heartbeat carries
the round in its own round trip (:meth:`Renewer.rider`) when half an interval
or more has passed since the last one, so a process costs Redis one request
per heartbeat; the renewer's own timer runs a round only when no heartbeat
did (:data:`OWN_ROUND_LATE`: a slow or failing beat never lets leases lapse).
On a cluster the renewer runs every round itself, the masters side by side,
and a master still answering the last round is skipped, so an unreachable
master delays and fails only its own leases.  After a round that could not renew
some leases (a master down, a cluster failing over and answering CLUSTERDOWN) the next
comes after a twelfth of the TTL, not a third, so an outage shorter than the TTL
costs no lease.  A renewal that Redis confirms
moves the lease's local deadline (:class:`~lowkiq.ownership.leases.Term`) to
when it was *sent* plus the TTL; a processing thread checks that deadline
before it performs a batch.  The timer's rounds run on a thread of their own, so a
Redis that hangs never keeps the renewer from stopping; give the renewer a client of
its own (:class:`~lowkiq.ownership.coordinator.Coordinator`'s ``renewal_client``) so no
other caller's blocking wait or busy pool holds a round up.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, wait
from dataclasses import dataclass
from typing import Any

import redis
from redis.exceptions import RedisClusterException

from lowkiq.clients.connection import Client
from lowkiq.ownership.leases import HeldLease, lease_ms
from lowkiq.storage.scripts import ScriptCall, run_pipelined

log = logging.getLogger("lowkiq.ownership")

#: Renewals per lease TTL.
RENEWALS_PER_TTL = 3
#: A heartbeat carries the round once this share of the interval has passed since the last.
CARRY_AFTER = 0.5
#: Where heartbeats carry the rounds, the renewer's own timer runs one only this share of
#: the interval after the last: when the heartbeat is late (it is on time every interval
#: at the defaults, ``heartbeat_interval = lease_ttl / 3``).
OWN_ROUND_LATE = 1.25
#: After a round that could not renew some leases (a master down, a cluster failing
#: over), the next comes this share of the TTL after it, not a whole interval: a short
#: outage then costs no lease.
RETRY_PER_TTL = 12
#: Seconds between looks at a round of the renewer's own that Redis has not answered yet,
#: once the next is due (no round starts before the last one ended).
ROUND_POLL = 0.05


@dataclass(frozen=True)
class Rider:
    """A renewal round a heartbeat carries: the leases, the script call, when it was sent."""

    leases: list[HeldLease]
    call: ScriptCall
    sent: float


def master_client(client: Client, key: str) -> tuple[str, Client]:
    """The name and client of the master that serves ``key`` (``client`` itself on a
    single server)."""
    if isinstance(client, redis.RedisCluster):
        node: Any = client.get_node_from_key(key)  # type: ignore[no-untyped-call]
        return node.name, node.redis_connection
    return "", client


def _in_background(renew: Callable[..., int], *args: Any) -> Future[int]:
    """Run ``renew(*args)`` on a daemon thread of its own: a master that never answers
    holds up that thread alone, not a stopping process (a pool's threads are joined at
    exit)."""
    future: Future[int] = Future()

    def work() -> None:
        try:
            future.set_result(renew(*args))
        except BaseException as exc:  # noqa: BLE001 - handed to whoever reads the future
            future.set_exception(exc)

    threading.Thread(target=work, name="lowkiq-renew-master", daemon=True).start()
    return future


class Renewer:
    """Renews the leases ``held()`` returns; reports those Redis says are gone."""

    def __init__(
        self,
        client: Client,
        ttl: float,
        held: Callable[[], Sequence[HeldLease]],
        on_lost: Callable[[HeldLease], None],
    ) -> None:
        self.client = client
        self.ttl = ttl
        self.interval = ttl / RENEWALS_PER_TTL
        self.held = held
        self.on_lost = on_lost
        #: Whether heartbeats carry the rounds: on a single server (one script call renews
        #: all the leases there).
        self.beats_carry = not isinstance(client, redis.RedisCluster)
        #: When the last round was sent (``time.monotonic``), by the timer or a heartbeat.
        self.last_round = time.monotonic()
        # Per master (on a Redis Cluster), its renewal still under way, if any.
        self._running: dict[str, Future[int]] = {}
        # Whether the last round of the timer failed to renew some leases.
        self._failed = False

    def own_round_at(self) -> float:
        """When the renewer's timer runs a round unless a heartbeat carries one before."""
        late = OWN_ROUND_LATE if self.beats_carry else 1.0
        if self._failed:
            return self.last_round + min(self.interval * late, self.ttl / RETRY_PER_TTL)
        return self.last_round + self.interval * late

    def rider(self) -> Rider | None:
        """The round a heartbeat carries now (``None``: none is due, no lease is held, or
        on a Redis Cluster); hand its reply to :meth:`settle`."""
        now = time.monotonic()
        if not self.beats_carry or now - self.last_round < self.interval * CARRY_AFTER:
            return None
        self.last_round = now
        leases = list(self.held())
        if not leases:
            return None
        return Rider(leases, self._renew_many(leases), now)

    def settle(self, rider: Rider, reply: list[Any]) -> int:
        """Apply the reply to a round a heartbeat carried; returns how many were renewed."""
        return self._confirm(rider.leases, reply, rider.sent)

    def run(self, stop: threading.Event) -> None:
        """Run a round whenever no heartbeat carried one in time, until ``stop`` is set.

        Returns as soon as ``stop`` is set (within a few milliseconds), even while Redis
        hangs or is down: this loop only waits on ``stop``, and each round runs on a
        daemon thread of its own, which a call stuck on a connection (a paused server,
        a socket without a timeout) holds up alone, neither this loop nor the exit of
        the interpreter.  While a round is unanswered no other starts; the next starts
        once it ends, if it is due by then."""
        running: threading.Thread | None = None
        while not stop.wait(self._until_next(running)):
            if running is not None and running.is_alive():
                continue  # Redis has not answered the last round yet
            if time.monotonic() < self.own_round_at():
                continue  # a heartbeat carried the round meanwhile
            running = threading.Thread(
                target=self._own_round, name="lowkiq-renew-round", daemon=True
            )
            running.start()

    def _until_next(self, running: threading.Thread | None) -> float:
        """Seconds until the loop looks again: when the next round is due, or soon while
        the last one is still under way."""
        if running is not None and running.is_alive():
            return ROUND_POLL  # when it ends, its failures may bring the next one forward
        return max(self.own_round_at() - time.monotonic(), 0.0)

    def _own_round(self) -> None:
        try:
            self.renew()
        except Exception:  # noqa: BLE001 - the next round tries again
            log.exception("lease renewal failed")

    def renew(self) -> int:
        """Renew every held lease once, a pipeline per master; returns how many were
        renewed (leases of a master that failed are neither renewed nor lost, and the
        next round comes sooner: :data:`RETRY_PER_TTL`)."""
        self.last_round = time.monotonic()
        self._failed = False
        groups: dict[str, tuple[Client, list[HeldLease]]] = {}
        for held in self.held():
            try:
                name, node = master_client(
                    self.client, held.lease.queue.keys.prefix(held.lease.shard)
                )
            except RedisClusterException as exc:  # the slot has no master now
                log.debug("cannot renew %r: %s", held.lease, exc)
                continue
            groups.setdefault(name, (node, []))[1].append(held)
        if len(groups) <= 1 and not self._running:
            return sum(self._renew_group(node, leases) for node, leases in groups.values())
        submitted = []
        for name, (node, leases) in groups.items():
            if name in self._running and not self._running[name].done():
                continue  # that master is still slow to answer the last round: skip it
            future = self._running[name] = _in_background(self._renew_group, node, leases)
            submitted.append(future)
        # A master that does not answer soon does not hold up the others' next round: it
        # goes on in the background, and is skipped until it has answered.
        done, _ = wait(submitted, timeout=self.ttl / RETRY_PER_TTL)
        return sum(future.result() for future in done)

    def _renew_group(self, node: Client, group: Sequence[HeldLease]) -> int:
        ttl_ms = lease_ms(self.ttl)
        sent = time.monotonic()
        try:
            replies = self._send(node, group, ttl_ms)
        except (redis.RedisError, RedisClusterException) as exc:
            self._failed = True
            log.warning("could not renew %d lease(s): %s: %s", len(group), type(exc).__name__, exc)
            return 0
        return self._confirm(group, replies, sent)

    def _confirm(self, group: Sequence[HeldLease], replies: Sequence[Any], sent: float) -> int:
        """Move the deadlines of the leases Redis renewed; report the ones it said are gone."""
        renewed = 0
        for held, reply in zip(group, replies, strict=True):
            if reply:
                held.term.confirm(sent)
                renewed += 1
            else:
                self.on_lost(held)
        return renewed

    def _send(self, node: Client, group: Sequence[HeldLease], ttl_ms: int) -> list[Any]:
        """Renew ``group`` on ``node``: one script call on a single server, a pipeline of
        one call per lease on a Redis Cluster (a script touches one slot there)."""
        if not isinstance(self.client, redis.RedisCluster):
            reply: list[Any] = run_pipelined(node, [self._renew_many(group)])[0]
            return reply
        prefixes = [held.lease.queue.keys.prefix(held.lease.shard) for held in group]
        scripts = group[0].lease.queue.scripts
        calls = [
            (scripts.lease_renew, [prefix], (ttl_ms, held.lease.token))
            for prefix, held in zip(prefixes, group, strict=True)
        ]
        return run_pipelined(node, calls)

    def _renew_many(self, group: Sequence[HeldLease]) -> ScriptCall:
        """One script call renewing all of ``group`` (a single server only)."""
        prefixes = [held.lease.queue.keys.prefix(held.lease.shard) for held in group]
        args: list[Any] = [lease_ms(self.ttl)]
        for prefix, held in zip(prefixes, group, strict=True):
            args += [prefix, held.lease.token]
        return (group[0].lease.queue.scripts.lease_renew_many, prefixes[:1], args)
