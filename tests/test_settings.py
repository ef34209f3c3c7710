"""``lowkiq.settings``: the documented defaults of SPEC §6, and unknown names or
bad values rejected with an error that names the setting."""

from __future__ import annotations

import threading
import time

import pytest
import redis

import lowkiq
from lowkiq.errors import ConfigurationError, LowkiqError
from lowkiq.serializers import dump_json, load_json
from lowkiq.settings import Settings
from tests.built_server import built_server

settings = lowkiq.settings


ENVIRONMENT = ("LOWKIQ_THREADS_PER_NODE", "LOWKIQ_NUMBER_OF_NODES", "LOWKIQ_NODE_NUMBER")


@pytest.fixture(autouse=True)
def fresh_settings(monkeypatch):
    for name in ENVIRONMENT:
        monkeypatch.delenv(name, raising=False)
    settings.reset()
    yield
    for name in ENVIRONMENT:
        monkeypatch.delenv(name, raising=False)
    settings.reset()


def test_defaults():
    assert settings.workers == []
    assert callable(settings.redis)
    assert settings.poll_interval == 1.0
    assert settings.threads_per_node == 5
    assert settings.client_pool_size == 5
    assert settings.pool_timeout == 5
    assert settings.server_middlewares == []
    assert settings.client_middlewares == []
    assert settings.on_server_init() is None
    assert settings.build_scheduler is lowkiq.build_lag_scheduler
    assert settings.build_splitter is lowkiq.build_default_splitter
    assert settings.last_words(RuntimeError("x")) is None
    assert settings.dump_payload is dump_json
    assert settings.load_payload is load_json
    assert settings.format_error(ValueError("why")) == "ValueError: why"
    assert settings.dump_error("text") == "text"
    assert settings.load_error("text") == "text"


def test_reset_restores_the_defaults():
    settings.poll_interval = 0.25
    settings.client_middlewares = [lambda w, j, n: n(w, j)]
    settings.reset()
    assert settings.poll_interval == 1.0
    assert settings.client_middlewares == []


@pytest.mark.parametrize("name", ["thread_per_node", "redis_url", "middlewares", "Workers"])
def test_an_unknown_setting_name_is_rejected_by_name(name):
    with pytest.raises(ConfigurationError, match=name) as caught:
        setattr(settings, name, 1)
    assert isinstance(caught.value, LowkiqError)
    assert not hasattr(settings, name)


class NotAWorker:
    pass


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("poll_interval", 0),
        ("poll_interval", -1),
        ("poll_interval", "1"),
        ("poll_interval", True),
        ("threads_per_node", 0),
        ("threads_per_node", 2.5),
        ("threads_per_node", "5"),
        ("client_pool_size", 0),
        ("client_pool_size", None),
        ("pool_timeout", 0),
        ("pool_timeout", "5"),
        ("server_middlewares", "mw"),
        ("server_middlewares", [1]),
        ("client_middlewares", lambda w, j, n: None),
        ("client_middlewares", [None]),
        ("on_server_init", 5),
        ("last_words", None),
        ("redis", "redis://localhost:6379"),
        ("build_scheduler", "lag"),
        ("build_splitter", 3),
        ("dump_payload", None),
        ("load_payload", "json"),
        ("format_error", 1),
        ("dump_error", 1),
        ("load_error", 1),
        ("workers", NotAWorker),
        ("workers", [NotAWorker]),
        ("workers", [lowkiq.Worker()]),
        ("workers", "OrderWorker"),
    ],
)
def test_a_bad_value_is_rejected_by_name_and_not_kept(name, value):
    before = getattr(settings, name)
    with pytest.raises(ConfigurationError, match=name):
        setattr(settings, name, value)
    assert getattr(settings, name) == before


def test_two_workers_sharing_a_queue_name_are_rejected():
    class First(lowkiq.Worker):
        queue_name = "orders"

    class Second(lowkiq.Worker):
        queue_name = "orders"

    with pytest.raises(ConfigurationError, match="orders"):
        settings.workers = [First, Second]


def test_good_values_are_kept():
    class OrderWorker(lowkiq.Worker):
        pass

    settings.workers = [OrderWorker]
    settings.poll_interval = 0.5
    settings.threads_per_node = 2
    settings.build_scheduler = lowkiq.build_seq_scheduler
    assert settings.workers == [OrderWorker]
    assert (settings.poll_interval, settings.threads_per_node) == (0.5, 2)
    assert settings.build_scheduler is lowkiq.build_seq_scheduler


