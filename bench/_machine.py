"""The one-line machine description the benchmarks print."""

from __future__ import annotations

import os
import platform
from typing import Any

import redis

from lowkiq.clients.connection import Client, pipelined, pipelined_apart
from lowkiq.storage.keys import QueueKeys


def machine() -> str:
    """CPU architecture, core count and Python version."""
    return (
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    )


def processed(client: Client, queue_name: str, shards: int) -> int:
    """Jobs of the queue processed so far: its shards' counters, in one round trip (on a
    cluster, one per master at once: redis-py's cluster pipeline would ask the cluster
    for every command's keys, and the benchmarks poll this often)."""
    keys = [QueueKeys(queue_name).processed_counter(shard) for shard in range(shards)]
    if isinstance(client, redis.RedisCluster):
        by_master: dict[str, tuple[redis.Redis, list[tuple[str, str]]]] = {}
        for key in keys:
            node = client.get_node_from_key(key)
            by_master.setdefault(node.name, (node.redis_connection, []))[1].append(("GET", key))
        replies: list[Any] = []
        for outcome in pipelined_apart(list(by_master.values())):
            if isinstance(outcome, Exception):
                raise outcome
            replies += outcome
    else:
        replies = pipelined(client, [("GET", key) for key in keys], transaction=False)
    return sum(int(count or 0) for count in replies)


def flush(client: Client) -> None:
    """Empty the server, or every master of a cluster."""
    if isinstance(client, redis.RedisCluster):
        client.flushall(target_nodes=redis.RedisCluster.PRIMARIES)
    else:
        client.flushall()


def redis_cpu(client: Client) -> float:
    """CPU seconds used so far by the Redis server, or by every master of a cluster."""
    if isinstance(client, redis.RedisCluster):
        infos = [client.info("cpu", target_nodes=node) for node in client.get_primaries()]
    else:
        infos = [client.info("cpu")]
    return sum(info["used_cpu_sys"] + info["used_cpu_user"] for info in infos)
