"""The settings object ``lowkiq.settings``: every setting, its default, unit and check.

:class:`Settings` declares each setting once, as a typed field whose default
and check sit together; adding a setting is adding one field.  Assigning an
unknown name or a bad value raises :class:`ConfigurationError` naming the
setting, so a typo fails at start-up instead of being ignored.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import MISSING, Field, dataclass, field, fields
from typing import TYPE_CHECKING, Any, cast

import redis
from redis import Redis

from lowkiq.clients.connection import Client
from lowkiq.clients.default_redis import default_redis
from lowkiq.clients.forking import forget_in_children
from lowkiq.config.environment import env_bool, env_float, env_int
from lowkiq.errors import ConfigurationError
from lowkiq.middleware import ClientMiddleware, ServerMiddleware
from lowkiq.periodic.schedule import Schedule, schedule_list
from lowkiq.serializers import Codec, dump_json, format_error, identity, load_json
from lowkiq.storage.queue_base import Replication
from lowkiq.strategies.schedulers import Scheduler, build_lag_scheduler
from lowkiq.strategies.splitters import Splitter, default_build_splitter

if TYPE_CHECKING:
    from lowkiq.worker import Worker

#: Checks a value given to setting ``name``; returns the value to keep.
Check = Callable[[str, Any], Any]


def _noop(*args: Any, **kwargs: Any) -> None:
    """Do nothing (the default hook)."""


def positive_int(name: str, value: Any) -> int:
    """An ``int`` >= 1 (``bool`` is not a count)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(f"setting {name} must be an integer >= 1, got {value!r}")
    return value


def non_negative_int(name: str, value: Any) -> int:
    """An ``int`` >= 0."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigurationError(f"setting {name} must be an integer >= 0, got {value!r}")
    return value


def positive_number(name: str, value: Any) -> float:
    """A number > 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ConfigurationError(f"setting {name} must be a number > 0, got {value!r}")
    return value


