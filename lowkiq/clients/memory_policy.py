"""Redis's ``maxmemory-policy``: lowkiq needs ``noeviction``.

Under any other policy a full Redis deletes keys to make room: queued jobs
vanish (``allkeys-*``), or leases, whose keys expire, are evicted early and
their shards change hands again and again (``volatile-*``).  A worker refuses to
start on such a server unless ``settings.allow_eviction`` is true; the dashboard
shows a red banner.  The policy is read with ``CONFIG GET``, or from ``INFO
memory`` where a managed Redis forbids ``CONFIG``; on a Redis Cluster, from every
master.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
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
