"""Redis's ``maxmemory-policy``: lowkiq needs ``noeviction``; and whether Redis is full.

Under any other policy a full Redis deletes keys to make room: queued jobs
vanish (``allkeys-*``), or leases, whose keys expire, are evicted early and
their shards change hands again and again (``volatile-*``).  A worker refuses to
start on such a server unless ``settings.allow_eviction`` is true; the dashboard
shows a red banner.  The policy is read with ``CONFIG GET``, or from ``INFO
memory`` where a managed Redis forbids ``CONFIG``; on a Redis Cluster, from every
master.

The policy can change while lowkiq runs (``CONFIG SET``, a provider's parameter
group): a running worker reads it again every few seconds with the rest of
:func:`read_memory` (:mod:`lowkiq.health.memory_watch`), and ``perform_async``
through :data:`PRODUCER_GATE`, at most once every :data:`RECHECK_SECONDS` per
client, so a producer learns of an evicting Redis within seconds at no cost per job.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import redis
from redis.exceptions import RedisClusterException

from lowkiq.clients.connection import Client
from lowkiq.errors import ConfigurationError

log = logging.getLogger("lowkiq")

#: The one policy under which Redis never deletes a key to make room.
SAFE_POLICY = "noeviction"


@dataclass(frozen=True)
class NodePolicy:
    """The ``maxmemory-policy`` of one Redis server (``None``: it could not be read)."""

    node: str
    policy: str | None

    @property
    def evicts(self) -> bool:
        """Whether this server may delete lowkiq's keys when full."""
        return self.policy is not None and self.policy != SAFE_POLICY


def _policy_of(client: redis.Redis) -> str | None:
    """One server's policy: ``CONFIG GET``, else ``INFO memory``, else ``None``."""
    try:
        reply: dict[Any, Any] = client.config_get("maxmemory-policy")
        value = reply.get("maxmemory-policy") or reply.get(b"maxmemory-policy")
        if value is not None:
            return value.decode() if isinstance(value, bytes) else str(value)
    except redis.ResponseError:  # CONFIG renamed or forbidden (managed Redis)
        pass
    try:
        found = client.info("memory").get("maxmemory_policy")
    except redis.ResponseError:
        return None
    return None if found is None else str(found)


def _node_name(client: redis.Redis) -> str:
    kwargs = client.connection_pool.connection_kwargs
    if "path" in kwargs:
        return str(kwargs["path"])
    return f"{kwargs.get('host', 'localhost')}:{kwargs.get('port', 6379)}"


def policies(client: Client) -> list[NodePolicy]:
    """The policy of the server, or of every master of a Redis Cluster.

    Raises ``redis.ConnectionError`` when a server cannot be reached.
    """
    if isinstance(client, redis.RedisCluster):
        return [
            NodePolicy(node.name, _policy_of(node.redis_connection))
            for node in client.get_primaries()  # type: ignore[no-untyped-call]
        ]
    return [NodePolicy(_node_name(client), _policy_of(client))]


def eviction_problem(found: list[NodePolicy]) -> str | None:
    """What is wrong with ``found`` for lowkiq, or ``None`` when every server is safe."""
    evicting = [entry for entry in found if entry.evicts]
    if not evicting:
        return None
    named = ", ".join(f"{entry.node} has maxmemory-policy {entry.policy}" for entry in evicting)
    return (
        f"{named}: when full, Redis deletes keys, so queued jobs can vanish and leases "
        f"lapse early; set maxmemory-policy {SAFE_POLICY} (CONFIG SET maxmemory-policy "
        f"{SAFE_POLICY}, or in redis.conf or your provider's parameter group)"
    )


