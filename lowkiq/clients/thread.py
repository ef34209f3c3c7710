"""The processing threads' Redis client: one private connection per thread, without
retries, commands packed by hiredis and script replies read off the socket.

Besides the client API this relies on a connection pool's ``connection_kwargs``,
``connection_class`` and ``make_connection()``, on a connection's ``send_command``,
``send_packed_command``, ``disconnect``, ``socket_timeout``,
``register_connect_callback``, its socket ``_sock`` and its parser's ``parse_error``,
with the client's ``parse_response``: stable from redis-py 5.0 to 8.x, the range
pyproject.toml allows and ``.ci/run`` tests (its lowest and newest).
"""

from __future__ import annotations

import functools
import socket
import struct
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

import redis
from redis.backoff import NoBackoff
from redis.exceptions import InvalidResponse, ResponseError
from redis.retry import Retry

from lowkiq.clients.connection import KeyedCommand, pack_chunks, read_reply

_hiredis_reader: Any
try:
    from hiredis import Reader as _hiredis_reader
except ImportError:  # no hiredis: redis-py reads
    _hiredis_reader = None


#: Commands a thread's client keeps packed (:meth:`ThreadClient.pack_script`: a few
#: per shard it serves); past that it forgets them all (leases changed hands).
MAX_PACKED = 256


class ThreadClient(redis.Redis):
    """A client that sends every command on one private connection, without retries.

    Used by exactly one thread.  Skipping the pool and redis-py's retry and
    telemetry wrappers halves the client-side cost of a script call, and a
    retried script could run twice (pop two batches), so lowkiq handles Redis
    errors itself.  Pipelines still use the pool.
    """

    def __init__(self, template: redis.Redis, timeout: float | None = None) -> None:
        pool = template.connection_pool
        kwargs = {
            **pool.connection_kwargs,
            "decode_responses": False,
            "retry": Retry(NoBackoff(), 0),
        }
        if timeout is not None:
            # A Redis that hangs costs a call at most `timeout`, whatever the template says.
            kwargs.update(bounded_timeouts(kwargs, timeout))
        super().__init__(
            connection_pool=redis.ConnectionPool(connection_class=pool.connection_class, **kwargs)
        )
        # redis-py's connection class is untyped in parts: held as Any.
        self._private: Any = self.connection_pool.make_connection()
        register: Any = self._private.register_connect_callback
        register(self._on_connect)
        # Where script replies are read into, and parsed (see _round_trip).
        self._buffer = bytearray(65536)
        self._reader: Any = None
        # (function or sha, keys, args) -> the packed command of pack_script.
        self._packed_scripts: dict[tuple[Any, ...], bytes] = {}

    def _on_connect(self, connection: Any) -> None:
        """A new socket: let the kernel time it out (see :func:`kernel_timeouts`), and
        read script replies with a reader of its own."""
        kernel_timeouts(connection._sock, connection.socket_timeout)
        if _hiredis_reader is not None:
            self._reader = _hiredis_reader(
                protocolError=InvalidResponse, replyError=connection._parser.parse_error
            )

    @property
    def socket_timeout(self) -> float | None:
        """Seconds a read may block before it fails (``None``: forever)."""
        timeout: float | None = self._private.socket_timeout
        return timeout

    def set_timeout(self, seconds: float | None) -> None:
        """Let a connect, and a read, block at most ``seconds`` (``None``: forever) from
        the next connection on; the current one is closed."""
        connection = self._private
        connection.socket_timeout = connection.socket_connect_timeout = seconds
        connection.disconnect()

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

    def run_script(self, script: Any, keys: Sequence[Any], args: Sequence[Any]) -> Any:
        """A script call (:class:`~lowkiq.storage.scripts.LuaScript`: ``FCALL`` or
        ``EVALSHA``) on the private connection, packed by hiredis and read without
        redis-py's reply callbacks (a script's reply has none); loads the script once
        when Redis lacks it.  The hot path of every ack and fail."""
        return self.run_packed(script, self.pack(*script.command(keys, args)))

    def run_command(self, command: KeyedCommand) -> Any:
        """One command of :meth:`run_keyed` (e.g. of :meth:`pack_script`) alone: its
        reply, an error reply raised; a script Redis lost is loaded and run again."""
        _, packed, script = command
        if script is None:
            return self._round_trip(packed)
        return self.run_packed(script, packed)

    def run_packed(self, script: Any, command: bytes) -> Any:
        """Send ``command`` (a call of ``script``, packed) and read its reply; loads the
        script once when Redis lacks it."""
        try:
            try:
                return self._round_trip(command)
            except ResponseError as exc:
                if not script.is_lost(exc, command):
                    raise
                return self._run_lost(script, command, exc)
        except (redis.ConnectionError, redis.TimeoutError):
            self._private.disconnect()
            raise

    def _run_lost(self, script: Any, command: bytes, reply: Exception) -> Any:
        """A call of ``script`` that Redis did not run (``reply``): load what it lacked on
        this connection's server only (a cluster's routing client is also its first
        master's), and send the call again."""
        script.load(reply, functools.partial(ThreadClient.execute_command, self))
        return self._round_trip(script.again_packed(command))

    def _round_trip(self, command: bytes) -> Any:
        """One command and its reply (an error reply raised)."""
        self.send(command)
        reply = self._reply()
        if isinstance(reply, redis.RedisError):
            raise reply
        return reply

    def run_many(self, commands: Sequence[bytes]) -> list[Any]:
        """Packed commands in one write, and their replies; an error reply is returned
        as its exception, not raised."""
        self.send(b"".join(commands))
        return self.replies(len(commands))

    def pack(self, *command: Any) -> bytes:
        """``command`` in the Redis protocol, for :meth:`run_many` or :meth:`run_keyed`."""
        return b"".join(pack_chunks(self._private, command))

    def pack_script(self, script: Any, keys: tuple[Any, ...], args: tuple[Any, ...]) -> bytes:
        """A call of ``script`` (:class:`~lowkiq.storage.scripts.LuaScript`), packed once
        for a call repeated with the same keys and arguments (a shard's pop, its head)."""
        command = script.command(keys, args)
        memo = (command[1], keys, args)  # the function's name or the script's SHA1
        packed = self._packed_scripts.get(memo)
        if packed is None:
            if len(self._packed_scripts) >= MAX_PACKED:
                self._packed_scripts.clear()
            packed = self.pack(*command)
            self._packed_scripts[memo] = packed
        return packed

    def run_keyed(self, commands: Sequence[KeyedCommand]) -> list[Any]:
        """Packed commands ``(first key, bytes, script or None)`` in one write, and their
        replies; an error reply is returned as its exception.  A script Redis lost
        is loaded and run again.  (A cluster's client sends a write per master, routed
        by the keys.)"""
        replies = self.run_many([packed for _, packed, _ in commands])
        for index, reply in enumerate(replies):
            script: Any = commands[index][2]
            if script is not None and script.is_lost(reply, commands[index][1]):
                replies[index] = _reply_or_error(self._run_lost, script, commands[index][1], reply)
        return replies

    def send(self, command: bytes) -> None:
        """Send packed commands on the private connection (connecting first); their
        replies are read with :meth:`replies`.  A failure closes the connection."""
        connection = self._private
        sock = connection._sock
        if sock is None or self._reader is None:  # not connected yet, or no hiredis
            connection.send_packed_command([command], check_health=False)
            return
        try:
            sock.sendall(command)
        except BaseException as exc:
            self._fail(exc)

    def replies(self, count: int) -> list[Any]:
        """The next ``count`` replies on the private connection; an error reply is
        returned as its exception.  A failure closes the connection."""
        return [self._reply() for _ in range(count)]

    def _reply(self) -> Any:
        reader = self._reader
        if reader is None:  # no hiredis: redis-py reads
            return read_reply(self._private)
        sock, buffer = self._private._sock, self._buffer
        try:
            reply = reader.gets()
            while reply is False:
                size = sock.recv_into(buffer)
                if not size:
                    raise redis.ConnectionError("Connection closed by server.")
                reader.feed(buffer, 0, size)
                reply = reader.gets()
        except BaseException as exc:
            self._fail(exc)
        return reply

    def _fail(self, exc: BaseException) -> NoReturn:
        """Close the private connection after ``exc`` (a reply may be left unread) and
        raise it, a socket's error as a Redis error."""
        self._private.disconnect()
        if isinstance(exc, (TimeoutError, BlockingIOError)):  # Python's or the kernel's
            raise redis.TimeoutError(f"Timeout talking to Redis: {exc}") from exc
        if isinstance(exc, OSError):
            raise redis.ConnectionError(f"Error talking to Redis: {exc}") from exc
        raise exc

    def disconnect(self) -> None:
        """Close the private connection; the next command connects again."""
        self._private.disconnect()

    def close(self) -> None:
        """Close the private connection and the pool."""
        self._private.disconnect()
        super().close()


