"""A processing thread's client: script calls on one private connection, timed out by
the kernel, their commands packed once where only the time changes."""

from __future__ import annotations

import socket
import time
from typing import Any

import pytest
import redis

from lowkiq.clients.thread import ThreadClient
from lowkiq.storage.functions import CallMode
from lowkiq.storage.scripts import LuaScript

ECHO = "return {KEYS[1], ARGV[1], ARGV[2], ARGV[3]}"


def script_of(client: ThreadClient, text: str) -> LuaScript:
    """``text`` as a script the thread client runs by EVALSHA (no functions library)."""
    return LuaScript(client, "test", text, CallMode(None))


@pytest.fixture
def client(redis_url: str) -> ThreadClient:
    return ThreadClient(redis.Redis.from_url(redis_url, socket_timeout=0.5))


def around(client: ThreadClient, script: Any, before: str, value: float, after: object) -> Any:
    """``script`` on the key ``k`` with the arguments ``before, value, after``, packed by
    pack_script and run alone."""
    packed = client.pack_script(script, ("k",), (before, value, after))
    return client.run_command(("k", packed, script))


@pytest.fixture
def timed_client(client: ThreadClient) -> ThreadClient:
    if client.socket_timeout is None:  # redis-py 5.0 loses a unix socket's timeout
        pytest.skip("this redis-py makes the connection without its socket_timeout")
    return client


def test_a_packed_command_sends_what_run_script_sends(client: ThreadClient) -> None:
    script = script_of(client, ECHO)
    for now in (1795431310.0303938, 100, 0.1, time.time()):
        packed = around(client, script, "token", now, 7)
        assert float(client.run_script(script, ["k"], ["token", now, 7])[2]) == now
        assert packed[:2] == [b"k", b"token"] and packed[3] == b"7"
        assert float(packed[2]) == now  # the very same number


def test_a_script_redis_lost_is_loaded_again(
    client: ThreadClient, redis_client: redis.Redis
) -> None:
    script = script_of(client, ECHO)
    assert around(client, script, "a", 1.5, "b")[2] == b"1.5"
    redis_client.script_flush()  # as after a restart
    assert around(client, script, "a", 2.5, "b")[2] == b"2.5"


def test_an_error_reply_is_raised_and_the_connection_goes_on(client: ThreadClient) -> None:
    failing = script_of(client, "return redis.error_reply('FENCED no lease')")
    with pytest.raises(redis.ResponseError, match="FENCED"):
        client.run_script(failing, ["k"], [])
    assert around(client, script_of(client, ECHO), "a", 1.0, "b")


def test_the_kernel_times_a_silent_server_out(timed_client: ThreadClient) -> None:
    client = timed_client
    client.ping()
    sock = client._private._sock
    assert sock.gettimeout() is None  # no poll before each send and receive
    slow = script_of(client, "local t = redis.call('time') return 1")
    client.run_script(slow, ["k"], [])
    # A blocked read (BLPOP on an empty list past the socket timeout) fails in time.
    started = time.monotonic()
    with pytest.raises((redis.TimeoutError, redis.ConnectionError)):
        client.blpop(["lowkiq:test:nothing"], timeout=3)
    assert time.monotonic() - started < 2
    # The next call reconnects, with the kernel's timeout again.
    assert client.run_script(slow, ["k"], []) == 1
    assert client._private._sock.gettimeout() is None
    assert client._private._sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, 16) != bytes(16)


def test_a_script_reply_later_than_the_socket_timeout_fails_in_time(
    timed_client: ThreadClient,
) -> None:
    client = timed_client
    busy = script_of(
        client,
        "local t = redis.call('time') local start = t[1] * 1e6 + t[2] "
        "repeat t = redis.call('time') until t[1] * 1e6 + t[2] - start > 900000 return 1",
    )
    started = time.monotonic()
    with pytest.raises(redis.TimeoutError):
        client.run_script(busy, ["k"], [])
    assert time.monotonic() - started < 0.85
    time.sleep(0.5)  # the script ends; its late reply went with the closed connection
    assert float(around(client, script_of(client, ECHO), "a", 1.0, "b")[2]) == 1.0


def test_run_keyed_sends_commands_in_one_write_and_reloads_a_lost_script(
    client: ThreadClient, redis_client: redis.Redis
) -> None:
    script = script_of(client, ECHO)
    client.run_script(script, ["k"], ["a", 1, "b"])
    redis_client.script_flush()
    redis_client.zadd("z", {"a": 1.5})
    commands = [
        ("z", client.pack("ZRANGE", "z", 0, 0, "WITHSCORES"), None),
        ("k", client.pack("EVALSHA", script.sha, 1, "k", "a", 2, "b"), script),
        ("z", client.pack("ZINCRBY", "z", "x", "a"), None),
    ]
    zrange, echo, error = client.run_keyed(commands)
    assert zrange in ([b"a", b"1.5"], [[b"a", 1.5]])  # RESP2, RESP3
    assert echo == [b"k", b"a", b"2", b"b"]
    assert isinstance(error, redis.ResponseError)
    assert client.ping()


def test_an_error_reply_redis_py_counts_as_a_connection_error_is_raised(
    client: ThreadClient,
) -> None:
    loading = script_of(client, "return redis.error_reply('LOADING Redis is loading')")
    with pytest.raises(redis.BusyLoadingError):  # a ConnectionError, not a ResponseError
        client.run_script(loading, ["k"], [])
    (reply,) = client.run_keyed([("k", client.pack("EVALSHA", loading.sha, 1, "k"), loading)])
    assert isinstance(reply, redis.BusyLoadingError)
    assert client.ping()
