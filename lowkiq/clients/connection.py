"""Connections to Redis shared by every part of lowkiq: the client type, a client from
a URL, pipelined commands on a pooled connection, and how a server is named in logs.

The processing threads' own client is :mod:`lowkiq.clients.thread`; storage, ownership
and the dashboard use only this module.

Besides the client API this relies on a connection pool's ``get_connection()`` and
``release()``, on a connection's ``send_packed_command``, ``read_response``, ``retry``
and ``disconnect``: stable from redis-py 5.0 to 8.x (but for ``get_connection``'s
argument), the range pyproject.toml allows and ``.ci/run`` tests (its lowest and newest).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NoReturn
from urllib.parse import urlsplit

import redis
from redis.commands.core import Script
from redis.connection import parse_url
from redis.exceptions import ExecAbortError, ResponseError

from lowkiq.errors import ConfigurationError

_hiredis_pack: Any
try:
    from hiredis import pack_command as _hiredis_pack
except ImportError:  # an old hiredis: redis-py packs
    _hiredis_pack = None


def pack_chunks(connection: Any, command: tuple[Any, ...]) -> list[bytes]:
    """A command in the Redis protocol, as chunks: by hiredis's C packer when it has one."""
    if _hiredis_pack is not None:
        return [_hiredis_pack(command)]
    packed: list[bytes] = connection.pack_command(*command)
    return packed


#: A packed command a processing thread's client sends alone or with others in one
#: write (:meth:`lowkiq.clients.thread.ThreadClient.run_keyed`): its first key (a
#: cluster routes it by that), its bytes, and its script when it is an ``EVALSHA``.
KeyedCommand = tuple[Any, bytes, Script | None]


#: A client lowkiq works with: one server, or a Redis Cluster.
Client = redis.Redis | redis.RedisCluster

#: A URL scheme ending with this (``redis+cluster://``, ``rediss+cluster://``) names a
#: node of a Redis Cluster: lowkiq then makes a ``redis.RedisCluster``.
CLUSTER_SUFFIX = "+cluster"


#: The URL schemes lowkiq takes.
URL_SCHEMES = ("redis", "rediss", "unix", f"redis{CLUSTER_SUFFIX}", f"rediss{CLUSTER_SUFFIX}")
_URL_EXAMPLES = (
    "redis://[:password@]host:6379/0, rediss://host:6380/0, unix:///path/redis.sock?db=0, "
    f"redis{CLUSTER_SUFFIX}://host:7000"
)


def check_url(url: str, name: str = "REDIS_URL") -> None:
    """Raise :class:`~lowkiq.errors.ConfigurationError`, in one line naming ``name`` and
    the URL without its password, unless ``url`` is a Redis URL lowkiq can use: a known
    scheme, a port and a database number that are numbers (redis-py would quietly take
    database 0 for ``/abc``), database 0 on a cluster."""
    scheme, sep, rest = url.partition("://")

    def bad(reason: str) -> NoReturn:
        raise ConfigurationError(
            f"{name} {without_password(url)!r} is not a Redis URL: {reason} (e.g. {_URL_EXAMPLES})"
        )

    if not sep:
        bad("it has no scheme")
    if scheme not in URL_SCHEMES:
        bad(f"unknown scheme {scheme + '://'!r}")
    plain = f"{scheme.removesuffix(CLUSTER_SUFFIX)}://{rest}"
    try:
        parts = urlsplit(plain)
        parts.port  # noqa: B018  (raises for a port that is no number, or out of range)
        kwargs = parse_url(plain)  # type: ignore[no-untyped-call]
    except ValueError as exc:
        bad(str(exc).rstrip("."))
    if scheme != "unix":
        path = parts.path.strip("/")
        if path and not path.isdigit():
            bad(f"the database number {path!r} is not a number")
    db = int(kwargs.get("db") or 0)
    if db < 0:
        bad(f"the database number {db} is negative")
    if scheme.endswith(CLUSTER_SUFFIX) and db:
        bad(f"a Redis Cluster has only database 0, not {db}")