def check_eviction(client: Client, allow_eviction: bool) -> list[NodePolicy]:
    """Read the policies and refuse an evicting server: :class:`ConfigurationError`
    naming the policy and the fix, or a warning when ``allow_eviction`` is true.  A
    policy that cannot be read is logged once, as a warning.  Returns what was read."""
    try:
        found = policies(client)
    except RedisClusterException as exc:
        raise redis.ConnectionError(str(exc)) from exc
    unread = [entry.node for entry in found if entry.policy is None]
    if unread:
        log.warning(
            "could not read maxmemory-policy of %s (CONFIG and INFO refused): make sure it is "
            "%s, or jobs can vanish when Redis is full",
            ", ".join(unread),
            SAFE_POLICY,
        )
    problem = eviction_problem(found)
    if problem is None:
        return found
    if not allow_eviction:
        raise ConfigurationError(
            f"{problem}; or set lowkiq.settings.allow_eviction = True (LOWKIQ_ALLOW_EVICTION=1) "
            "to run anyway"
        )
    log.warning("%s (running anyway: settings.allow_eviction is true)", problem)
    return found


def check_before_fork(make_client: Callable[[], Client], allow_eviction: bool) -> None:
    """:func:`check_eviction` on a client of its own, closed after (a supervisor checks
    before it forks, so that a refused policy stops it instead of its children being
    restarted again and again); an unreachable Redis is left to the children, which
    wait for it."""
    client = make_client()
    try:
        check_eviction(client, allow_eviction)
    except (redis.ConnectionError, redis.TimeoutError):
        pass
    finally:
        client.close()


#: Seconds a producer trusts what it read of the policy before it reads it again.
RECHECK_SECONDS = 3.0


