"""The one-line machine description the benchmarks print."""

from __future__ import annotations

import os
import platform

import redis

from lowkiq.connection import Client
from lowkiq.storage.keys import QueueKeys


def machine() -> str:
    """CPU architecture, core count and Python version."""
    return (
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    )


def processed(client: redis.Redis, queue_name: str, shards: int) -> int:
    """Jobs of the queue processed so far: its shards' counters, in one round trip."""
    keys = QueueKeys(queue_name)
    counts = client.mget([keys.processed_counter(shard) for shard in range(shards)])
    return sum(int(count or 0) for count in counts)


def redis_cpu(client: Client) -> float:
    """CPU seconds used so far by the Redis server, or by every master of a cluster."""
    if isinstance(client, redis.RedisCluster):
        infos = [client.info("cpu", target_nodes=node) for node in client.get_primaries()]
    else:
        infos = [client.info("cpu")]
    return sum(info["used_cpu_sys"] + info["used_cpu_user"] for info in infos)
