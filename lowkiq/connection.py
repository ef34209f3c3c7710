"""Redis connections of the processing threads, and how a server is named in logs.

Besides the client API this relies on a connection pool's ``connection_kwargs``,
``connection_class`` and ``make_connection()``, and on a connection's
``send_command``, ``disconnect`` and ``socket_timeout`` with the client's
``parse_response``: stable from redis-py 5.0 to 8.x, the range pyproject.toml
allows and ``.ci/run`` tests (its lowest and newest).
"""

from __future__ import annotations

from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry


class ThreadClient(redis.Redis):
    """A client that sends every command on one private connection, without retries.

    Used by exactly one thread.  Skipping the pool and redis-py's retry and
    telemetry wrappers halves the client-side cost of a script call, and a
    retried script could run twice (pop two batches), so lowkiq handles Redis
    errors itself.  Pipelines still use the pool.
    """

    def __init__(self, template: redis.Redis) -> None:
        pool = template.connection_pool
        kwargs = {
            **pool.connection_kwargs,
            "decode_responses": False,
            "retry": Retry(NoBackoff(), 0),
        }
        super().__init__(
            connection_pool=redis.ConnectionPool(connection_class=pool.connection_class, **kwargs)
        )
        # redis-py's connection class is untyped in parts: held as Any.
        self._private: Any = self.connection_pool.make_connection()

    @property
    def socket_timeout(self) -> float | None:
        """Seconds a read may block before it fails (``None``: forever)."""
        timeout: float | None = self._private.socket_timeout
        return timeout

    def execute_command(self, *args: Any, **options: Any) -> Any:
        """Send one command on the private connection and parse its reply."""
        connection = self._private
        try:
            connection.send_command(*args)
            parse: Any = self.parse_response
            return parse(connection, args[0], **options)
        except (redis.ConnectionError, redis.TimeoutError):
            connection.disconnect()
            raise

    def close(self) -> None:
        """Close the private connection and the pool."""
        self._private.disconnect()
        super().close()


def describe_redis(client: redis.Redis) -> str:
    """The server's URL without user name or password, for logs and the dashboard."""
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
