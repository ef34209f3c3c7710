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

import time
from collections.abc import Callable, Sequence
from typing import Any

import redis
from redis.cluster import ClusterNode
from redis.exceptions import (
    AskError,
    ClusterError,
    MovedError,
    RedisClusterException,
)

from lowkiq.clients.connection import Client, KeyedCommand
from lowkiq.clients.outages import MasterDown, Outages
from lowkiq.clients.thread import ThreadClient, bounded_timeouts

#: Redirections followed for one command before giving up (the slot map keeps moving).
MAX_REDIRECTS = 5
#: Seconds a call waits on a master that did not answer the last one (a pop or an ack
#: takes milliseconds; a master that stalled longer than a socket timeout and is back
#: answers in that time).
PROBE_TIMEOUT = 0.5
#: Seconds between reloads of the slot map while a master does not answer.
RELOAD_WHILE_OUT = 1.0


def _first_key(args: tuple[Any, ...]) -> Any:
    """The first key of a command, or ``None`` (a command without key)."""
    name = str(args[0]).upper()
    if name in ("EVALSHA", "EVAL", "FCALL", "FCALL_RO"):
        return args[3] if int(args[2]) > 0 else None
    if name.startswith(("SCRIPT", "FUNCTION")):
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
        self._names: dict[ThreadClient, str] = {self: first.name}
        #: Seconds a call waits on a master that answers (``None``: forever).
        self.timeout = self.socket_timeout
        #: The masters that did not answer, and when each is tried again.
        self.outages = Outages()
        # key -> its master's client; forgotten on a MOVED (the slot map changed).
        self._routes: dict[Any, ThreadClient] = {}
        # Set by a connection error: reload the slot map before the next command.
        self._stale = False
        self._reloaded_at = 0.0  # time.monotonic() of the last reload

    def _master(self, name: str) -> ThreadClient:
        client = self._masters.get(name)
        if client is None:
            node = self.topology.get_node(node_name=name)
            client = self._masters[name] = ThreadClient(node.redis_connection)
            self._names[client] = name
        return client

    def _silent(self, client: ThreadClient, error: Exception) -> MasterDown:
        """``client``'s master did not answer a call (``error``): its connection is closed
        (a reply may be left unread), the slot map reloaded before the next command (a
        replica may take over), and the master tried again later, with a call that
        waits at most PROBE_TIMEOUT."""
        ThreadClient.set_timeout(client, min(PROBE_TIMEOUT, self.timeout or PROBE_TIMEOUT))
        self.lost_connection()
        return self.outages.failed(self._names[client], error)

    def _answered(self, client: ThreadClient) -> None:
        """``client``'s master answered: calls wait on it as long as before its outage."""
        if self.outages.answered(self._names[client]):
            ThreadClient.set_timeout(client, self.timeout)

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
        """Forget the routes and reload the slot map from the cluster, not asking the
        masters that did not answer (:mod:`lowkiq.clients.outages`) while another node is
        known."""
        self._routes.clear()
        self._reloaded_at = time.monotonic()
        manager = self.topology.nodes_manager
        nodes = dict(manager.startup_nodes)
        answering = {name: node for name, node in nodes.items() if name not in self.outages}
        if answering and len(answering) < len(nodes):
            manager.startup_nodes = answering
        try:
            manager.initialize()
        except RedisClusterException as exc:
            raise redis.ConnectionError(f"cannot load the cluster's slot map: {exc}") from exc
        finally:
            for name, node in nodes.items():
                manager.startup_nodes.setdefault(name, node)
        self._stale = False

    def _out(self, client: ThreadClient) -> MasterDown | None:
        """The error of a call to ``client``'s master while its retry is not due (the slot
        map is then reloaded every RELOAD_WHILE_OUT seconds, in case a replica took over);
        ``None``: send it."""
        error = self.outages.check(self._names[client])
        if error is not None and time.monotonic() - self._reloaded_at >= RELOAD_WHILE_OUT:
            self.lost_connection()
        return error

    def _send(self, client: ThreadClient, args: tuple[Any, ...], options: dict[str, Any]) -> Any:
        if client is self:
            return super().execute_command(*args, **options)
        return client.execute_command(*args, **options)

    def execute_command(self, *args: Any, **options: Any) -> Any:
        """Send one command to the master of its first key; a keyless one (SCRIPT LOAD,
        FUNCTION LOAD) to every master, returning the first reply."""
        try:
            return self._execute(args, options)
        except MasterDown:
            raise
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
            client = self.route(key)
            down = self._out(client)
            if down is not None:
                raise down
            try:
                reply = call(client)
            except (redis.ConnectionError, redis.TimeoutError) as exc:
                raise self._silent(client, exc) from exc
            except AskError as redirect:
                target = self._master(f"{redirect.host}:{redirect.port}")
                if isinstance(redirect, MovedError):
                    self._reload()
                    continue
                self._send(target, ("ASKING",), {})
                return call(target)
            self._answered(client)
            return reply
        raise ClusterError(f"a command on {key!r}: too many redirections")

    def _run_routed(self, key: Any, call: Callable[[ThreadClient], Any]) -> Any:
        """:meth:`_routed` for a script call: a lost master reloads the slot map next."""
        try:
            if self._stale:
                self._reload()
            return self._routed(key, call)
        except MasterDown:
            raise
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
        lost is sent again alone.  The commands of a master that does not answer, or
        whose retry is not due (:mod:`lowkiq.clients.outages`), get a
        :class:`~lowkiq.clients.outages.MasterDown` as their reply: the other masters'
        replies are read all the same."""
        if self._stale:
            self._reload()
        by_master: dict[ThreadClient, list[int]] = {}
        try:
            for index, (key, _, _) in enumerate(commands):
                by_master.setdefault(self.route(key), []).append(index)
        except (redis.ConnectionError, redis.TimeoutError):
            self.lost_connection()
            raise
        down: dict[ThreadClient, MasterDown] = {}
        for master, indexes in by_master.items():
            error = self._out(master)
            if error is not None:
                down[master] = error
                continue
            try:
                ThreadClient.send(master, b"".join(commands[index][1] for index in indexes))
            except (redis.ConnectionError, redis.TimeoutError) as exc:
                down[master] = self._silent(master, exc)
        replies: list[Any] = [None] * len(commands)
        for master, indexes in by_master.items():
            if master not in down:
                try:
                    answers = ThreadClient.replies(master, len(indexes))
                except (redis.ConnectionError, redis.TimeoutError) as exc:
                    down[master] = self._silent(master, exc)
                else:
                    self._answered(master)
                    for index, reply in zip(indexes, answers, strict=True):
                        replies[index] = reply
                    continue
            for index in indexes:
                replies[index] = down[master]
        for index, reply in enumerate(replies):
            script: Any = commands[index][2]
            if isinstance(reply, AskError) or (
                script is not None and script.is_lost(reply, commands[index][1])
            ):
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


def thread_client(template: Client, timeout: float | None = None) -> Client:
    """The client of one processing thread, made from a new client of the settings: a
    :class:`~lowkiq.clients.thread.ThreadClient` (one private connection, no retries), or
    on a Redis Cluster a :class:`ClusterThreadClient` (one such connection per master).
    ``timeout``: every connect and read gives up after that many seconds (or the
    template's own timeout, when shorter), so a master that hangs holds up only the
    shards it serves."""
    if isinstance(template, redis.RedisCluster):
        if timeout is not None:
            template = bounded_client(template, timeout)
        return ClusterThreadClient(template)
    return ThreadClient(template, timeout)


def bounded(template: Client, timeout: float) -> Client:
    """A new client of ``template``'s Redis, with its settings, but whose every connect
    and read gives up after ``timeout`` seconds (or ``template``'s own timeout, when
    shorter): on a Redis Cluster :func:`bounded_client`; on one server a client whose
    pool makes no connection before it is used."""
    if isinstance(template, redis.RedisCluster):
        return bounded_client(template, timeout)
    pool: Any = getattr(template, "connection_pool", None)
    if pool is None or not hasattr(pool, "connection_kwargs"):
        return template
    kwargs = {**pool.connection_kwargs}
    kwargs.update(bounded_timeouts(kwargs, timeout))
    return redis.Redis(
        connection_pool=redis.ConnectionPool(connection_class=pool.connection_class, **kwargs)
    )


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
    kwargs.update(bounded_timeouts(kwargs, timeout))
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
