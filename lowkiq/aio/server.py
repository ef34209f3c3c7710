"""What an enqueue on ``redis.asyncio`` reads of Redis besides its pushes, each kept on
the loop's client as the synchronous side keeps it on its own: a queue's layout (read
again after :data:`lowkiq.storage.layout.MAX_AGE` seconds), Redis's
``proto-max-bulk-len`` (read once, only for a payload too large for any Redis), and
whether a server evicts keys (read again after
:data:`lowkiq.clients.memory_policy.RECHECK_SECONDS` seconds)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import redis
from redis.exceptions import RedisClusterException

from lowkiq.aio.client import AsyncRedis
from lowkiq.clients.memory_policy import RECHECK_SECONDS, NodePolicy, eviction_problem
from lowkiq.errors import is_out_of_memory
from lowkiq.storage import layout as layouts
from lowkiq.storage.enqueueing import DEFAULT_BULK_LEN
from lowkiq.storage.keys import QueueKeys
from lowkiq.storage.layout import Layout


async def read_layout(redis_: AsyncRedis, name: str, default_count: int) -> Layout:
    """The queue's layout now, from Redis, kept for :func:`cached_layout`.  A queue with
    no layout gets its class's written (base 0), as
    :func:`lowkiq.storage.layout.read_many` does; on a full Redis, which refuses that
    write, the class's layout is used and not kept."""
    client = redis_.client
    key = QueueKeys(name).layout_hash
    fields = await client.hgetall(key)
    if b"count" not in fields:
        try:
            await client.hsetnx(key, "base", 0)
            await client.hsetnx(key, "count", default_count)
        except redis.ResponseError as exc:
            if not is_out_of_memory(exc):
                raise
            return Layout(0, default_count)
        fields = await client.hgetall(key)
    layout = layouts.parse(fields)
    redis_.layouts[name] = (layout, asyncio.get_running_loop().time())
    return layout


async def cached_layout(redis_: AsyncRedis, name: str, default_count: int) -> Layout:
    """The queue's layout, read again when the one known is older than
    :data:`~lowkiq.storage.layout.MAX_AGE` (the known one kept while Redis cannot say:
    a stale layout is safe for an enqueue, whose push refuses a retired shard)."""
    known = redis_.layouts.get(name)
    if known is not None and asyncio.get_running_loop().time() - known[1] < layouts.MAX_AGE:
        return known[0]
    try:
        return await read_layout(redis_, name, default_count)
    except (redis.RedisError, RedisClusterException):
        if known is None:
            raise
        return known[0]


async def bulk_len(redis_: AsyncRedis) -> int:
    """Redis's ``proto-max-bulk-len`` (the smallest of a cluster's masters), read once;
    :data:`~lowkiq.storage.enqueueing.DEFAULT_BULK_LEN` where ``CONFIG`` is refused."""
    if redis_.bulk_len is None:
        found: list[int] = []
        for _, server in redis_.servers():
            try:
                reply: Any = await server.config_get("proto-max-bulk-len")
            except redis.ResponseError:  # NOPERM, or CONFIG renamed (managed Redis)
                continue
            found += [int(v) for k, v in reply.items() if _text(k) == "proto-max-bulk-len"]
        redis_.bulk_len = min(found, default=DEFAULT_BULK_LEN)
    return redis_.bulk_len


async def eviction(redis_: AsyncRedis) -> str | None:
    """What is wrong with the servers' ``maxmemory-policy`` for lowkiq, or ``None``
    (see :mod:`lowkiq.clients.memory_policy`); read at most every
    :data:`~lowkiq.clients.memory_policy.RECHECK_SECONDS` per client.  A cluster master
    that does not answer is left out (its replica is read once it took over); none
    answering raises ``redis.ConnectionError``."""
    now = asyncio.get_running_loop().time()
    if redis_.policy is not None and now - redis_.policy[0] < RECHECK_SECONDS:
        return redis_.policy[1]
    found: list[NodePolicy] = []
    failed: Exception | None = None
    for name, server in redis_.servers():
        try:
            found.append(NodePolicy(name, await _policy(server)))
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            failed = exc  # a master that does not answer is left out, as on the sync side
    if failed is not None:
        if redis_.cluster:
            with contextlib.suppress(redis.RedisError, RedisClusterException):
                await redis_.reload_slots()
        if not found:
            raise redis.ConnectionError(f"no server answered: {failed}") from failed
    problem = eviction_problem(found)
    redis_.policy = (now, problem)
    return problem


async def _policy(server: Any) -> str | None:
    """One server's policy: ``INFO memory``, else ``CONFIG GET``, else ``None``."""
    try:
        found = (await server.info("memory")).get("maxmemory_policy")
        if found is not None:
            return str(found)
    except redis.ResponseError:
        pass
    try:
        reply = await server.config_get("maxmemory-policy")
    except redis.ResponseError:
        return None
    value = reply.get("maxmemory-policy") or reply.get(b"maxmemory-policy")
    return None if value is None else _text(value)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
