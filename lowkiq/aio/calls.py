"""lowkiq's Lua scripts called on ``redis.asyncio``: the very text the synchronous side
sends (:func:`lowkiq.storage.scripts.source`), by ``EVALSHA``, in one write per server.

On a single server the calls go in one write (in one ``MULTI`` when asked); on a Redis
Cluster in one write per master, every write sent before any reply is awaited
(:func:`asyncio.gather`), as :func:`lowkiq.storage.scripts.run_on_masters` does.  A
script the server lost (``NOSCRIPT``: restarted, flushed) is loaded and its calls run
again; on a cluster a call redirected (``MOVED``, ``ASK``) or put off (``TRYAGAIN``),
which did not run, runs again alone through the cluster client, which follows it.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis
from redis.exceptions import AskError, NoScriptError, RedisClusterException, TryAgainError

from lowkiq.aio.client import AsyncRedis, pipelined
from lowkiq.storage.scripts import ALLOW_OOM, source


@dataclass(frozen=True)
class LuaScript:
    """One of lowkiq's scripts as sent to Redis: its text and its SHA1."""

    name: str
    text: str
    sha: str

    @classmethod
    @functools.cache
    def named(cls, name: str, track_length: int = 0) -> LuaScript:
        """The script ``lua/<name>.lua`` (recording job events with ``track_length``).
        Only scripts whose text does not depend on the server's version (not
        :data:`~lowkiq.storage.scripts.ALLOW_OOM`'s)."""
        if name in ALLOW_OOM:
            raise ValueError(f"{name}.lua depends on the server's version")
        text = source(name, track_length)
        return cls(name, text, hashlib.sha1(text.encode()).hexdigest())


#: One call: the script, its key (a shard's prefix), its arguments.
Call = tuple[LuaScript, str, Sequence[Any]]


def _command(call: Call) -> tuple[Any, ...]:
    script, key, args = call
    return ("EVALSHA", script.sha, 1, key, *args)


async def run_calls(
    redis_: AsyncRedis, calls: Sequence[Call], transaction: bool = False
) -> list[Any]:
    """The replies of ``calls``, in order, an error reply as its exception (not raised).

    On a single server, in one write (``transaction``: in one ``MULTI``); a failed
    connection raises.  On a cluster, one write per master; a master whose connection
    failed gives its error as the reply of each of its calls (which of them ran is not
    known).
    """
    if not redis_.cluster:
        return await _on_server(redis_.client, calls, transaction)
    by_master: dict[str, tuple[Any, list[int]]] = {}
    for index, (_, key, _) in enumerate(calls):
        name, client = redis_.master_of(key)
        by_master.setdefault(name, (client, []))[1].append(index)
    outcomes = await asyncio.gather(
        *(
            _on_master(redis_, client, [calls[i] for i in indexes])
            for client, indexes in by_master.values()
        )
    )
    replies: list[Any] = [None] * len(calls)
    for (_, indexes), outcome in zip(by_master.values(), outcomes, strict=True):
        for n, index in enumerate(indexes):
            replies[index] = outcome if isinstance(outcome, Exception) else outcome[n]
    return replies


async def _on_server(client: Any, calls: Sequence[Call], transaction: bool) -> list[Any]:
    """The calls in one write on one server; the lost scripts loaded, their calls again."""
    commands = [_command(call) for call in calls]
    replies = await pipelined(client, commands, transaction)
    missing = [i for i, reply in enumerate(replies) if isinstance(reply, NoScriptError)]
    if missing:
        for text in {calls[i][0].text for i in missing}:
            await client.script_load(text)
        again = await pipelined(client, [commands[i] for i in missing], transaction)
        for i, reply in zip(missing, again, strict=True):
            replies[i] = reply
    return replies


async def _on_master(
    redis_: AsyncRedis, client: Any, calls: list[Call]
) -> list[Any] | redis.RedisError:
    """The calls on one cluster master (see :func:`run_calls`)."""
    try:
        replies = await _on_server(client, calls, False)
    except redis.RedisError as exc:
        return exc
    for i, reply in enumerate(replies):
        if isinstance(reply, (AskError, TryAgainError)):  # MovedError is an AskError
            replies[i] = await _redirected(redis_, calls[i])
    return replies


async def _redirected(redis_: AsyncRedis, call: Call) -> Any:
    """The reply of a call run alone through the cluster client (it follows ``MOVED`` and
    ``ASK``, and retries ``TRYAGAIN``), or its error; a lost script loaded first."""
    cluster = redis_.client
    try:
        try:
            return await cluster.execute_command(*_command(call))
        except NoScriptError:
            node = cluster.get_node_from_key(call[1])
            await cluster.execute_command("SCRIPT LOAD", call[0].text, target_nodes=node)
            return await cluster.execute_command(*_command(call))
    except (redis.RedisError, RedisClusterException) as exc:
        return exc
