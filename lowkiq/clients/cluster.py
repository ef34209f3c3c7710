"""A processing thread's connections to a Redis Cluster: one private connection per master.

redis-py's ``RedisCluster`` resolves a command's policy, node and retries on every
call, which costs about five times the client CPU of a plain connection.  A
processing thread sends few kinds of commands, each naming its shard's key
first, so :class:`ClusterThreadClient` routes each to the master of that key's
slot (redis-py's slot map) over a :class:`~lowkiq.clients.thread.ThreadClient`
of that master: no retries (a retried pop could take two batches), and a
``MOVED`` or ``ASK`` redirection, which means the command did not run, is
followed.  A connection error (a master died) is raised, as on one server, and
the next command first reloads the slot map, so once a replica has taken
over, the thread talks to it.

:func:`bounded_client` makes another client of a cluster whose every call gives up
after a bound (the lease renewer's: a master that hangs costs it a timeout, never a
lease).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import redis
from redis.cluster import ClusterNode
from redis.exceptions import (
    AskError,
    ClusterError,
    MovedError,
    NoScriptError,
    RedisClusterException,
)

from lowkiq.clients.connection import Client, KeyedCommand
from lowkiq.clients.thread import ThreadClient

#: Redirections followed for one command before giving up (the slot map keeps moving).
MAX_REDIRECTS = 5


def _first_key(args: tuple[Any, ...]) -> Any:
    """The first key of a command, or ``None`` (a command without key)."""
    name = str(args[0]).upper()
    if name in ("EVALSHA", "EVAL"):
        return args[3] if int(args[2]) > 0 else None
    if name.startswith("SCRIPT"):
        return None
    return args[1] if len(args) > 1 else None


class ClusterThreadClient(ThreadClient):
    """The client of one processing thread on a Redis Cluster (see the module)."""

    #: What :func:`lowkiq.clients.connection.is_cluster` looks for.
    routes_by_slot = True

    def __init__(self, cluster: redis.RedisCluster) -> None:
        # Parts of redis-py's cluster client are untyped.
        self.topology: Any = cluster
        first = cluster.get_primaries()[0]  # type: ignore[no-untyped-call]
        super().__init__(first.redis_connection)
        self._masters: dict[str, ThreadClient] = {first.name: self}
        # key -> its master's client; forgotten on a MOVED (the slot map changed).
        self._routes: dict[Any, ThreadClient] = {}
        # Set by a connection error: reload the slot map before the next command.
        self._stale = False

    def _master(self, name: str) -> ThreadClient:
        client = self._masters.get(name)
        if client is None:
            node = self.topology.get_node(node_name=name)
            client = self._masters[name] = ThreadClient(node.redis_connection)
        return client

    def route(self, key: Any) -> ThreadClient:
        """The client of the master serving ``key``'s slot."""
        client = self._routes.get(key)
        if client is None:
            if self._stale:
                self._reload()
            try:
                node = self.topology.get_node_from_key(key)
            except RedisClusterException as exc:  # a slot without a master, for now
                raise redis.ConnectionError(str(exc)) from exc
            client = self._routes[key] = self._master(node.name)
        return client

    def _reload(self) -> None:
        """Forget the routes and reload the slot map from the cluster."""
        self._routes.clear()
        try:
            self.topology.nodes_manager.initialize()
        except RedisClusterException as exc:
            raise redis.ConnectionError(f"cannot load the cluster's slot map: {exc}") from exc
        self._stale = False

    def _send(self, client: ThreadClient, args: tuple[Any, ...], options: dict[str, Any]) -> Any:
        if client is self:
            return super().execute_command(*args, **options)
        return client.execute_command(*args, **options)

    def execute_command(self, *args: Any, **options: Any) -> Any:
        """Send one command to the master of its first key; a keyless one (SCRIPT LOAD)
        to every master, returning the first reply."""
        try:
            return self._execute(args, options)
        except (redis.ConnectionError, redis.TimeoutError):
            self.lost_connection()
            raise

    def lost_connection(self) -> None:
        """A master did not answer: reload the slot map before the next command."""
        self._stale = True
        self._routes.clear()

    def _execute(self, args: tuple[Any, ...], options: dict[str, Any]) -> Any:
        if self._stale:
            self._reload()
        key = _first_key(args)
        if key is None:
            replies = [
                self._send(self._master(node.name), args, options)
                for node in self.topology.get_primaries()
            ]
            return replies[0]
        return self._routed(key, lambda client: self._send(client, args, options))

    def _routed(self, key: Any, call: Callable[[ThreadClient], Any]) -> Any:
        """``call(client)`` on the client of the master of ``key``'s slot, following
        ``MOVED`` and ``ASK`` (the command did not run)."""
        for _ in range(MAX_REDIRECTS):
            try:
                return call(self.route(key))
            except AskError as redirect:
                target = self._master(f"{redirect.host}:{redirect.port}")
                if isinstance(redirect, MovedError):
                    self._reload()
                    continue
                self._send(target, ("ASKING",), {})
                return call(target)
        raise ClusterError(f"a command on {key!r}: too many redirections")

    def _run_routed(self, key: Any, call: Callable[[ThreadClient], Any]) -> Any:
        """:meth:`_routed` for a script call: a lost master reloads the slot map next."""
        try:
            if self._stale:
                self._reload()
            return self._routed(key, call)
        except (redis.ConnectionError, redis.TimeoutError):
            self.lost_connection()
            raise

    def run_script(self, script: Any, keys: Any, args: Any) -> Any:
        """A script call on the master of its first key's slot, on that master's
        private connection (see :meth:`ThreadClient.run_script`)."""
        return self._run_routed(
            keys[0], lambda client: ThreadClient.run_script(client, script, keys, args)
        )

    def run_command(self, command: KeyedCommand) -> Any:
        """:meth:`ThreadClient.run_command` on the master of the command's key, following
        ``MOVED`` and ``ASK``."""
        return self._run_routed(
            command[0], lambda client: ThreadClient.run_command(client, command)
        )

    def run_keyed(self, commands: Sequence[KeyedCommand]) -> list[Any]:
        """Packed commands ``(first key, bytes, script or None)``, a write to each master
        of their keys before any reply is read; their replies, an error reply returned
        as its exception.  A command redirected (it did not run) or whose script Redis
        lost is sent again alone."""
        if self._stale:
            self._reload()
        by_master: dict[ThreadClient, list[int]] = {}
        try:
            for index, (key, _, _) in enumerate(commands):
                by_master.setdefault(self.route(key), []).append(index)
            for master, indexes in by_master.items():
                ThreadClient.send(master, b"".join(commands[index][1] for index in indexes))
            replies: list[Any] = [None] * len(commands)
            for master, indexes in by_master.items():
                for index, reply in zip(
                    indexes, ThreadClient.replies(master, len(indexes)), strict=True
                ):
                    replies[index] = reply
        except (redis.ConnectionError, redis.TimeoutError):
            for master in by_master:  # replies may be left unread
                master.disconnect()
            self.lost_connection()
            raise
        for index, reply in enumerate(replies):
            if isinstance(reply, (AskError, NoScriptError)):
                replies[index] = self._again_alone(commands[index])
        return replies

    def _again_alone(self, command: KeyedCommand) -> Any:
        """A command of :meth:`run_keyed` sent alone, routed; its reply or error reply."""
        try:
            return self.run_command(command)
        except redis.ResponseError as exc:
            return exc

    def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> Any:
        """A pipeline whose commands go, grouped, to the masters of their keys."""
        return RoutedPipeline(self)

    def close(self) -> None:
        """Close the connections to every master."""
        for client in self._masters.values():
            if client is not self:
                client.close()
        super().close()


