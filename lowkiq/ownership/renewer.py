"""Lease renewals, every ``lease_ttl / 3``, one call per Redis master.

A round renews every lease of the process, across all queues, in one script
call on a single server, or one pipelined write per master on a Redis Cluster
(a script touches one slot there).  On a single server the heartbeat carries
the round in its own round trip (:meth:`Renewer.rider`) when half an interval
or more has passed since the last one, so a process costs Redis one request
per heartbeat; the renewer's own timer runs a round only when no heartbeat
did (:data:`OWN_ROUND_LATE`: a slow or failing beat never lets leases lapse).

On a cluster the renewer runs every round itself, the masters' writes sent side by
side, on a cluster client of its own whose every call gives up after 1/24 of the
TTL (:func:`~lowkiq.clients.cluster.bounded_client`): a master that died or hangs
costs a round that much, never the lease.  A redirection (``MOVED``, ``ASK``) is
followed at once.  When a master fails or answers ``CLUSTERDOWN`` (a failover under
way), the round reloads the slot map at once and renews again, in the same round, the
leases whose slot has a new master (its replica took over).  After a round that could
not renew some leases the next comes after a twelfth of the TTL, not a third, and
reloads the slot map first: the leases of a master that fails over reach its replica
within an eighth of the TTL of its promotion, and an outage shorter than the TTL
costs no lease.

A renewal that Redis confirms moves the lease's local deadline
(:class:`~lowkiq.ownership.leases.Term`) to when it was *sent* plus the TTL; a
processing thread checks that deadline before it performs a batch.  The timer's
rounds run on a thread of their own, so a Redis that hangs never keeps the renewer
from stopping; give the renewer a client of its own
(:class:`~lowkiq.ownership.coordinator.Coordinator`'s ``renewal_client``) so no
other caller's blocking wait or busy pool holds a round up.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import redis
from redis.exceptions import RedisClusterException

from lowkiq.clients.cluster import bounded_client
from lowkiq.clients.connection import Client
from lowkiq.ownership.leases import HeldLease, lease_ms
from lowkiq.storage.scripts import ScriptCall, run_on_masters, run_pipelined

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
#: On a Redis Cluster, a renewal's connect and read (and a reload of the slot map's, on
#: each node it asks) give up after this share of the TTL, or the client's own socket
#: timeout when shorter: a round after a failed one ends within a twelfth of the TTL.
TIMEOUT_PER_TTL = 24
#: Seconds such a call is given at least, however short the TTL (a round trip to a
#: distant server).
MIN_CALL_TIMEOUT = 0.1
#: Errors that say a round could not ask Redis about some leases (neither renewed nor
#: lost): a connection lost or timed out, a slot without a master, a redirection not
#: followed, ``CLUSTERDOWN``.
UNSURE = (redis.RedisError, RedisClusterException)
#: Seconds between looks at a round of the renewer's own that Redis has not answered yet,
#: once the next is due (no round starts before the last one ended).
ROUND_POLL = 0.05


@dataclass(frozen=True)
class Rider:
    """A renewal round a heartbeat carries: the leases, the script call, when it was sent."""

    leases: list[HeldLease]
    call: ScriptCall
    sent: float


@dataclass
class Round:
    """What a round did: how many leases it renewed, those Redis could not be asked about
    (neither renewed nor lost), and the first error that kept it from asking."""

    renewed: int = 0
    unsure: list[HeldLease] = field(default_factory=list)
    error: BaseException | None = None

    def add(self, other: Round) -> None:
        """Count ``other``'s renewals and unsure leases in this round too."""
        self.renewed += other.renewed
        self.unsure += other.unsure
        self.error = self.error or other.error


def _master_name(cluster: Any, held: HeldLease) -> str | None:
    """The name of the master serving ``held``'s slot in ``cluster``'s slot map (``None``:
    none for now)."""
    try:
        name: str = cluster.get_node_from_key(held.lease.queue.keys.prefix(held.lease.shard)).name
    except RedisClusterException:
        return None
    return name


