"""A worker process's server, built but not started: its dispatcher, the shards it was
assigned leased and taken in, for tests that drive the dispatcher and coordinator by
hand."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import redis

import lowkiq
from lowkiq.ownership.coordinator import Coordinator
from lowkiq.runtime.dispatcher import Dispatcher
from lowkiq.runtime.server import Server
from lowkiq.settings import Settings


@contextmanager
def built_server(
    redis_url: str,
    *workers: type[lowkiq.Worker],
    client_options: dict[str, Any] | None = None,
    **settings: Any,
) -> Iterator[tuple[Server, Coordinator, Dispatcher]]:
    """The server, its coordinator and its dispatcher (its executor not started), after
    the first beat; the process leaves the membership afterwards."""
    options = client_options or {}
    config = Settings(
        workers=list(workers),
        threads_per_node=1,
        redis=lambda: redis.Redis.from_url(redis_url, **options),
        **settings,
    )
    server = Server(config)
    coordinator = server.build()
    dispatcher = server.dispatcher
    assert dispatcher is not None
    try:
        coordinator.beat()
        dispatcher.apply()
        yield server, coordinator, dispatcher
    finally:
        coordinator.leave()
        dispatcher.client.close()
