"""How a Redis server is named in logs and on the dashboard (its URL, never a secret), and
commands sent pipelined on a connection of a pool."""

from __future__ import annotations

import pytest
import redis

from lowkiq.clients.connection import describe_redis, pipelined


@pytest.mark.parametrize(
    ("url", "described"),
    [
        ("redis://me:s3cret@cache.example:6380/2", "redis://cache.example:6380/2"),
        ("rediss://:s3cret@cache.example:6380/0", "rediss://cache.example:6380/0"),
        ("redis://[::1]:6379/1", "redis://[::1]:6379/1"),
        ("unix:///tmp/redis.sock", "unix:///tmp/redis.sock"),
        ("unix://:s3cret@/tmp/redis.sock?db=3", "unix:///tmp/redis.sock?db=3"),
    ],
)
def test_a_server_is_described_by_its_url_without_credentials(url: str, described: str) -> None:
    assert describe_redis(redis.Redis.from_url(url)) == described


# -- pipelined ---------------------------------------------------------------------


def test_pipelined_replies_come_in_order_with_an_error_reply_in_its_place(redis_client):
    replies = pipelined(redis_client, [("SET", "k", "v"), ("INCR", "k"), ("GET", "k")], False)
    assert replies[0] == b"OK"  # the raw reply: no response callbacks
    assert isinstance(replies[1], redis.ResponseError)
    assert replies[2] == b"v"
    assert redis_client.connection_pool._in_use_connections == set()


def test_a_pipelined_transaction_returns_exec_replies_with_runtime_errors_in_place(redis_client):
    replies = pipelined(redis_client, [("SET", "k", "v"), ("INCR", "k"), ("GET", "k")], True)
    assert isinstance(replies[1], redis.ResponseError)
    assert replies[2] == b"v"


def test_a_command_redis_refuses_to_queue_aborts_the_transaction(redis_client):
    with pytest.raises(redis.ResponseError, match="wrong number of arguments"):
        pipelined(redis_client, [("SET", "k", "v"), ("GET",)], True)
    assert redis_client.get("k") is None
    assert redis_client.connection_pool._in_use_connections == set()
    # The connection went back to the pool clean: the next command reads its own reply.
    assert redis_client.ping()