class RoutedPipeline:
    """Commands queued, then sent a pipeline per master; replies in queued order.

    A command redirected (``MOVED``/``ASK``: it did not run) is sent again alone.
    """

    def __init__(self, client: ClusterThreadClient) -> None:
        self.client = client
        self.commands: list[tuple[tuple[Any, ...], dict[str, Any]]] = []

    def execute_command(self, *args: Any, **options: Any) -> RoutedPipeline:
        """Queue a command."""
        self.commands.append((args, options))
        return self

    def zrange(self, name: str, start: int, end: int, withscores: bool = False) -> RoutedPipeline:
        """Queue a ZRANGE (``withscores``: replies as ``(member, score)`` pairs)."""
        if not withscores:
            return self.execute_command("ZRANGE", name, start, end)
        options = {"withscores": True, "score_cast_func": float}
        return self.execute_command("ZRANGE", name, start, end, "WITHSCORES", **options)

    def execute(self, raise_on_error: bool = True) -> list[Any]:
        """Send the queued commands; an error reply raises unless ``raise_on_error`` is off."""
        by_master: dict[ThreadClient, list[int]] = {}
        for index, (args, _) in enumerate(self.commands):
            by_master.setdefault(self.client.route(_first_key(args)), []).append(index)
        replies: list[Any] = [None] * len(self.commands)
        for master, indexes in by_master.items():
            # The master's own pipeline (the first master's client is the routing one).
            pipe: Any = redis.Redis.pipeline(master, transaction=False)
            for index in indexes:
                args, options = self.commands[index]
                pipe.execute_command(*args, **options)
            try:
                sent = pipe.execute(raise_on_error=False)
            except (redis.ConnectionError, redis.TimeoutError):
                self.client.lost_connection()
                raise
            for index, reply in zip(indexes, sent, strict=True):
                if isinstance(reply, AskError):
                    args, options = self.commands[index]
                    reply = _again(self.client, args, options)
                replies[index] = reply
        self.commands = []
        if raise_on_error:
            for reply in replies:
                if isinstance(reply, Exception):
                    raise reply
        return replies


