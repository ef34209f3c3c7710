"""The settings object ``lowkiq.settings`` and its documented defaults (SPEC §6).

Assigning an unknown name or a bad value raises :class:`ConfigurationError`
naming the setting, so a typo fails at start-up instead of being ignored.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any

import redis

from lowkiq.environment import env_int
from lowkiq.errors import ConfigurationError
from lowkiq.schedulers import build_lag_scheduler
from lowkiq.serializers import Codec, dump_json, format_error, identity, load_json
from lowkiq.splitters import default_build_splitter


def default_redis() -> redis.Redis:
    """``REDIS_URL`` when set, else the project's embedded server (see :mod:`lowkiq.embedded`)."""
    url = os.environ.get("REDIS_URL")
    if not url:
        from lowkiq.embedded import project_server_url

        url = project_server_url()
    return redis.Redis.from_url(url)


def _noop(*args: Any, **kwargs: Any) -> None:
    """Do nothing (the default hook)."""


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(f"setting {name} must be an integer >= 1, got {value!r}")
    return value


def _positive_number(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ConfigurationError(f"setting {name} must be a number > 0, got {value!r}")
    return value


def _callable(name: str, value: Any) -> Any:
    if not callable(value):
        raise ConfigurationError(f"setting {name} must be callable, got {value!r}")
    return value


def _callables(name: str, value: Any) -> list:
    if not isinstance(value, (list, tuple)) or not all(callable(item) for item in value):
        raise ConfigurationError(f"setting {name} must be a list of callables, got {value!r}")
    return list(value)


def _workers(name: str, value: Any) -> list:
    if not isinstance(value, (list, tuple)):
        raise ConfigurationError(f"setting {name} must be a list of Worker classes, got {value!r}")
    if not value:
        return []
    from lowkiq.worker import Worker

    seen: dict[str, type] = {}
    for worker in value:
        if not (isinstance(worker, type) and issubclass(worker, Worker)):
            raise ConfigurationError(f"setting {name}: {worker!r} is not a lowkiq.Worker subclass")
        worker.validate()
        if worker.queue_name in seen:
            raise ConfigurationError(
                f"setting {name}: {worker.__name__} and {seen[worker.queue_name].__name__} "
                f"share the queue name {worker.queue_name!r}"
            )
        seen[worker.queue_name] = worker
    return list(value)


#: name -> (default factory, validator). Units: seconds for times.
DEFAULTS: dict[str, tuple[Callable[[], Any], Callable[[str, Any], Any]]] = {
    # The worker classes whose queues this process serves and shows.
    "workers": (list, _workers),
    # Zero-argument factory of a redis.Redis client.
    "redis": (lambda: default_redis, _callable),
    # Seconds a thread waits when it found nothing or hit an error.
    "poll_interval": (lambda: 1.0, _positive_number),
    # Processing threads of one `lowkiq worker` process.
    "threads_per_node": (lambda: env_int("LOWKIQ_THREADS_PER_NODE", 5), _positive_int),
    # Connections shared by perform_async and the dashboard in one process.
    "client_pool_size": (lambda: 5, _positive_int),
    # Seconds to wait for a pooled connection before giving up.
    "pool_timeout": (lambda: 5.0, _positive_number),
    # mw(worker, batch, call_next) around perform, outermost first.
    "server_middlewares": (list, _callables),
    # mw(worker, jobs, call_next) around perform_async, outermost first.
    "client_middlewares": (list, _callables),
    # Called once before the processing threads start.
    "on_server_init": (lambda: _noop, _callable),
    # Zero-argument factory of a scheduler (lowkiq.build_seq_scheduler is the other built-in).
    "build_scheduler": (lambda: build_lag_scheduler, _callable),
    # Zero-argument factory of a splitter: lowkiq.build_default_splitter, or the
    # by-node splitter when LOWKIQ_NUMBER_OF_NODES / LOWKIQ_NODE_NUMBER are set.
    "build_splitter": (default_build_splitter, _callable),
    # f(exc) for a fatal error outside workers.
    "last_words": (lambda: _noop, _callable),
    # Payload serializer; canonical JSON so equal payloads have equal bytes.
    "dump_payload": (lambda: dump_json, _callable),
    "load_payload": (lambda: load_json, _callable),
    # Error text of a failed job, and how it is stored.
    "format_error": (lambda: format_error, _callable),
    "dump_error": (lambda: identity, _callable),
    "load_error": (lambda: identity, _callable),
}


class Settings:
    """lowkiq's settings; see :data:`DEFAULTS` for names, defaults and units."""

    def __init__(self) -> None:
        object.__setattr__(self, "_client", None)
        object.__setattr__(self, "_client_pid", None)
        object.__setattr__(self, "_lock", threading.Lock())
        self.reset()

    def reset(self) -> None:
        """Restore every setting to its default and drop the shared client."""
        for name, (default, validate) in DEFAULTS.items():
            object.__setattr__(self, name, validate(name, default()))
        object.__setattr__(self, "_client", None)

    def __setattr__(self, name: str, value: Any) -> None:
        if name not in DEFAULTS:
            known = ", ".join(sorted(DEFAULTS))
            raise ConfigurationError(f"unknown setting {name!r}; known settings: {known}")
        object.__setattr__(self, name, DEFAULTS[name][1](name, value))
        if name in ("redis", "client_pool_size", "pool_timeout"):
            object.__setattr__(self, "_client", None)

    @property
    def codec(self) -> Codec:
        """The payload and error serializers, bundled for storage code."""
        return Codec(self.dump_payload, self.load_payload, self.dump_error, self.load_error)

    def client(self) -> redis.Redis:
        """The process's shared client for perform_async and the dashboard.

        Made lazily, once per process (a forked child makes its own), with a
        blocking pool of ``client_pool_size`` connections that waits up to
        ``pool_timeout`` seconds for a free one.
        """
        pid = os.getpid()
        with self._lock:
            if self._client is None or self._client_pid != pid:
                client = pooled_client(self.redis(), self.client_pool_size, self.pool_timeout)
                object.__setattr__(self, "_client", client)
                object.__setattr__(self, "_client_pid", pid)
            return self._client


def pooled_client(template: redis.Redis, size: int, timeout: float) -> redis.Redis:
    """A client with the connection settings of ``template`` and a blocking pool of ``size``."""
    pool = getattr(template, "connection_pool", None)
    if pool is None or not hasattr(pool, "connection_kwargs"):
        return template
    # lowkiq reads raw bytes (payload blobs), whatever the template decodes.
    kwargs = {**pool.connection_kwargs, "decode_responses": False}
    blocking = redis.BlockingConnectionPool(
        connection_class=pool.connection_class, max_connections=size, timeout=timeout, **kwargs
    )
    return redis.Redis(connection_pool=blocking)


settings = Settings()
