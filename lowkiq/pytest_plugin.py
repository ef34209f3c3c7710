"""The ``lowkiq_redis`` pytest fixture, registered as a pytest plugin when lowkiq is
installed (entry point ``pytest11``); it needs ``lowkiq[embedded]``.

The fixture starts one embedded Redis server per test session (in pytest's
temporary directory), empties it before each test, and resets
``lowkiq.settings`` to its defaults pointed at that server, before and after
the test; enqueue and :func:`lowkiq.testing.drain` then work on it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from lowkiq.clients.embedded import EmbeddedServer, start_server
from lowkiq.settings import settings


@pytest.fixture(scope="session")
def lowkiq_redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedServer]:
    """The session's embedded Redis server (started on first use, stopped at the end)."""
    server = start_server(tmp_path_factory.mktemp("lowkiq-redis"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def lowkiq_redis(lowkiq_redis_server: EmbeddedServer) -> Iterator[redis.Redis]:
    """A client of an empty Redis, with ``lowkiq.settings`` reset and pointed at it."""
    client = lowkiq_redis_server.client()
    client.flushall()
    settings.reset()
    settings.redis = lowkiq_redis_server.client
    try:
        yield client
    finally:
        settings.reset()
        client.close()
