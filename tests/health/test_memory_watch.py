"""What a worker's memory watch says of what it read: a lasting condition once a minute,
a change at once, evicted keys at most once a minute (its reads are plain values here;
tests/test_redis_memory.py runs it against real servers)."""

from __future__ import annotations

import logging

import pytest

from lowkiq.clients.memory_policy import MemoryReport, NodeMemory
from lowkiq.health.heartbeats import RedisMemory
from lowkiq.health.memory_watch import MemoryWatch


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def report(policy: str = "noeviction", used: int = 10, maxmemory: int = 0, evicted: int = 0):
    return MemoryReport([NodeMemory("redis:6379", policy, used, maxmemory, evicted)])


def watch(allow_eviction: bool = False) -> tuple[MemoryWatch, Clock, RedisMemory]:
    clock, state = Clock(), RedisMemory()
    return MemoryWatch(None, allow_eviction, state, clock=clock), clock, state  # type: ignore[arg-type]


def lines(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str]]:
    found = [(record.levelname, record.getMessage()) for record in caplog.records]
    caplog.clear()
    return found


def test_a_full_redis_is_said_at_once_then_once_a_minute_and_its_end(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "lowkiq.redis")
    memory, clock, state = watch()
    memory.observe(report())
    assert lines(caplog) == [] and state.full is None
    memory.observe(report(used=2048, maxmemory=1024))
    said = lines(caplog)
    assert said == [("WARNING", state.full)]
    assert state.full is not None and state.full.startswith(
        "Redis is full (maxmemory 1.00K, used 2.00K on redis:6379)"
    )
    for n in range(19):  # every 3 s for 57 s, the figures changing: nothing more
        clock.now += 3
        memory.observe(report(used=2048 - n, maxmemory=1024))
    assert lines(caplog) == []
    clock.now += 3
    memory.observe(report(used=2048, maxmemory=1024))
    assert lines(caplog) == [("WARNING", state.full)]
    memory.observe(report(used=512, maxmemory=1024))
    assert lines(caplog) == [("INFO", "Redis is no longer full: it takes new jobs again")]
    assert state.full is None


def test_a_policy_turned_evicting_is_an_error_naming_server_and_policy(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "lowkiq.redis")
    memory, clock, state = watch()
    memory.observe(report())
    memory.observe(report("allkeys-lru"))
    [(level, message)] = lines(caplog)
    assert level == "ERROR" and "redis:6379 has maxmemory-policy allkeys-lru" in message
    assert state.eviction is not None and not state.allow_eviction
    clock.now += 60
    memory.observe(report("allkeys-lru"))
    assert [level for level, _ in lines(caplog)] == ["ERROR"]
    memory.observe(report())
    assert "no longer evicts" in lines(caplog)[0][1]
    assert state.eviction is None


def test_with_allow_eviction_evicted_keys_are_said_at_most_once_a_minute(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "lowkiq.redis")
    memory, clock, state = watch(allow_eviction=True)
    memory.observe(report("allkeys-lru", evicted=5))  # the start warned already
    assert lines(caplog) == [] and state.allow_eviction
    clock.now += 3
    memory.observe(report("allkeys-lru", evicted=8))
    [(level, message)] = lines(caplog)
    assert level == "WARNING" and message.startswith("Redis evicted 3 key(s)")
    assert "evicted_keys in INFO stats went from 5 to 8" in message and "allkeys-lru" in message
    clock.now += 30
    memory.observe(report("allkeys-lru", evicted=100))
    assert lines(caplog) == []
    clock.now += 30
    memory.observe(report("allkeys-lru", evicted=100))
    assert lines(caplog)[0][1].startswith("Redis evicted 92 key(s)")
    clock.now += 60
    memory.observe(report("allkeys-lru", evicted=100))
    assert lines(caplog) == []
