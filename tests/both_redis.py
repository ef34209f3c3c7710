"""``redis_client`` on both kinds of Redis: a test module (or conftest) that imports
:func:`server_or_cluster_client` runs each of its tests on the session's single server
and on its 3-master Redis Cluster."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import redis

from lowkiq.clients.connection import Client
from tests.conftest import lowkiq_on


@pytest.fixture(name="redis_client", params=["server", "cluster"])
def server_or_cluster_client(request: pytest.FixtureRequest, redis_url: str) -> Iterator[Client]:
    """A client of the session's single server or of its cluster, on a flushed database,
    with ``lowkiq.settings`` pointed at the same Redis."""
    if request.param == "server":
        make: Callable[[], Client] = lambda: redis.Redis.from_url(redis_url)  # noqa: E731
    else:
        url = request.getfixturevalue("redis_cluster").url
        make = lambda: redis.RedisCluster.from_url(url)  # noqa: E731
    with lowkiq_on(make) as client:
        yield client
