"""Each Lua script carries only the helpers and key names it uses, and every script loads."""

from __future__ import annotations

import re

import pytest
import redis
from lua_bytecode import globals_of

import lowkiq
from lowkiq.storage.scripts import SCRIPT_NAMES, source


def test_every_script_loads_into_redis(redis_client):
    for name in SCRIPT_NAMES:
        assert len(redis_client.script_load(source(name))) == 40, name


def test_a_script_carries_the_helpers_it_uses_and_not_the_others():
    ack = source("ack")
    assert "local function ack_processing" in ack
    assert "processing_hash = prefix" in ack and "processed_counter = prefix" in ack
    assert "blob_merge" not in ack and "fresh_lex_zset" not in ack
    # pop uses find_queued, which needs find_member: helpers bring their own helpers.
    pop = source("pop")
    assert "local function find_queued" in pop and "local function find_member" in pop
    # The rate-limit helpers come made by one helper, which only a rate-limited pop calls.
    assert "local function rate_limits" in pop and "\nlocal function clock_ms" not in pop


def test_every_helper_a_script_calls_is_defined_before_the_script():
    for name in SCRIPT_NAMES:
        text = source(name)
        helpers, own = text.split(f"-- {name}.lua\n")
        own = re.sub(r"--[^\n]*", "", own)  # comments name keys, not calls
        declared = re.findall(r"^ *local (?:function )?(\w+(?:, *\w+)*)", helpers + own, re.M)
        defined = {name for names in declared for name in re.split(r", *", names)}
        called = set(re.findall(r"(?<![\w.:])([a-z_]+)\(", own))
        lua_builtins = {"tonumber", "tostring", "ipairs", "pairs", "unpack", "math", "type"}
        assert called - defined - lua_builtins <= {"function"}, (name, called - defined)


def test_pipelined_calls_reload_scripts_a_restarted_redis_lost(redis_client):
    class SpreadWorker(lowkiq.Worker):
        shards_count = 4

    jobs = [{"id": n, "payload": n} for n in range(40)]
    SpreadWorker.perform_async(jobs[:20])
    redis_client.script_flush()  # as after a restart
    SpreadWorker.perform_async(jobs[20:])
    queued = SpreadWorker.queries().range_by_id("-", "+", limit=100)
    assert sorted(int(job["id"]) for job in queued) == list(range(40))
    assert all(len(job["payloads"]) == 1 for job in queued)
    assert SpreadWorker.metrics()["length"] == 40


#: What a lowkiq script may use as a global: Redis's API and Lua's standard library.
REDIS_GLOBALS = {"redis", "KEYS", "ARGV", "struct", "cjson", "cmsgpack", "bit", "string"}
LUA_GLOBALS = {"table", "math", "tonumber", "tostring", "ipairs", "pairs", "unpack", "type"}
LUA_GLOBALS |= {"error", "pcall", "select", "next", "assert", "setmetatable"}


def test_every_script_compiled_by_redis_uses_only_defined_helpers(redis_client):
    # SCRIPT LOAD compiles a misspelt helper call as a global read: only the bytecode,
    # compiled here by Redis's own Lua, shows it, whichever branch would run it.
    node = redis_client
    if isinstance(redis_client, redis.RedisCluster):
        node = redis_client.get_primaries()[0].redis_connection
    for name in SCRIPT_NAMES:
        for track_length in (0, 100):  # a tracked worker's scripts too (Worker.track)
            used = globals_of(node, source(name, track_length))
            assert used <= REDIS_GLOBALS | LUA_GLOBALS, (name, track_length)


def test_a_misspelt_or_later_defined_helper_is_a_global(redis_client):
    node = redis_client
    if isinstance(redis_client, redis.RedisCluster):
        node = redis_client.get_primaries()[0].redis_connection
    misspelt = source("ack").replace("return ack_processing(", "return ack_procesing(")
    assert "ack_procesing" in globals_of(node, misspelt)
    later = "local function a() return b() end\nlocal function b() return 1 end\nreturn a()"
    assert globals_of(node, later) == {"b"}
    with pytest.raises(redis.ResponseError):  # and Redis refuses it when it runs
        node.eval(later, 0)