def bounded_timeouts(kwargs: dict[str, Any], timeout: float) -> dict[str, float]:
    """A connection's socket and connect timeouts of ``kwargs`` bounded by ``timeout``
    seconds (a timeout of its own that is shorter is kept)."""
    bounded = {}
    for name in ("socket_timeout", "socket_connect_timeout"):
        own = kwargs.get(name)
        bounded[name] = timeout if own is None else min(own, timeout)
    return bounded


def _reply_or_error(run: Callable[..., Any], *args: Any) -> Any:
    """``run(*args)``, or the error reply it raised."""
    try:
        return run(*args)
    except ResponseError as exc:
        return exc


def kernel_timeouts(sock: Any, timeout: float | None) -> None:
    """Make a plain socket blocking, its reads and writes timed out by the kernel
    (``SO_RCVTIMEO``, ``SO_SNDTIMEO``) after ``timeout`` seconds.

    Python times a socket out by polling it before every send and receive: two
    more system calls per round trip, and two more releases of the GIL.  A timed
    out read then fails with ``EAGAIN``, which redis-py raises as a
    ``ConnectionError``.  TLS sockets, and platforms without these options, keep
    Python's timeout.
    """
    if not timeout or type(sock) is not socket.socket or sys.platform == "win32":
        return
    seconds = int(timeout)
    interval = struct.pack("ll", seconds, int((timeout - seconds) * 1e6))
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, interval)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, interval)
    except OSError:
        return
    sock.settimeout(None)
