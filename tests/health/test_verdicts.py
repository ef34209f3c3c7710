"""The /live and /ready verdicts from heartbeats on a fake clock (no Redis, no process)."""

from __future__ import annotations

import pytest
import redis

import lowkiq
from lowkiq.health.heartbeats import Heartbeats
from lowkiq.health.verdicts import Limits, ProcessState, live, ready, silent_after
from lowkiq.running import Running, running
from lowkiq.runtime.shard_handler import ShardHandler
from lowkiq.settings import Settings
from tests.moved_clock import Clock

LIMITS = Limits(stuck_after=30.0, silent_after=60.0, connected_within=10.0)
SERVING = ProcessState(process_id="h:1:x", shards=["q:0"], busy=0)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def beats(clock: Clock) -> Heartbeats:
    """A registered process whose two threads and coordinator just stamped."""
    heartbeats = Heartbeats(clock)
    heartbeats.coordinator.succeeded()
    for number in (0, 1):
        heartbeats.thread(number).stamp()
    return heartbeats


def test_a_process_whose_loops_stamp_is_live_and_ready(beats: Heartbeats, clock: Clock) -> None:
    clock.now += 5
    for verdict in (live(beats, SERVING, LIMITS), ready(beats, SERVING, LIMITS)):
        assert verdict.ok and verdict.reason == ""
        document = verdict.document()
        assert document["shards"] == ["q:0"] and document["registered"]
        assert [t["beat_age"] for t in document["threads"]] == [5.0, 5.0]
        assert document["coordinator"]["last_success_age"] == 5.0


def test_before_its_first_heartbeat_reaches_redis_a_process_is_live_not_ready(
    clock: Clock,
) -> None:
    beats = Heartbeats(clock)
    assert live(beats, ProcessState(), LIMITS).ok
    verdict = ready(beats, ProcessState(), LIMITS)
    assert not verdict.ok and verdict.reason.startswith("not registered yet")


def test_a_perform_past_stuck_after_is_not_live_until_it_ends(
    beats: Heartbeats, clock: Clock
) -> None:
    thread = beats.thread(1)
    seen: list[str] = []

    class Orders(lowkiq.Worker):
        shards_count = 4

    def perform(worker: object, batch: dict) -> None:
        clock.now += 31
        verdict = live(beats, SERVING, LIMITS)
        seen.append(verdict.reason)
        assert verdict.document()["threads"][1]["performing"] == {"shard": "Orders:3", "for": 31.0}

    # A handler is made without Redis (nothing here connects).
    handler = ShardHandler(Orders, 3, Orders.queue(redis.Redis(port=1), Settings()), "1 h:1:x")
    context = running.set(Running(handler, []))
    try:
        thread.middleware(Orders, {}, perform)
    finally:
        running.reset(context)
    assert seen == ["thread 1 in perform of Orders:3 for 31.0s (stuck_after 30s)"]
    # The other thread stamped 31 s ago: within silent_after.
    assert live(beats, SERVING, LIMITS).ok


def test_a_silent_loop_is_not_live_unless_the_process_is_stopping(
    beats: Heartbeats, clock: Clock
) -> None:
    clock.now += 61
    beats.thread(0).stamp()
    beats.coordinator.succeeded()
    verdict = live(beats, SERVING, LIMITS)
    assert verdict.reason == "thread 1 silent for 61.0s (silent_after 60s)"
    clock.now += 61
    beats.thread(0).stamp()
    both = live(beats, SERVING, LIMITS).reason
    assert "thread 1 silent for 122.0s" in both and "coordinator silent for 61.0s" in both
    stopping = ProcessState(stopping=True)
    assert live(beats, stopping, LIMITS).ok
    assert ready(beats, stopping, LIMITS).reason.startswith("stopping; ")


def test_redis_errors_of_the_heartbeat_make_it_not_ready_but_live(
    beats: Heartbeats, clock: Clock
) -> None:
    clock.now += 3
    beats.coordinator.failed(redis.ConnectionError("Connection refused"))
    assert live(beats, SERVING, LIMITS).ok
    verdict = ready(beats, SERVING, LIMITS)
    assert verdict.reason == (
        "Redis does not answer the heartbeat: ConnectionError: Connection refused"
    )
    assert verdict.document()["coordinator"]["failures"] == 1
    beats.coordinator.succeeded()
    assert ready(beats, SERVING, LIMITS).ok


def test_a_heartbeat_stuck_in_a_redis_call_past_lease_ttl_is_not_ready(
    beats: Heartbeats, clock: Clock
) -> None:
    clock.now += 10.5
    beats.thread(0).stamp()
    beats.thread(1).stamp()
    assert live(beats, SERVING, LIMITS).ok
    assert ready(beats, SERVING, LIMITS).reason == (
        "no heartbeat reached Redis for 10.5s (lease_ttl 10s)"
    )


def test_a_quiet_process_is_live_not_ready(beats: Heartbeats) -> None:
    quiet = ProcessState(quiet=True)
    assert live(beats, quiet, LIMITS).ok
    assert ready(beats, quiet, LIMITS).reason.startswith("quiet")


def test_the_limits_come_from_the_settings() -> None:
    config = Settings(stuck_after=45, lease_ttl=8)
    assert Limits.of(config) == Limits(45, 60.0, 8)
    assert silent_after(Settings(poll_interval=30.0)) == 90.0