def thread_client(template: Client) -> Client:
    """The client of one processing thread, made from a new client of the settings: a
    :class:`~lowkiq.clients.thread.ThreadClient` (one private connection, no retries), or
    on a Redis Cluster a :class:`ClusterThreadClient` (one such connection per master)."""
    if isinstance(template, redis.RedisCluster):
        return ClusterThreadClient(template)
    return ThreadClient(template)


def bounded_client(cluster: redis.RedisCluster, timeout: float) -> redis.RedisCluster:
    """A new client of ``cluster``'s Redis Cluster, with its settings, but whose every
    connect and read gives up after ``timeout`` seconds (or ``cluster``'s own timeout,
    when shorter), and which takes a slot map that leaves slots uncovered (a master
    failing over): a master that hangs costs its caller a timeout, not a call stuck
    until the master wakes, and a reload of the slot map
    (``nodes_manager.initialize()``) skips such a node after the timeout too."""
    topology: Any = cluster  # parts of redis-py's cluster client are untyped
    kwargs = dict(topology.get_connection_kwargs())
    # The cluster's own on_connect (it calls the user's, which the new client calls too).
    kwargs.pop("redis_connect_func", None)
    user_on_connect = getattr(topology, "user_on_connect_func", None)
    if user_on_connect is not None:
        kwargs["redis_connect_func"] = user_on_connect
    for name in ("socket_timeout", "socket_connect_timeout"):
        own = kwargs.get(name)
        kwargs[name] = timeout if own is None else min(own, timeout)
    remap = getattr(topology.nodes_manager, "address_remap", None)
    if remap is not None:
        kwargs["address_remap"] = remap
    nodes = [ClusterNode(node.host, node.port) for node in topology.get_nodes()]  # type: ignore[no-untyped-call]
    if topology.nodes_manager.from_url:
        # Its nodes' pools take the URL's options (e.g. rediss's connection class).
        first = nodes.pop(0)
        kwargs["url"] = f"redis://{first.host}:{first.port}"
    return redis.RedisCluster(startup_nodes=nodes, require_full_coverage=False, **kwargs)


def _again(client: ClusterThreadClient, args: tuple[Any, ...], options: dict[str, Any]) -> Any:
    try:
        return client.execute_command(*args, **options)
    except redis.ResponseError as exc:
        return exc
