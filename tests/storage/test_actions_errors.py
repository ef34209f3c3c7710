"""What an operator's call says when it cannot act: a move's ``to=`` that is not a worker
class, and Redis out of reach for ``actions()`` and ``queries()`` (a real server, stopped)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import redis

import lowkiq
from lowkiq.clients.embedded import start_server


class Archive(lowkiq.Worker):
    """A move's target."""

    shards_count = 2


def test_move_to_a_name_raises_type_error_saying_what_to_takes(worker: Any) -> None:
    worker.perform_async([{"id": "a"}])
    with pytest.raises(TypeError, match=r"takes a worker class .*not 'Archive'.*a name"):
        worker.actions().move(["a"], to="Archive")
    with pytest.raises(TypeError, match="takes a worker class"):
        worker.actions().move(["a"], to=Archive())
    assert [job["id"] for job in worker.queries().fetch(["a"])] == ["a"]


class Orders(lowkiq.Worker):
    """A worker whose Redis goes away."""

    shards_count = 2


def test_actions_and_queries_on_a_redis_out_of_reach_raise_redis_unavailable(
    tmp_path: Path,
) -> None:
    server = start_server(tmp_path / "redis")
    lowkiq.settings.reset()
    lowkiq.settings.redis = lambda: redis.Redis.from_url(server.url, socket_timeout=2)
    lowkiq.settings.workers = [Orders, Archive]
    try:
        Orders.perform_async([{"id": "a"}])
        actions, queries = Orders.actions(), Orders.queries()
        server.stop()
        calls = {
            "actions().kill": lambda: actions.kill(["a"]),
            "actions().move": lambda: actions.move(["a"], to=Archive),
            "actions().clear": actions.clear,
            "queries().fetch": lambda: queries.fetch(["a"]),
            "queries().processing_data": queries.processing_data,
        }
        for name, call in calls.items():
            with pytest.raises(
                lowkiq.RedisUnavailable, match=re.escape(f"Orders.{name}: Redis is unreachable")
            ):
                call()
        lowkiq.settings.redis = lambda: redis.Redis.from_url(server.url, socket_timeout=2)
        with pytest.raises(lowkiq.RedisUnavailable, match=r"Orders\.actions\(\)"):
            Orders.actions()
        with pytest.raises(lowkiq.RedisUnavailable, match=r"Orders\.queries\(\)"):
            Orders.queries()
    finally:
        server.stop()
        lowkiq.settings.reset()
