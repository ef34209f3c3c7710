"""A worker process's server, built but not started: one processing thread, the shards it
was assigned leased and taken in, for tests that drive the thread and coordinator by hand."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import redis

import lowkiq
from lowkiq.ownership.coordinator import Coordinator
from lowkiq.processing_thread import ProcessingThread
from lowkiq.server import Server
from lowkiq.settings import Settings


@contextmanager
def one_thread(
    redis_url: str,
    *workers: type[lowkiq.Worker],
    client_options: dict[str, Any] | None = None,
    **settings: Any,
) -> Iterator[tuple[Server, Coordinator, ProcessingThread]]:
    """The server, its coordinator and its one thread, after the first beat; the process
    leaves the membership afterwards."""
    options = client_options or {}
    config = Settings(
        workers=list(workers),
        threads_per_node=1,
        redis=lambda: redis.Redis.from_url(redis_url, **options),
        **settings,
    )
    server = Server(config)
    coordinator = server.build()
    (thread,) = server.lanes
    try:
        coordinator.beat()
        thread.apply()
        yield server, coordinator, thread
    finally:
        coordinator.leave()
        thread.client.close()
