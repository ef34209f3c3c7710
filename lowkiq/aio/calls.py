"""lowkiq's Lua scripts called on ``redis.asyncio``: the very functions and text the
synchronous side sends (:mod:`lowkiq.storage.functions`,
:func:`lowkiq.storage.scripts.source`), by ``FCALL`` (Redis 7 and later) or ``EVALSHA``,
in one write per server.

On a single server the calls go in one write (in one ``MULTI`` when asked); on a Redis
Cluster in one write per master, every write sent before any reply is awaited
(:func:`asyncio.gather`), as :func:`lowkiq.storage.scripts.run_on_masters` does.  A
library or script the server lacks (restarted, flushed) is loaded and its calls run
again.  A client's first call asks its servers' versions: before Redis 7, ``EVALSHA``
only; a server refusing the functions (full), or without them after all (``FCALL`` an
unknown command), gets ``EVALSHA`` too (see :class:`~lowkiq.storage.functions.CallMode`;
one per client and ``track_length``).  On a cluster a call redirected (``MOVED``,
``ASK``) or put off (``TRYAGAIN``), which did not run, runs again alone through the
cluster client, which follows it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis
from redis.exceptions import (
    AskError,
    NoScriptError,
    OutOfMemoryError,
    RedisClusterException,
    TryAgainError,
)

from lowkiq.aio.client import AsyncRedis, pipelined
from lowkiq.storage.functions import (
    UNKNOWN_COMMAND,
    CallMode,
    is_lost,
    library_refused,
    library_to_load,
)
from lowkiq.storage.scripts import ALLOW_OOM, FUNCTIONS, source, usable_library


@dataclass(frozen=True)
class LuaScript:
    """One of lowkiq's scripts as sent to Redis: its text and its SHA1."""

    name: str
    text: str
    sha: str
    #: ``Worker.track_length`` its events are capped at (0: not recorded).
    track_length: int = 0

    @classmethod
    @functools.cache
    def named(cls, name: str, track_length: int = 0) -> LuaScript:
        """The script ``lua/<name>.lua`` (recording job events with ``track_length``).
        Only scripts whose text does not depend on the server's version (not
        :data:`~lowkiq.storage.scripts.ALLOW_OOM`'s)."""
        if name in ALLOW_OOM:
            raise ValueError(f"{name}.lua depends on the server's version")
        text = source(name, track_length)
        return cls(name, text, hashlib.sha1(text.encode()).hexdigest(), track_length)


#: One call: the script, its key (a shard's prefix), its arguments.
Call = tuple[LuaScript, str, Sequence[Any]]


class _Modes(dict[int, CallMode]):
    """One client's call modes, per ``track_length``."""

    def __init__(self, functions: bool) -> None:
        super().__init__()
        #: Whether every server of the client is Redis 7 or later.
        self.functions = functions


#: Per client: how its calls go (FCALL or EVALSHA).
_MODES: weakref.WeakKeyDictionary[AsyncRedis, _Modes] = weakref.WeakKeyDictionary()


async def _modes(redis_: AsyncRedis) -> _Modes:
    """The client's modes; the first call asks every server's version (``INFO server``,
    once per client, as the synchronous side does)."""
    modes = _MODES.get(redis_)
    if modes is None:
        modes = _MODES.setdefault(redis_, _Modes(FUNCTIONS and await _functions(redis_)))
    return modes


async def _functions(redis_: AsyncRedis) -> bool:
    """Whether every server of ``redis_`` is Redis 7 or later (``False`` when a version
    cannot be read)."""
    try:
        for _, server in redis_.servers():
            version = str((await server.info("server")).get("redis_version", ""))
            if not version.split(".", 1)[0].isdigit() or int(version.split(".", 1)[0]) < 7:
                return False
    except (redis.RedisError, RedisClusterException):
        return False
    return True


def _mode(modes: _Modes, script: LuaScript) -> CallMode:
    mode = modes.get(script.track_length)
    if mode is None:
        library_ = usable_library(script.track_length) if modes.functions else None
        mode = modes[script.track_length] = CallMode(library_)
    return mode


def _command(mode: CallMode, call: Call) -> tuple[Any, ...]:
    script, key, args = call
    if mode.library is not None and mode.by_function():
        return ("FCALL", mode.library.function(script.name), 1, key, *args)
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
    modes = await _modes(redis_)
    if not redis_.cluster:
        return await _on_server(redis_.client, modes, calls, transaction)
    by_master: dict[str, tuple[Any, list[int]]] = {}
    for index, (_, key, _) in enumerate(calls):
        name, client = redis_.master_of(key)
        by_master.setdefault(name, (client, []))[1].append(index)
    outcomes = await asyncio.gather(
        *(
            _on_master(redis_, modes, client, [calls[i] for i in indexes])
            for client, indexes in by_master.values()
        )
    )
    replies: list[Any] = [None] * len(calls)
    for (_, indexes), outcome in zip(by_master.values(), outcomes, strict=True):
        for n, index in enumerate(indexes):
            replies[index] = outcome if isinstance(outcome, Exception) else outcome[n]
    return replies


