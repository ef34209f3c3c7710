"""The dashboard's red banner when Redis may evict lowkiq's keys (its maxmemory-policy
is not noeviction), on every page."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from flask.testing import FlaskClient

import lowkiq
from lowkiq_web import overview


@pytest.fixture
def policy(redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The session's server under ``allkeys-lru`` for the test; the dashboard reads the
    policy afresh."""
    monkeypatch.setattr(overview, "_policy_read", {"at": -overview.POLICY_TTL, "problem": None})
    redis_client.config_set("maxmemory-policy", "allkeys-lru")
    try:
        yield
    finally:
        redis_client.config_set("maxmemory-policy", "noeviction")


def banner(client: FlaskClient, path: str = "/") -> str | None:
    page = client.get(path).get_data(as_text=True)
    start = page.find('class="flash banner-eviction"')
    if start < 0:
        return None
    return page[start : page.index("</div>", start)]


def test_no_banner_under_noeviction(client: FlaskClient, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(overview, "_policy_read", {"at": -overview.POLICY_TTL, "problem": None})
    assert banner(client) is None


@pytest.mark.usefixtures("policy")
def test_a_red_banner_names_the_policy_and_the_fix(client: FlaskClient) -> None:
    shown = banner(client)
    assert shown is not None
    assert "maxmemory-policy allkeys-lru" in shown
    assert "set maxmemory-policy noeviction" in shown
    assert "A worker process refuses to start on it unless its settings.allow_eviction" in shown
    assert banner(client, "/processes") == shown


@pytest.mark.usefixtures("policy")
def test_the_web_process_own_allow_eviction_does_not_change_what_workers_do(
    client: FlaskClient,
) -> None:
    lowkiq.settings.allow_eviction = True  # this web process's setting, not the workers'
    shown = banner(client)
    assert shown is not None
    assert "allkeys-lru" in shown
    assert "A worker process refuses to start on it unless its settings.allow_eviction" in shown
    assert "all the same" not in shown
