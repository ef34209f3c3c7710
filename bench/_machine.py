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


def processed(client: Client, queue_name: str, shards: int) -> int:
    """Jobs of the queue processed so far: its shards' counters, in one round trip."""
    keys = QueueKeys(queue_name)
    pipe = client.pipeline(transaction=False)
    for shard in range(shards):
        pipe.get(keys.processed_counter(shard))
    return sum(int(count or 0) for count in pipe.execute())


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