def without_password(url: str) -> str:
    """``url`` with its password (or a lone user-info part) replaced by ``***``."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    before_query, question, query = rest.partition("?")
    userinfo, at, after = before_query.rpartition("@")  # a password may hold "/" or "@"
    if not at:
        return url
    user, colon, _ = userinfo.partition(":")
    shown = f"{user}:***" if colon and "/" not in user else "***"
    return f"{scheme}://{shown}@{after}{question}{query}"


def client_from_url(url: str) -> Client:
    """A client of ``url``: a ``redis.RedisCluster`` for ``redis+cluster://host:port``
    (any one node; the client finds the others), else a ``redis.Redis``.  A URL that
    is not one raises :class:`~lowkiq.errors.ConfigurationError` (:func:`check_url`)."""
    check_url(url)
    scheme, sep, rest = url.partition("://")
    if sep and scheme.endswith(CLUSTER_SUFFIX):
        return redis.RedisCluster.from_url(f"{scheme.removesuffix(CLUSTER_SUFFIX)}://{rest}")
    return redis.Redis.from_url(url)


def pipelined(
    client: redis.Redis, commands: Sequence[tuple[Any, ...]], transaction: bool
) -> list[Any]:
    """Send ``commands`` in one write on a connection of ``client``'s pool and read their
    replies (an error reply in its place), as redis-py's pipeline ``execute(raise_on_error=
    False)`` does, with the connection's retries; but packed by hiredis (redis-py looks at
    every argument of a command first, which costs more than the packing of a push).
    ``transaction``: the commands in one ``MULTI``; a command Redis refuses to queue is
    raised."""
    pool = client.connection_pool
    connection = _pooled(pool)
    try:
        if transaction:
            commands = [("MULTI",), *commands, ("EXEC",)]
        packed = _packed(connection, commands)

        def exchange() -> list[Any]:
            connection.send_packed_command(packed)
            return [read_reply(connection) for _ in commands]

        replies: list[Any] = connection.retry.call_with_retry(
            exchange, lambda error: connection.disconnect()
        )
    except BaseException:
        connection.disconnect()  # replies may be left unread
        raise
    finally:
        pool.release(connection)
    if not transaction:
        return replies
    executed = replies[-1]  # EXEC's: the commands' replies
    if isinstance(executed, ExecAbortError):  # the first refusal (MULTI's, a command's)
        raise next(reply for reply in replies if isinstance(reply, Exception))
    if isinstance(executed, Exception):
        raise executed
    return list(executed)


def pipelined_apart(
    batches: Sequence[tuple[redis.Redis, Sequence[tuple[Any, ...]]]],
) -> list[list[Any] | redis.RedisError]:
    """:func:`pipelined` (without transaction) on several clients at once, the masters of
    a Redis Cluster: every client's write is sent before any reply is read, so the
    servers run their commands side by side.  Per client, its replies (an error reply in
    its place) or the error that lost its connection.  No retries (a cluster's node
    clients have none: the cluster's client decides)."""
    outcomes: list[list[Any] | redis.RedisError] = []
    sent: list[tuple[int, Any, int]] = []  # (index, connection, how many replies)
    taken: list[tuple[Any, Any]] = []  # (pool, connection)
    try:
        for index, (client, commands) in enumerate(batches):
            pool = client.connection_pool
            try:
                connection = _pooled(pool)
                taken.append((pool, connection))
                connection.send_packed_command(_packed(connection, commands))
            except redis.RedisError as exc:
                outcomes.append(exc)
            else:
                outcomes.append([])
                sent.append((index, connection, len(commands)))
        for index, connection, count in sent:
            try:
                outcomes[index] = [read_reply(connection) for _ in range(count)]
            except redis.RedisError as exc:
                connection.disconnect()  # replies may be left unread
                outcomes[index] = exc
    except BaseException:
        for _, connection in taken:  # replies may be left unread
            connection.disconnect()
        raise
    finally:
        for pool, connection in taken:
            pool.release(connection)
    return outcomes


def _pooled(pool: Any) -> Any:
    """A connection of ``pool``, connected."""
    try:
        return pool.get_connection()
    except TypeError:  # redis-py before 5.3 wants a command name
        return pool.get_connection("MULTI")


def _packed(connection: Any, commands: Sequence[tuple[Any, ...]]) -> list[bytes]:
    """``commands`` in the Redis protocol, in one chunk: a connection sends each chunk
    with a system call of its own."""
    return [b"".join([chunk for command in commands for chunk in pack_chunks(connection, command)])]


def read_reply(connection: Any) -> Any:
    """The next reply on ``connection``; an error reply as its exception."""
    try:
        return connection.read_response()
    except ResponseError as exc:
        return exc


def is_cluster(client: object) -> bool:
    """Whether ``client`` talks to a Redis Cluster (a ``redis.RedisCluster``, or a
    processing thread's client routing by slot)."""
    return isinstance(client, redis.RedisCluster) or getattr(client, "routes_by_slot", False)


def describe_redis(client: Client) -> str:
    """The server's URL without user name or password, for logs and the dashboard (for a
    cluster, one master's, with how many masters it has)."""
    if isinstance(client, redis.RedisCluster):
        cluster: Any = client  # parts of redis-py's cluster client are untyped
        kwargs = cluster.get_connection_kwargs()
        scheme = "rediss" if kwargs.get("connection_class") is redis.SSLConnection else "redis"
        primaries = cluster.get_primaries()
        first = min((node.host, node.port) for node in primaries)
        return f"{scheme}{CLUSTER_SUFFIX}://{first[0]}:{first[1]} ({len(primaries)} masters)"
    pool = client.connection_pool
    kwargs = pool.connection_kwargs
    db = kwargs.get("db", 0)
    if kwargs.get("path"):
        return f"unix://{kwargs['path']}" + (f"?db={db}" if db else "")
    scheme = "rediss" if issubclass(pool.connection_class, redis.SSLConnection) else "redis"
    host = kwargs.get("host", "localhost")
    if ":" in host:
        host = f"[{host}]"
    return f"{scheme}://{host}:{kwargs.get('port', 6379)}/{db}"