class PolicyGate:
    """``perform_async``'s check of the policy: a :class:`ConfigurationError` while a
    server evicts (unless ``allow_eviction``), read again at most once every
    ``recheck`` seconds per client (between reads a call costs a clock read)."""

    def __init__(
        self, recheck: float = RECHECK_SECONDS, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.recheck = recheck
        self.clock = clock
        self._lock = threading.Lock()
        # client -> (when read, the problem or None)
        self._read: weakref.WeakKeyDictionary[Any, tuple[float, str | None]] = (
            weakref.WeakKeyDictionary()
        )

    def problem(self, client: Client) -> str | None:
        """What is wrong with ``client``'s policy, as read at most ``recheck`` seconds ago
        (a policy that cannot be read counts as safe).  Raises ``redis.ConnectionError``
        when a server cannot be reached."""
        now = self.clock()
        with self._lock:
            known = self._read.get(client)
        if known is not None and now - known[0] < self.recheck:
            return known[1]
        try:
            found = read_memory(client).eviction  # INFO: no CONFIG call for the producer
        except redis.ResponseError:  # INFO refused: CONFIG GET
            try:
                found = eviction_problem(policies(client))
            except RedisClusterException as exc:
                raise redis.ConnectionError(str(exc)) from exc
        with self._lock:
            self._read[client] = (now, found)
        return found

    def check(self, client: Client, allow_eviction: bool, what: str) -> None:
        """Raise a :class:`ConfigurationError` saying ``what`` was refused while a server of
        ``client`` evicts keys and ``allow_eviction`` is false."""
        if allow_eviction:
            return
        found = self.problem(client)
        if found is not None:
            raise ConfigurationError(
                f"{what}: refused, nothing enqueued: {found}; or set "
                "lowkiq.settings.allow_eviction = True (LOWKIQ_ALLOW_EVICTION=1) to enqueue "
                "anyway"
            )

    def forget(self) -> None:
        """Read every policy afresh on the next check."""
        with self._lock:
            self._read.clear()


#: The gate every ``perform_async`` of this process passes.
PRODUCER_GATE = PolicyGate()


def _size(count: int) -> str:
    """Bytes as Redis's ``*_human`` fields write them: ``512B``, ``1.50M``, ``2.00G``."""
    for unit, size in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if count >= size:
            return f"{count / size:.2f}{unit}"
    return f"{count}B"


@dataclass(frozen=True)
class NodeMemory:
    """What one Redis server says of its memory (``INFO memory`` and ``INFO stats``)."""

    node: str
    policy: str | None
    #: Bytes Redis counts against ``maxmemory`` (``used_memory`` less what it does not
    #: count, replication and AOF buffers).
    used: int
    #: ``maxmemory`` in bytes, 0 for none.
    maxmemory: int
    #: Keys Redis evicted since it started (``evicted_keys``).
    evicted_keys: int

    @property
    def evicts(self) -> bool:
        """Whether this server may delete lowkiq's keys when full."""
        return self.policy is not None and self.policy != SAFE_POLICY

    @property
    def full(self) -> bool:
        """Whether Redis refuses writes that may grow memory (used above ``maxmemory``)."""
        return self.maxmemory > 0 and self.used >= self.maxmemory


@dataclass(frozen=True)
class MemoryReport:
    """The memory of every server of a client (each master of a Redis Cluster)."""

    nodes: list[NodeMemory] = field(default_factory=list)

    @property
    def eviction(self) -> str | None:
        """What is wrong with the policies (:func:`eviction_problem`), or ``None``."""
        return eviction_problem([NodePolicy(n.node, n.policy) for n in self.nodes])

    @property
    def full(self) -> str | None:
        """``Redis is full (maxmemory …)`` naming each full server, or ``None``."""
        full = [n for n in self.nodes if n.full]
        if not full:
            return None
        named = ", ".join(
            f"maxmemory {_size(n.maxmemory)}, used {_size(n.used)} on {n.node}" for n in full
        )
        return (
            f"Redis is full ({named}): it refuses new jobs; workers drain it (free memory or "
            "raise maxmemory)"
        )

    @property
    def evicted_keys(self) -> int:
        """Keys evicted since each server started, summed."""
        return sum(n.evicted_keys for n in self.nodes)

    def document(self, allow_eviction: bool) -> dict[str, Any]:
        """A JSON-ready summary: each server's policy and memory, the problems, the
        setting."""
        return {
            "policies": {n.node: n.policy for n in self.nodes},
            "allow_eviction": allow_eviction,
            "eviction": self.eviction,
            "full": self.full,
            "nodes": [
                {
                    "node": n.node,
                    "policy": n.policy,
                    "used_memory": n.used,
                    "maxmemory": n.maxmemory,
                    "evicted_keys": n.evicted_keys,
                }
                for n in self.nodes
            ],
        }


def _node_memory(name: str, client: redis.Redis) -> NodeMemory:
    """One server's :class:`NodeMemory`: ``INFO memory`` and ``INFO stats`` in one round
    trip; the policy by ``CONFIG GET`` where ``INFO`` lacks it."""
    pipe: Any = redis.Redis.pipeline(client, transaction=False)
    pipe.info("memory")
    pipe.info("stats")
    memory, stats = pipe.execute()
    policy = memory.get("maxmemory_policy")
    used = int(memory.get("used_memory", 0)) - int(memory.get("mem_not_counted_for_evict", 0))
    return NodeMemory(
        node=name,
        policy=str(policy) if policy is not None else _policy_of(client),
        used=used,
        maxmemory=int(memory.get("maxmemory", 0)),
        evicted_keys=int(stats.get("evicted_keys", 0)),
    )


def read_memory(client: Client) -> MemoryReport:
    """The :class:`MemoryReport` of the server, or of every master of a Redis Cluster that
    answers (a master that does not is left out, and the slot map reloaded, so that its
    replica is read once it took over; the others' policies still count).

    Raises ``redis.ConnectionError`` when the server, or every master, cannot be
    reached, and ``redis.ResponseError`` when ``INFO`` is refused.
    """
    cluster = getattr(client, "topology", client)  # a processing thread's cluster client
    if not isinstance(cluster, redis.RedisCluster):
        assert isinstance(client, redis.Redis)
        return MemoryReport([_node_memory(_node_name(client), client)])
    found: list[NodeMemory] = []
    failed: Exception | None = None
    try:
        masters = cluster.get_primaries()  # type: ignore[no-untyped-call]
    except RedisClusterException as exc:
        raise redis.ConnectionError(str(exc)) from exc
    for node in masters:
        try:
            found.append(_node_memory(node.name, node.redis_connection))
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            failed = exc
    if failed is not None:
        with contextlib.suppress(RedisClusterException, redis.RedisError):
            cluster.nodes_manager.initialize()
        if not found:
            raise redis.ConnectionError(f"no master answered: {failed}") from failed
    return MemoryReport(found)