def test_threads_per_node_is_read_from_the_environment(monkeypatch):
    monkeypatch.setenv("LOWKIQ_THREADS_PER_NODE", "3")
    settings.reset()
    assert settings.threads_per_node == 3


@pytest.mark.parametrize("value", ["abc", "0", "-2"])
def test_a_bad_threads_per_node_in_the_environment_is_rejected_by_name(monkeypatch, value):
    monkeypatch.setenv("LOWKIQ_THREADS_PER_NODE", value)
    with pytest.raises(ConfigurationError, match="(?i)threads_per_node"):
        settings.reset()


def test_the_default_redis_factory_reads_redis_url(monkeypatch, redis_url):
    monkeypatch.setenv("REDIS_URL", redis_url)
    settings.reset()
    client = settings.redis()
    assert isinstance(client, redis.Redis)
    marker = redis.Redis.from_url(redis_url)
    marker.set("lowkiq-settings-test", "here")
    try:
        assert client.get("lowkiq-settings-test") == b"here"
    finally:
        marker.delete("lowkiq-settings-test")


def test_client_pool_size_and_pool_timeout_bound_the_shared_client(redis_url):
    settings.redis = lambda: redis.Redis.from_url(redis_url)
    settings.client_pool_size = 2
    settings.pool_timeout = 0.2
    client = settings.client()
    # Two blocking reads hold both connections; a third command waits pool_timeout, then fails.
    holders = [
        threading.Thread(target=client.blpop, args=([f"lowkiq-test-nothing-{n}"], 1))
        for n in range(2)
    ]
    for holder in holders:
        holder.start()
    time.sleep(0.3)
    try:
        started = time.monotonic()
        with pytest.raises(redis.ConnectionError):
            client.ping()
        assert time.monotonic() - started < 0.9
    finally:
        for holder in holders:
            holder.join()
    assert settings.client().ping()


def test_changing_redis_replaces_the_shared_client(redis_url):
    settings.redis = lambda: redis.Redis.from_url(redis_url)
    first = settings.client()
    assert settings.client() is first
    settings.redis = lambda: redis.Redis.from_url(redis_url)
    assert settings.client() is not first


def test_a_redis_factory_that_decodes_responses_still_works(redis_client, redis_url):
    settings.redis = lambda: redis.Redis.from_url(redis_url, decode_responses=True)

    class OrderWorker(lowkiq.Worker):
        shards_count = 2

    settings.workers = [OrderWorker]
    OrderWorker.perform_async([{"id": 1, "payload": {"a": "é"}, "score": 1}])
    [job] = OrderWorker.queries().fetch([1])
    assert job["payloads"] == [[{"a": "é"}, 1.0]]
    assert lowkiq.stats()["by_worker"]["OrderWorker"]["length"] == 1


def test_a_settings_object_is_independent_of_the_global_one():
    config = Settings(threads_per_node=2, poll_interval=0.5)
    assert (config.threads_per_node, config.poll_interval) == (2, 0.5)
    assert (settings.threads_per_node, settings.poll_interval) == (5, 1.0)
    with pytest.raises(ConfigurationError, match="threads_per_node"):
        Settings(threads_per_node=0)
    with pytest.raises(ConfigurationError, match="thread_per_node"):
        config.thread_per_node = 2


def test_a_server_runs_with_the_settings_it_was_given(redis_client, redis_url):
    class OrderWorker(lowkiq.Worker):
        shards_count = 6

    def dump_upper(payload):
        return str(payload).upper()

    settings.threads_per_node = 3
    with built_server(redis_url, OrderWorker, dump_payload=dump_upper) as (_, _, dispatcher):
        assert dispatcher.executor.size == 1
        assert len(dispatcher.handlers) == 6
        assert {h.queue.codec.dump_payload for h in dispatcher.handlers} == {dump_upper}


def test_inside_own_connection_a_thread_gets_a_client_of_its_own(redis_url, redis_client):
    shared = lowkiq.settings.client()
    seen: dict[str, object] = {}

    def executor_thread(name: str) -> None:
        with lowkiq.settings.own_connection():
            client = lowkiq.settings.client()
            assert client is lowkiq.settings.client()  # made once for the thread
            assert client.incr("counter")  # a working client of the same Redis
            seen[name] = client

    threads = [threading.Thread(target=executor_thread, args=(n,)) for n in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert seen["a"] is not seen["b"] and shared not in seen.values()
    assert lowkiq.settings.client() is shared  # outside, the shared client
    assert redis_client.get("counter") == b"2"
