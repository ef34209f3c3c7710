"""Which Redis lowkiq uses by default: REDIS_URL, the embedded development server only
when asked for, else redis://localhost:6379/0 with a one-line error when nothing answers."""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

import lowkiq
from lowkiq.clients import default_redis as source
from lowkiq.clients.embedded import EmbeddedServer, is_embedded
from lowkiq.errors import ConfigurationError, RedisUnavailable

#: A loopback port nothing listens on: stands in for an absent local Redis.
NOBODY = "redis://127.0.0.1:1/0"


@pytest.fixture
def bare_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """No REDIS_URL, no embedded switch, in an empty working directory."""
    monkeypatch.delenv("REDIS_URL", raising=False)
    monkeypatch.delenv(source.EMBEDDED_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    lowkiq.settings.reset()
    yield tmp_path
    lowkiq.settings.reset()


def stop_embedded(directory: Path) -> None:
    url = f"unix://{directory / 'redis.sock'}"
    EmbeddedServer(url=url, directory=directory).stop()


def test_without_redis_url_the_default_is_the_local_server_not_an_embedded_one(
    bare_environment: Path,
) -> None:
    assert source.default_url() == source.LOCAL_URL == "redis://localhost:6379/0"
    client = lowkiq.settings.redis()
    kwargs = client.connection_pool.connection_kwargs
    assert (kwargs["host"], kwargs["port"], kwargs.get("db", 0)) == ("localhost", 6379, 0)
    assert not (bare_environment / ".lowkiq").exists()


def test_redis_url_wins(bare_environment: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:7001/3")
    monkeypatch.setenv(source.EMBEDDED_ENV, "1")
    assert source.default_url() == "redis://127.0.0.1:7001/3"
    assert not source.falls_back_to_local(source.default_redis)


def test_the_embedded_switch_starts_a_development_server_and_says_where_its_data_lives(
    bare_environment: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(source.EMBEDDED_ENV, "1")
    caplog.set_level(logging.WARNING, logger="lowkiq.embedded")
    directory = bare_environment / ".lowkiq"
    try:
        client = lowkiq.settings.redis()
        assert client.ping()
        assert is_embedded(client)
        assert f"its data lives in {directory}" in caplog.text
        assert "embedded development Redis server" in caplog.text
    finally:
        stop_embedded(directory)


@pytest.mark.parametrize("value", ["maybe", "2"])
def test_a_bad_embedded_switch_is_rejected_by_name(
    bare_environment: Path, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv(source.EMBEDDED_ENV, value)
    with pytest.raises(ConfigurationError, match=source.EMBEDDED_ENV):
        source.default_url()


def test_nothing_at_the_local_url_is_a_one_line_error_saying_what_was_tried(
    bare_environment: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(source, "LOCAL_URL", NOBODY)
    with pytest.raises(RedisUnavailable) as caught:
        source.check_local_redis(lowkiq.settings.redis)
    message = str(caught.value)
    assert "\n" not in message
    assert NOBODY in message and "REDIS_URL" in message
    assert "redis-server" in message and source.EMBEDDED_ENV in message


def test_the_check_leaves_an_app_s_own_redis_alone(
    bare_environment: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(source, "LOCAL_URL", NOBODY)
    source.check_local_redis(lambda: redis.Redis.from_url(NOBODY))


def test_a_producer_without_redis_url_fails_instead_of_enqueueing_into_a_private_server(
    bare_environment: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(source, "LOCAL_URL", NOBODY)

    class OrderWorker(lowkiq.Worker):
        pass

    lowkiq.settings.workers = [OrderWorker]
    with pytest.raises(RedisUnavailable, match="REDIS_URL is unset, so lowkiq tried"):
        OrderWorker.perform_async([{"id": 1}])
    assert not (bare_environment / ".lowkiq").exists()


def test_a_redis_cluster_out_of_reach_at_start_passes_the_check_a_worker_then_waits() -> None:
    """A worker started while its cluster's nodes do not answer (a node restarting) waits
    for them, as on one server: building the cluster client fails, and the check lets it
    be (it crashed the worker before, with redis-py's RedisClusterException)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # nothing listens there once closed
    url = f"redis://127.0.0.1:{port}/0"
    source.check_redis_accepts(lambda: redis.RedisCluster.from_url(url, socket_connect_timeout=0.5))
