"""The dashboard learns within seconds that Redis's maxmemory-policy changed while it
runs (the red banner), and that Redis is full (its Redis data)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from flask.testing import FlaskClient

from lowkiq_web import overview
from tests.apps.runner import eventually
from tests.web.test_web_eviction import banner


@pytest.fixture
def session_redis(
    redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> Iterator[redis.Redis]:
    """The session's server, its policy and maxmemory put back after the test; the
    dashboard reads them afresh."""
    monkeypatch.setattr(overview, "_policy_read", {"at": -overview.POLICY_TTL, "problem": None})
    try:
        yield redis_client
    finally:
        redis_client.config_set("maxmemory-policy", "noeviction")
        redis_client.config_set("maxmemory", 0)


def test_a_policy_changed_while_the_dashboard_runs_shows_within_seconds(
    client: FlaskClient, session_redis: redis.Redis
) -> None:
    assert banner(client) is None  # read: noeviction
    session_redis.config_set("maxmemory-policy", "allkeys-lru")
    shown = eventually(lambda: banner(client), timeout=10, interval=0.5)
    assert "maxmemory-policy allkeys-lru" in shown


def test_a_full_redis_is_in_the_dashboards_redis_data(
    client: FlaskClient, session_redis: redis.Redis
) -> None:
    assert overview.redis_info()["full"] is None
    session_redis.config_set("maxmemory", 1)
    full = eventually(lambda: overview.redis_info()["full"], timeout=10, interval=0.5)
    assert full.startswith("Redis is full (maxmemory 1B, used ")
