"""Each event loop's own ``redis.asyncio`` client, made lazily from lowkiq's settings.

A ``redis.asyncio`` connection belongs to the event loop that opened it, and a
forked child must not talk on its parent's sockets: :func:`async_client` keeps one
:class:`AsyncRedis` per running loop and process, made on the loop's first call and
made again when ``lowkiq.settings.redis`` (or the pool's settings) changed.  It talks
to the server, or the Redis Cluster, of ``lowkiq.settings.client()``: same address,
credentials, TLS and timeouts, as ``redis.asyncio`` (a ``redis.asyncio.cluster
.RedisCluster`` for a cluster), with a blocking pool of ``settings.client_pool_size``
connections that waits ``settings.pool_timeout`` seconds for a free one.

The first call on a loop takes the process's synchronous client (made, if it is not
yet, on a thread of its own: a cluster client reads the slot map as it is made) to
learn the address and connection settings, never blocking the loop.
:func:`close_async_client` closes the running loop's client (an app's
shutdown; a loop that ends without it leaves its sockets to the garbage collector).

:func:`pipelined` sends commands in one write on a pooled connection, packed by
hiredis as :func:`lowkiq.clients.connection.pipelined` does on the synchronous side.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import threading
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

import redis
import redis.asyncio as aioredis
from redis.asyncio.cluster import ClusterNode
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import NoBackoff
from redis.exceptions import ExecAbortError, ResponseError

from lowkiq.clients.connection import Client, pack_chunks
from lowkiq.settings import Settings, settings
from lowkiq.storage.layout import Layout

T = TypeVar("T")

#: Connection settings that mean the same to ``redis`` and ``redis.asyncio`` (a
#: synchronous client's others, e.g. redis-py 6's maintenance handlers, are its own).
PORTABLE_KWARGS = frozenset(
    {
        "host",
        "port",
        "db",
        "path",
        "username",
        "password",
        "credential_provider",
        "client_name",
        "lib_name",
        "lib_version",
        "protocol",
        "socket_timeout",
        "socket_connect_timeout",
        "socket_keepalive",
        "socket_keepalive_options",
        "retry_on_timeout",
        "retry_on_error",
        "health_check_interval",
        "encoding",
        "encoding_errors",
        "ssl_keyfile",
        "ssl_certfile",
        "ssl_cert_reqs",
        "ssl_ca_certs",
        "ssl_ca_data",
        "ssl_check_hostname",
        "ssl_min_version",
        "ssl_ciphers",
    }
)


@dataclass(eq=False)
class AsyncRedis:
    """One event loop's connections to lowkiq's Redis (see the module).

    On a Redis Cluster, :attr:`client` routes commands by key, and :meth:`master`
    gives a plain client of one master, on which lowkiq pipelines the script calls
    of the shards that master serves (one write per master, as the synchronous
    push does).
    """

    #: A ``redis.asyncio.Redis``, or a ``redis.asyncio.cluster.RedisCluster``.
    client: Any
    #: Whether :attr:`client` is a Redis Cluster's.
    cluster: bool
    #: What the client was made from (``settings.redis``, pool size, pool timeout).
    made_from: tuple[Any, ...] = ()
    #: Queue name -> (its layout, ``loop.time()`` when read); see :mod:`lowkiq.aio.push`.
    layouts: dict[str, tuple[Layout, float]] = field(default_factory=dict)
    #: Redis's ``proto-max-bulk-len`` once read (:func:`lowkiq.aio.push.bulk_len`).
    bulk_len: int | None = None
    #: ``(loop.time() when read, what is wrong)`` of the maxmemory policy.
    policy: tuple[float, str | None] | None = None
    _masters: dict[str, aioredis.Redis] = field(default_factory=dict)

    def master(self, node: ClusterNode) -> aioredis.Redis:
        """A client of the cluster master ``node`` (made on first use, one pool each)."""
        found = self._masters.get(node.name)
        if found is None:
            pool = aioredis.ConnectionPool(
                connection_class=node.connection_class, **node.connection_kwargs
            )
            found = self._masters[node.name] = aioredis.Redis(connection_pool=pool)
        return found

    def master_of(self, key: str) -> tuple[str, aioredis.Redis]:
        """The name and client of the master serving ``key``'s slot."""
        node = self.client.get_node_from_key(key)
        return node.name, self.master(node)

    def servers(self) -> list[tuple[str, aioredis.Redis]]:
        """Every server: the one, or each master of a cluster, named."""
        if not self.cluster:
            return [(describe_async(self.client), self.client)]
        return [(node.name, self.master(node)) for node in self.client.get_primaries()]

    async def reload_slots(self) -> None:
        """Read the cluster's slot map again (a master failed: a replica may have taken
        over)."""
        await self.client.nodes_manager.initialize()

    async def aclose(self) -> None:
        """Close every connection of this client."""
        clients = [self.client, *self._masters.values()]
        self._masters.clear()
        for client in clients:
            await _close(client)