def _reload(cluster: Any) -> bool:
    """Reload ``cluster``'s slot map (redis-py's ``NodesManager.initialize``: it asks the
    nodes it knows for ``CLUSTER SLOTS``); ``False`` when no node answered."""
    try:
        cluster.nodes_manager.initialize()
    except UNSURE as exc:
        log.debug("could not reload the cluster's slot map: %s", exc)
        return False
    return True


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
        # Whether the last round of the timer failed to renew some leases, and how many
        # rounds in a row did (the first is logged, and when renewals go through again).
        self._failed = False
        self._failures = 0
        # On a Redis Cluster, the renewer's own client (made by the first round).
        self._cluster: redis.RedisCluster | None = None

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

    def confirm(self, rider: Rider, reply: list[Any]) -> int:
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
        """Renew every held lease once; returns how many were renewed (leases Redis could
        not be asked about are neither renewed nor lost, and the next round comes sooner:
        :data:`RETRY_PER_TTL`)."""
        self.last_round = time.monotonic()
        leases = list(self.held())
        if not leases:
            result = Round()
        elif self.beats_carry:
            result = self._renew_on_server(leases)
        else:
            result = self._renew_on_cluster(leases)
        self._ended(result)
        return result.renewed

    def _ended(self, result: Round) -> None:
        """Bring the next round forward when some leases could not be renewed; log the
        first such round of a run, and the round that renews them again."""
        self._failed = bool(result.unsure)
        if not self._failed:
            if self._failures:
                log.info("leases renewed again after %d failed round(s)", self._failures)
            self._failures = 0
            return
        self._failures += 1
        level = logging.WARNING if self._failures == 1 else logging.DEBUG
        error = result.error
        log.log(
            level,
            "could not renew %d lease(s), trying again in %.1fs: %s: %s",
            len(result.unsure),
            self.ttl / RETRY_PER_TTL,
            type(error).__name__,
            error,
        )

    def _renew_on_server(self, leases: list[HeldLease]) -> Round:
        """One script call renewing every lease on a single server."""
        sent = time.monotonic()
        try:
            replies: list[Any] = run_pipelined(self.client, [self._renew_many(leases)])[0]
        except redis.RedisError as exc:
            return Round(unsure=leases, error=exc)
        return Round(self._confirm(leases, replies, sent))

    def _renew_on_cluster(self, leases: list[HeldLease]) -> Round:
        """A write per master; when some masters failed, moved the slots or answered
        ``CLUSTERDOWN``, reload the slot map at once and renew again the leases whose slot
        has a new master."""
        try:
            cluster = self._own_cluster()
        except UNSURE as exc:
            return Round(unsure=leases, error=exc)
        if self._failed:  # their slots may have moved since the last round
            _reload(cluster)
        was = {id(held): _master_name(cluster, held) for held in leases}
        result = self._renew_on_masters(cluster, leases)
        if not result.unsure or not _reload(cluster):
            return result
        moved: list[HeldLease] = []
        stayed: list[HeldLease] = []
        for held in result.unsure:
            now = _master_name(cluster, held)
            (stayed if now is None or now == was[id(held)] else moved).append(held)
        if not moved:
            return result
        again = Round(result.renewed, stayed, result.error)
        again.add(self._renew_on_masters(cluster, moved))
        return again

    def _own_cluster(self) -> Any:
        """The renewer's own client of the cluster, whose calls end within
        :data:`TIMEOUT_PER_TTL` of the TTL (made at the first round)."""
        if self._cluster is None:
            assert isinstance(self.client, redis.RedisCluster)
            timeout = max(self.ttl / TIMEOUT_PER_TTL, MIN_CALL_TIMEOUT)
            self._cluster = bounded_client(self.client, timeout)
        return self._cluster

    def _renew_on_masters(self, cluster: Any, leases: Sequence[HeldLease]) -> Round:
        """A pipelined write to each master of ``leases``' slots, all sent before any reply
        is read (a redirected call follows the redirection)."""
        result = Round()
        by_master: dict[str, tuple[Any, list[HeldLease]]] = {}
        for held in leases:
            try:
                node = cluster.get_node_from_key(held.lease.queue.keys.prefix(held.lease.shard))
            except RedisClusterException as exc:  # the slot has no master now
                result.unsure.append(held)
                result.error = result.error or exc
                continue
            by_master.setdefault(node.name, (node, []))[1].append(held)
        masters = list(by_master.values())
        ttl_ms = lease_ms(self.ttl)
        sent = time.monotonic()
        calls = [
            (node, [_renew_one(held, ttl_ms) for held in on_master]) for node, on_master in masters
        ]
        for (_, on_master), outcome in zip(masters, run_on_masters(cluster, calls), strict=True):
            if isinstance(outcome, Exception):  # the master's connection failed
                result.add(Round(unsure=on_master, error=outcome))
                continue
            result.add(self._read(on_master, outcome, sent))
        return result

    def _read(self, leases: Sequence[HeldLease], replies: Sequence[Any], sent: float) -> Round:
        """Renewed, lost, or unsure (an error reply) from each lease's reply."""
        result = Round()
        for held, reply in zip(leases, replies, strict=True):
            if isinstance(reply, Exception):
                result.add(Round(unsure=[held], error=reply))
            else:
                result.renewed += self._confirm([held], [reply], sent)
        return result

    def close(self) -> None:
        """Close the renewer's own cluster client, if it made one."""
        if self._cluster is not None:
            self._cluster.close()

    def _confirm(self, leases: Sequence[HeldLease], replies: Sequence[Any], sent: float) -> int:
        """Move the deadlines of the leases Redis renewed; report the ones it said are gone."""
        renewed = 0
        for held, reply in zip(leases, replies, strict=True):
            if reply:
                held.term.confirm(sent)
                renewed += 1
            else:
                self.on_lost(held)
        return renewed

    def _renew_many(self, leases: Sequence[HeldLease]) -> ScriptCall:
        """One script call renewing all of ``leases`` (a single server only)."""
        prefixes = [held.lease.queue.keys.prefix(held.lease.shard) for held in leases]
        args: list[Any] = [lease_ms(self.ttl)]
        for prefix, held in zip(prefixes, leases, strict=True):
            args += [prefix, held.lease.token]
        return (leases[0].lease.queue.scripts.lease_renew_many, prefixes[:1], args)


def _renew_one(held: HeldLease, ttl_ms: int) -> ScriptCall:
    """The script call renewing one lease (a script touches one slot on a cluster)."""
    lease = held.lease
    return (
        lease.queue.scripts.lease_renew,
        [lease.queue.keys.prefix(lease.shard)],
        (ttl_ms, lease.token),
    )
