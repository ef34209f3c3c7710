"""How a Redis server is named in logs and on the dashboard: its URL, never a secret."""

from __future__ import annotations

import pytest
import redis

from lowkiq.connection import describe_redis


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