async def _close(client: Any) -> None:
    """Close a ``redis.asyncio`` client (``aclose`` from redis-py 5.0.1, ``close`` before)."""
    close = getattr(client, "aclose", None) or client.close
    await close()


def describe_async(client: aioredis.Redis) -> str:
    """``host:port`` (or the socket path) of a ``redis.asyncio.Redis``, for messages."""
    kwargs = client.connection_pool.connection_kwargs
    if kwargs.get("path"):
        return str(kwargs["path"])
    return f"{kwargs.get('host', 'localhost')}:{kwargs.get('port', 6379)}"


# loop -> (pid, the client): a loop's client is its own, and a forked child's is new.
_BY_LOOP: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, tuple[int, AsyncRedis]] = (
    weakref.WeakKeyDictionary()
)


async def async_client(config: Settings | None = None) -> AsyncRedis:
    """The running loop's client of ``config``'s Redis (default: ``lowkiq.settings``),
    made on the loop's first call in this process (see the module)."""
    config = settings if config is None else config
    loop = asyncio.get_running_loop()
    made_from = (config.redis, config.client_pool_size, config.pool_timeout)
    known = _BY_LOOP.get(loop)
    if known is not None and known[0] == os.getpid():
        if known[1].made_from == made_from:
            return known[1]
        await known[1].aclose()  # the settings changed
    template = await _on_own_thread(config.client)
    made = await from_sync(template, config.client_pool_size, config.pool_timeout)
    made.made_from = made_from
    again = _BY_LOOP.get(loop)
    if again is not None and again[0] == os.getpid() and again[1].made_from == made_from:
        await made.aclose()  # another task of this loop made one meanwhile
        return again[1]
    _BY_LOOP[loop] = (os.getpid(), made)
    return made


async def _on_own_thread(make: Callable[[], T]) -> T:
    """``make()`` run on a thread of its own, awaited.  Not the loop's default executor:
    in a child forked from a process whose executor had threads, that executor counts
    threads the child does not have, and would never run it."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[T] = loop.create_future()

    def settle(result: T | None, error: BaseException | None) -> None:
        if done.cancelled():
            return
        if error is not None:
            done.set_exception(error)
        else:
            done.set_result(cast(T, result))

    def run() -> None:
        try:
            result = make()
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiting task
            loop.call_soon_threadsafe(settle, None, exc)
        else:
            loop.call_soon_threadsafe(settle, result, None)

    threading.Thread(target=run, name="lowkiq-async-client", daemon=True).start()
    return await done


async def close_async_client() -> None:
    """Close the running loop's client, if it has one; the next call makes a new one."""
    known = _BY_LOOP.pop(asyncio.get_running_loop(), None)
    if known is not None and known[0] == os.getpid():
        await known[1].aclose()