async def _on_server(
    client: Any, modes: _Modes, calls: Sequence[Call], transaction: bool
) -> list[Any]:
    """The calls in one write on one server; what the lost calls lacked loaded, and
    those calls again."""
    commands = [_command(_mode(modes, call[0]), call) for call in calls]
    try:
        replies = await pipelined(client, commands, transaction)
    except redis.ResponseError as exc:
        # A MULTI Redis refused as it was queued (nothing ran): Redis 6 knows no FCALL; a
        # full Redis refuses a function without allow-oom.  Then by EVALSHA (refused
        # only at a growing write).
        if not transaction or not any(command[0] == "FCALL" for command in commands):
            raise
        if str(exc).startswith(UNKNOWN_COMMAND):
            seconds = float("inf")
        elif isinstance(exc, OutOfMemoryError):
            seconds = None
        else:
            raise
        for call in calls:
            _mode(modes, call[0]).refused(seconds)
        commands = [_command(_mode(modes, call[0]), call) for call in calls]
        replies = await pipelined(client, commands, transaction)
    missing = [i for i, r in enumerate(replies) if is_lost(r, commands[i][0] == "FCALL")]
    if missing:
        await _load(client, modes, [(calls[i][0], replies[i]) for i in missing])
        again = [_command(_mode(modes, calls[i][0]), calls[i]) for i in missing]
        for i, reply in zip(missing, await pipelined(client, again, transaction), strict=True):
            replies[i] = reply
    return replies


async def _load(client: Any, modes: _Modes, lost: list[tuple[LuaScript, Any]]) -> None:
    """Load on one server what the lost calls, each with its reply, lacked: a mode's
    library once, or each script's text once (see
    :func:`lowkiq.storage.functions.library_to_load`)."""
    libraries: set[int] = set()
    texts: set[str] = set()
    for script, reply in lost:
        mode = _mode(modes, script)
        if id(mode) in libraries and mode.by_function():
            continue
        text = library_to_load(mode, reply) if mode.by_function() else None
        if text is not None:
            try:
                await client.execute_command("FUNCTION LOAD", text)
                libraries.add(id(mode))
                continue
            except redis.ResponseError as exc:
                if not library_refused(mode, exc):
                    libraries.add(id(mode))
                    continue
        if script.text not in texts:
            texts.add(script.text)
            await client.script_load(script.text)


async def _on_master(
    redis_: AsyncRedis, modes: _Modes, client: Any, calls: list[Call]
) -> list[Any] | redis.RedisError:
    """The calls on one cluster master (see :func:`run_calls`)."""
    try:
        replies = await _on_server(client, modes, calls, False)
    except redis.RedisError as exc:
        return exc
    for i, reply in enumerate(replies):
        if isinstance(reply, (AskError, TryAgainError)):  # MovedError is an AskError
            replies[i] = await _redirected(redis_, calls[i])
    return replies


async def _redirected(redis_: AsyncRedis, call: Call) -> Any:
    """The reply of a call run alone through the cluster client (it follows ``MOVED`` and
    ``ASK``, and retries ``TRYAGAIN``), or its error.  By ``EVALSHA``, which the cluster
    client routes by its key without asking a server; a script the master it reached
    lacks (an ``ASK``'s target, or a master that had only the functions) is loaded on
    every master that answers first."""
    cluster = redis_.client
    command = ("EVALSHA", call[0].sha, 1, call[1], *call[2])
    try:
        try:
            return await cluster.execute_command(*command)
        except NoScriptError:
            for node in cluster.get_primaries():
                with contextlib.suppress(redis.RedisError, RedisClusterException):
                    await cluster.execute_command("SCRIPT LOAD", call[0].text, target_nodes=node)
            return await cluster.execute_command(*command)
    except (redis.RedisError, RedisClusterException) as exc:
        return exc


async def script_call(
    redis_: AsyncRedis, script: LuaScript, key: str, args: Sequence[Any]
) -> tuple[Any, ...]:
    """The command of one call of ``script`` on ``redis_``: ``FCALL`` or ``EVALSHA``."""
    return _command(_mode(await _modes(redis_), script), (script, key, args))


async def load_lost(server: Any, redis_: AsyncRedis, script: LuaScript, reply: Any) -> None:
    """Load on ``server`` what a call of ``script`` that got ``reply`` (lost: see
    :func:`lowkiq.storage.functions.is_lost`) lacked."""
    await _load(server, await _modes(redis_), [(script, reply)])