def optional_port(name: str, value: Any) -> int | None:
    """``None``, or a TCP port number (1 to 65535)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
        raise ConfigurationError(
            f"setting {name} must be a port (1 to 65535) or None, got {value!r}"
        )
    return value


def a_bool(name: str, value: Any) -> bool:
    """``True`` or ``False``."""
    if not isinstance(value, bool):
        raise ConfigurationError(f"setting {name} must be True or False, got {value!r}")
    return value


def a_callable(name: str, value: Any) -> Any:
    """Anything callable."""
    if not callable(value):
        raise ConfigurationError(f"setting {name} must be callable, got {value!r}")
    return value


def callables(name: str, value: Any) -> list[Any]:
    """A list or tuple of callables, kept as a new list."""
    if not isinstance(value, (list, tuple)) or not all(callable(item) for item in value):
        raise ConfigurationError(f"setting {name} must be a list of callables, got {value!r}")
    return list(value)


def worker_classes(name: str, value: Any) -> list[type[Worker]]:
    """A list of valid ``lowkiq.Worker`` subclasses with distinct queue names."""
    if not isinstance(value, (list, tuple)):
        raise ConfigurationError(f"setting {name} must be a list of Worker classes, got {value!r}")
    # Looked up, not imported: lowkiq.worker imports this module, and a Worker
    # subclass can only exist once lowkiq.worker is loaded.
    base: type | None = getattr(sys.modules.get("lowkiq.worker"), "Worker", None)
    seen: dict[str, type[Worker]] = {}
    for item in value:
        if base is None or not (isinstance(item, type) and issubclass(item, base)):
            raise ConfigurationError(f"setting {name}: {item!r} is not a lowkiq.Worker subclass")
        worker = cast("type[Worker]", item)
        worker.validate()
        if worker.queue_name in seen:
            raise ConfigurationError(
                f"setting {name}: {worker.__name__} and {seen[worker.queue_name].__name__} "
                f"share the queue name {worker.queue_name!r}"
            )
        seen[worker.queue_name] = worker
    return list(value)


def setting(
    default: Any = MISSING, *, factory: Callable[[], Any] | None = None, check: Check
) -> Any:
    """Declare a setting: its default (or a factory of it, read at reset) and its check."""
    if factory is not None:
        return field(default_factory=factory, metadata={"check": check})
    return field(default=default, metadata={"check": check})


class _OwnConnection(threading.local):
    """A thread's state for :meth:`SharedClient.owned`: whether it is inside
    :meth:`SharedClient.own_connection`, and its client there.  Defaults on the class: a
    thread that never entered finds them without a missing attribute's exception (which,
    raised and caught on every ``perform_async``, costs an idle producer tens of µs)."""

    inside = False
    client: Client | None = None


class SharedClient:
    """One process's lazily made client; a forked child makes its own.  A thread inside
    :meth:`own_connection` gets a client of its own instead (see :meth:`Settings.client`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._client: Client | None = None
        self._pid: int | None = None
        # The client of the thread inside own_connection(), when made.
        self._thread = _OwnConnection()
        forget_in_children(self)

    def forget_after_fork(self) -> None:
        """In a forked child: forget the parent's clients without closing them (their
        sockets are the parent's); the child's next call makes its own."""
        self._lock = threading.Lock()
        self._client = None
        self._thread = _OwnConnection()

    def owned(self, make: Callable[[], Client]) -> Client | None:
        """This thread's own client (made with ``make`` on first use) when the thread is
        inside :meth:`own_connection`, else ``None``."""
        local = self._thread
        if not local.inside:
            return None
        client = local.client
        if client is None:
            client = local.client = make()
        return client

    @contextmanager
    def own_connection(self) -> Iterator[None]:
        """Inside, :meth:`owned` gives this thread a client of its own, closed at the end."""
        local = self._thread
        local.inside, local.client = True, None
        try:
            yield
        finally:
            client, local.inside, local.client = local.client, False, None
            if client is not None:
                client.close()

    def get(self, make: Callable[[], Client]) -> Client:
        """The client, made with ``make`` on first use in this process."""
        client, pid = self._client, os.getpid()
        if client is not None and self._pid == pid:  # made already: no lock taken
            return client
        with self._lock:
            if self._client is None or self._pid != pid:
                self._client, self._pid = make(), pid
            return self._client

    def drop(self) -> None:
        """Forget the client; the next :meth:`get` makes a new one."""
        with self._lock:
            self._client = None


# Settings that shape the shared client: changing one drops it.
_CLIENT_SETTINGS = frozenset({"redis", "client_pool_size", "pool_timeout"})


@dataclass(eq=False)
class Settings:
    """lowkiq's settings.  Times are in seconds.

    ``Settings(threads_per_node=2, ...)`` makes an independent settings object
    (``lowkiq.runtime.server.Server(config)`` runs with it); ``lowkiq.settings`` is the
    one ``perform_async``, the dashboard and ``lowkiq worker`` use.
    """

    #: The worker classes whose queues this process serves and shows.
    workers: list[type[Worker]] = setting(factory=list, check=worker_classes)
    #: Periodic jobs (lowkiq.Schedule), enqueued by every ``lowkiq worker`` process, each
    #: tick once (see lowkiq.periodic).
    schedules: list[Schedule] = setting(factory=list, check=schedule_list)
    #: Zero-argument factory of a client (redis.Redis, or redis.RedisCluster): REDIS_URL, else
    #: redis://localhost:6379/0
    #: (LOWKIQ_EMBEDDED_REDIS=1: the embedded development server; see lowkiq.clients.default_redis).
    redis: Callable[[], Client] = setting(default_redis, check=a_callable)
    #: Seconds a thread waits when it found nothing or hit an error.
    poll_interval: float = setting(1.0, check=positive_number)
    #: Seconds a shard's lease (and a process's membership) lasts unless renewed;
    #: a crashed process's shards are taken over after this long (at once when a
    #: ``--processes`` supervisor sees its child die).  Renewed every lease_ttl / 3.
    lease_ttl: float = setting(15.0, check=positive_number)
    #: Seconds between a process's heartbeats (membership only: changes wake the processes
    #: that must act at once); at most lease_ttl / 2.  On a single server a heartbeat
    #: carries the lease renewals in its round trip when they are due, so at
    #: lease_ttl / 3 (the default) a process costs Redis one request per heartbeat:
    #: processes / heartbeat_interval requests a second (see the fleet benchmark).
    heartbeat_interval: float = setting(5.0, check=positive_number)
    #: Replicas every state change must reach before lowkiq goes on: Redis WAIT after each
    #: enqueue, pop, ack, fail, restore and bury, in the same round trip. 0: don't wait
    #: (Redis replicates asynchronously: a failover can lose the last writes).
    wait_replicas: int = setting(0, check=non_negative_int)
    #: Seconds such a WAIT may take; a write that reached fewer replicas is logged.
    wait_timeout: float = setting(1.0, check=positive_number)
    #: Run on a Redis whose maxmemory-policy is not noeviction (a full Redis then deletes
    #: keys: queued jobs vanish, leases lapse early): a warning at start and a red banner
    #: on the dashboard instead of refusing to start (env LOWKIQ_ALLOW_EVICTION=1).
    allow_eviction: bool = setting(factory=lambda: env_bool("LOWKIQ_ALLOW_EVICTION"), check=a_bool)
    #: Processing threads of one ``lowkiq worker`` process (env LOWKIQ_THREADS_PER_NODE).
    threads_per_node: int = setting(
        factory=lambda: env_int("LOWKIQ_THREADS_PER_NODE", 5), check=positive_int
    )
    #: Port of a ``lowkiq worker`` process's health endpoints (/live, /ready, /metrics);
    #: None: not served (env LOWKIQ_HEALTH_PORT; the command's --health-port).
    health_port: int | None = setting(
        factory=lambda: env_int("LOWKIQ_HEALTH_PORT"), check=optional_port
    )
    #: Seconds one ``perform`` may run before the process's /live answers 503
    #: (env LOWKIQ_STUCK_AFTER); a worker that sets ``perform_timeout`` has its own
    #: threshold instead, ``perform_timeout`` + 5 s (lowkiq.perform.timeouts.STUCK_GRACE).
    stuck_after: float = setting(
        factory=lambda: env_float("LOWKIQ_STUCK_AFTER", 300.0), check=positive_number
    )
    #: Seconds the running performs get to end when a worker process stops (TERM): they
    #: see ``current_batch().should_stop()`` at once; batches still running after it are
    #: left for their shards' next owners (a restore that counts toward no max_restores).
    #: Under Kubernetes' default 30 s grace period.
    shutdown_timeout: float = setting(25.0, check=positive_number)
    #: Groups of each worker whose queue waits get a series of their own in Prometheus
    #: ``lowkiq_group_wait_seconds``: those with the most jobs; the others are summed as
    #: ``group="other"`` (0: no per-group series at all).
    metrics_top_groups: int = setting(20, check=non_negative_int)
    #: Seconds a complete workflow's state is kept (``lowkiq.Workflow``): 7 days.
    workflow_ttl: float = setting(7 * 86400.0, check=positive_number)
    #: Connections shared by perform_async and the dashboard in one process.
    client_pool_size: int = setting(5, check=positive_int)
    #: Seconds to wait for a pooled connection before giving up.
    pool_timeout: float = setting(5.0, check=positive_number)
    #: ``mw(worker, batch, call_next)`` around perform, outermost first.
    server_middlewares: list[ServerMiddleware] = setting(factory=list, check=callables)
    #: ``mw(worker, jobs, call_next)`` around perform_async, outermost first.
    client_middlewares: list[ClientMiddleware] = setting(factory=list, check=callables)
    #: Called once before the processing threads start.
    on_server_init: Callable[[], None] = setting(_noop, check=a_callable)
    #: Zero-argument factory of a scheduler (lowkiq.build_seq_scheduler is the other built-in).
    build_scheduler: Callable[[], Scheduler] = setting(build_lag_scheduler, check=a_callable)
    #: Zero-argument factory of a splitter: lowkiq.build_default_splitter, or the
    #: by-node splitter when LOWKIQ_NUMBER_OF_NODES / LOWKIQ_NODE_NUMBER are set.
    build_splitter: Callable[[], Splitter] = setting(
        factory=default_build_splitter, check=a_callable
    )
    #: ``f(exc)`` for a fatal error outside workers.
    last_words: Callable[[BaseException], None] = setting(_noop, check=a_callable)
    #: Payload serializer; canonical JSON so that equal payloads have equal bytes.
    dump_payload: Callable[[Any], bytes | str] = setting(dump_json, check=a_callable)
    load_payload: Callable[[bytes], Any] = setting(load_json, check=a_callable)
    #: The error text of a failed job, and how it is stored.
    format_error: Callable[[BaseException], str] = setting(format_error, check=a_callable)
    dump_error: Callable[[str], bytes | str] = setting(identity, check=a_callable)
    load_error: Callable[[Any], str] = setting(identity, check=a_callable)

    # The shared client of client(), not a setting.
    _shared: SharedClient = field(default_factory=lambda: SharedClient(), init=False, repr=False)

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "_shared":
            object.__setattr__(self, name, value)
            return
        check = _CHECKS.get(name)
        if check is None:
            known = ", ".join(sorted(_CHECKS))
            raise ConfigurationError(f"unknown setting {name!r}; known settings: {known}")
        object.__setattr__(self, name, check(name, value))
        if name in _CLIENT_SETTINGS and "_shared" in self.__dict__:
            self._shared.drop()

    def reset(self) -> None:
        """Restore every setting to its default and drop the shared client."""
        for name in _CHECKS:
            setattr(self, name, _default(_FIELDS[name]))
        self._shared.drop()

    @property
    def replication(self) -> Replication:
        """What every write waits for (:attr:`wait_replicas`, :attr:`wait_timeout`)."""
        return Replication(self.wait_replicas, max(1, round(self.wait_timeout * 1000)))

    @property
    def codec(self) -> Codec:
        """The payload and error serializers, bundled for storage code."""
        return Codec(self.dump_payload, self.load_payload, self.dump_error, self.load_error)

    def client(self) -> Client:
        """The process's shared client for perform_async, the dashboard and ``perform``.

        Made lazily, once per process (a forked child makes its own), with a
        blocking pool of ``client_pool_size`` connections that waits up to
        ``pool_timeout`` seconds for a free one.  On an executor thread of a
        ``lowkiq worker`` process it is that thread's own client instead: one
        connection, made on the thread's first call, that no other thread waits for
        (a plain ``redis.Redis``; a thread ``perform`` starts calls this itself rather
        than borrow it: older redis-py releases do not lock a single connection; on a
        Redis Cluster, the shared client).
        """
        own = self._shared.owned(lambda: single_connection_client(self.redis()))
        if own is not None:
            return own
        return self._shared.get(
            lambda: pooled_client(self.redis(), self.client_pool_size, self.pool_timeout)
        )

    def own_connection(self) -> AbstractContextManager[None]:
        """Inside, on this thread, :meth:`client` is a client of the thread's own (the
        worker process's executor threads run inside)."""
        return self._shared.own_connection()


def _default(declared: Field[Any]) -> Any:
    if declared.default_factory is not MISSING:
        return declared.default_factory()
    return declared.default


_FIELDS = {declared.name: declared for declared in fields(Settings) if "check" in declared.metadata}
_CHECKS: dict[str, Check] = {name: declared.metadata["check"] for name, declared in _FIELDS.items()}


def pooled_client(template: Client, size: int, timeout: float) -> Client:
    """A client with the connection settings of ``template`` and a blocking pool of ``size``."""
    pool = getattr(template, "connection_pool", None)
    if pool is None or not hasattr(pool, "connection_kwargs"):
        return template
    # lowkiq reads raw bytes (payload blobs), whatever the template decodes.
    kwargs = {**pool.connection_kwargs, "decode_responses": False}
    blocking = redis.BlockingConnectionPool(  # type: ignore[no-untyped-call]
        connection_class=pool.connection_class, max_connections=size, timeout=timeout, **kwargs
    )
    return Redis(connection_pool=blocking)


def single_connection_client(template: Client) -> Client:
    """A client with the connection settings of ``template`` that keeps one connection
    for itself, for one thread; ``template`` itself on a Redis Cluster."""
    pool = getattr(template, "connection_pool", None)
    if pool is None or not hasattr(pool, "connection_kwargs"):
        return template
    kwargs = {**pool.connection_kwargs, "decode_responses": False}
    own = redis.ConnectionPool(connection_class=pool.connection_class, **kwargs)
    return Redis(connection_pool=own, single_connection_client=True)


settings = Settings()
"""The process's settings; the app sets them at import (``lowkiq.settings.workers = [...]``)."""