async def from_sync(template: Client, pool_size: int, pool_timeout: float) -> AsyncRedis:
    """An :class:`AsyncRedis` talking to the server or cluster of ``template`` with its
    connection settings (a cluster's slot map read)."""
    if isinstance(template, redis.RedisCluster):
        cluster: Any = template  # parts of redis-py's cluster client are untyped
        given = cluster.get_connection_kwargs()
        kwargs = _portable(given, AsyncRedisCluster)
        given_class = given.get("connection_class")
        if isinstance(given_class, type) and issubclass(given_class, redis.SSLConnection):
            kwargs["ssl"] = True
        nodes = [ClusterNode(node.host, node.port) for node in cluster.get_nodes()]
        client = AsyncRedisCluster(
            startup_nodes=nodes, max_connections=pool_size, decode_responses=False, **kwargs
        )
        await client.initialize()
        return AsyncRedis(client, cluster=True)
    pool = template.connection_pool
    connection_class: type[aioredis.Connection] | type[aioredis.UnixDomainSocketConnection]
    if issubclass(pool.connection_class, redis.SSLConnection):
        connection_class = aioredis.SSLConnection
    elif issubclass(pool.connection_class, redis.UnixDomainSocketConnection):
        connection_class = aioredis.UnixDomainSocketConnection
    else:
        connection_class = aioredis.Connection
    blocking = aioredis.BlockingConnectionPool(
        connection_class=connection_class,
        max_connections=pool_size,
        timeout=pool_timeout,
        decode_responses=False,
        **_portable(pool.connection_kwargs, connection_class),
    )
    return AsyncRedis(aioredis.Redis(connection_pool=blocking), cluster=False)


def _portable(kwargs: dict[str, Any], target: type) -> dict[str, Any]:
    """The connection settings of ``kwargs`` that ``target`` takes, a synchronous
    ``retry`` as ``redis.asyncio``'s (same backoff and number of retries)."""
    accepted = _parameters(target)
    kept = {
        name: value
        for name, value in kwargs.items()
        if name in PORTABLE_KWARGS and name in accepted and value is not None
    }
    retry = kwargs.get("retry")
    if retry is not None and "retry" in accepted:
        backoff = getattr(retry, "_backoff", None) or NoBackoff()
        kept["retry"] = AsyncRetry(backoff, int(getattr(retry, "_retries", 0)))
    return kept


def _parameters(target: type) -> set[str]:
    """The keyword arguments ``target``'s ``__init__`` (and its bases') name."""
    names: set[str] = set()
    for base in target.__mro__:
        init = vars(base).get("__init__")
        if init is not None:
            names |= set(inspect.signature(init).parameters)
    return names


async def pipelined(
    client: aioredis.Redis, commands: Sequence[tuple[Any, ...]], transaction: bool
) -> list[Any]:
    """Send ``commands`` in one write on a pooled connection of ``client`` and read their
    replies (an error reply in its place), with the connection's retries.
    ``transaction``: in one ``MULTI``; a command Redis refuses to queue is raised.
    A call cancelled mid-way drops its connection (replies may be left unread)."""
    pool = client.connection_pool
    connection = await _pooled(pool)
    try:
        if transaction:
            commands = [("MULTI",), *commands, ("EXEC",)]
        packed = [
            b"".join(chunk for command in commands for chunk in pack_chunks(connection, command))
        ]

        async def exchange() -> list[Any]:
            await connection.send_packed_command(packed)
            return [await _read_reply(connection) for _ in commands]

        async def failed(error: Exception) -> None:
            await connection.disconnect()

        replies: list[Any] = await connection.retry.call_with_retry(exchange, failed)
    except BaseException:
        await asyncio.shield(connection.disconnect())
        raise
    finally:
        await pool.release(connection)
    if not transaction:
        return replies
    executed = replies[-1]
    if isinstance(executed, ExecAbortError):  # the first refusal (MULTI's, a command's)
        raise next(reply for reply in replies if isinstance(reply, Exception))
    if isinstance(executed, Exception):
        raise executed
    return list(executed)


async def _pooled(pool: Any) -> Any:
    """A connection of ``pool``."""
    try:
        return await pool.get_connection()
    except TypeError:  # redis-py before 5.3 wants a command name
        return await pool.get_connection("MULTI")


async def _read_reply(connection: Any) -> Any:
    """The next reply on ``connection``; an error reply as its exception."""
    try:
        return await connection.read_response()
    except ResponseError as exc:
        return exc
