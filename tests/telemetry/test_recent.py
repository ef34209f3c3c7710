"""The last minutes second by second: counted per batch beside the minutes, written by the
same flush (a few commands, whatever the number of jobs), read back summed over queues,
expiring after ten minutes."""

from __future__ import annotations

import time

import pytest
import redis

from lowkiq.storage.queue import PoppedJob
from lowkiq.telemetry import recent
from lowkiq.telemetry.history import read
from lowkiq.telemetry.recent import SecondCounts
from lowkiq.telemetry.recorder import Recorder, WorkerTally
from tests.moved_clock import Clock

T0 = 1_800_000_000.0  # a minute boundary
SECOND = int(T0)
MINUTE = SECOND // 60


def jobs(count: int, at: float) -> list[PoppedJob]:
    return [PoppedJob(f"j{n}", -1, ["p"], at) for n in range(count)]


def command_calls(client: redis.Redis) -> dict[str, int]:
    """How many times Redis ran each command so far."""
    return {
        name.removeprefix("cmdstat_"): stats["calls"]
        for name, stats in client.info("commandstats").items()
    }


def test_a_tally_counts_processed_and_failed_jobs_by_second():
    clock = Clock(T0 + 0.5)
    tally = WorkerTally(clock)
    tally.performed(jobs(10, T0), T0 + 0.4, failed=2, discarded=1, yielded=1)
    tally.performed(jobs(4, T0), T0 + 0.45)
    clock.now = T0 + 1.2
    tally.performed(jobs(5, T0), T0 + 1.1, discarded=5)
    clock.now = T0 + 1.7
    tally.performed(jobs(3, T0), T0 + 1.6, failed=3)
    assert tally.seconds.unwritten() == {SECOND: [10, 2], SECOND + 1: [0, 3]}
    minute = tally.minutes.unwritten()[MINUTE]
    assert minute[:6] == [4, 2, 22, 5, 6, 1]  # performs, failures, jobs, failed, discarded, yielded


def test_a_flush_writes_each_second_once_and_the_next_only_what_grew(redis_client):
    clock = Clock(T0 + 0.5)
    recorder = Recorder(redis_client, ["Orders", "Mail"], clock=clock)
    for thread, second in ((0, 0), (1, 0), (0, 1), (0, 59), (1, 61)):
        clock.now = T0 + second + 0.5
        recorder.for_queue("Orders", thread).performed(jobs(100, T0), clock.now - 0.1)
    recorder.for_queue("Mail").performed(jobs(7, T0), clock.now - 0.1, failed=2)
    assert recorder.flush() == 3  # (Orders, two minutes) and (Mail, one): the minute rows
    recorder.for_queue("Orders", 1).performed(jobs(1, T0), clock.now - 0.1)
    recorder.flush()
    # A second process adds to the same second.
    other = Recorder(redis_client, ["Orders"], clock=Clock(T0 + 0.7))
    other.for_queue("Orders").performed(jobs(50, T0), T0 + 0.6, failed=50)
    other.flush()
    stored = recent.read(redis_client, ["Orders"], MINUTE, MINUTE + 1)
    assert stored == {
        MINUTE: {
            SECOND: SecondCounts(200, 50),
            SECOND + 1: SecondCounts(100, 0),
            SECOND + 59: SecondCounts(100, 0),
        },
        MINUTE + 1: {SECOND + 61: SecondCounts(101, 0)},
    }
    both = recent.read(redis_client, ["Orders", "Mail"], MINUTE + 1, MINUTE + 1)
    assert both == {MINUTE + 1: {SECOND + 61: SecondCounts(106, 2)}}
    assert recent.read(redis_client, ["Orders"], MINUTE + 2, MINUTE + 5) == {}
    # A count that would be 0 is not stored.
    fields = redis_client.hgetall(recent.seconds_hash("Orders", MINUTE))
    assert sorted(fields) == [b"0f", b"0p", b"1p", b"59p"]


def test_the_seconds_cost_a_few_commands_per_flush_whatever_the_jobs(redis_client):
    """Per queue and flush: an HINCRBY per second and count (processed, failed) that grew,
    an EXPIREAT per minute touched, in one round trip."""
    now = time.time()
    start = int(now) - 30
    clock = Clock(start + 0.5)
    tally = WorkerTally(clock)
    for second in range(5):  # five seconds of 1,000 batches of 10 jobs, one failed
        clock.now = start + second + 0.5
        for _ in range(1000):
            tally.performed(jobs(10, start), clock.now - 0.01, failed=1)
    rows = {("Orders", second): values for second, values in tally.seconds.unwritten().items()}
    before = command_calls(redis_client)
    recent.add(redis_client, rows)
    after = command_calls(redis_client)
    minutes = len({(start + second) // 60 for second in range(5)})
    assert after["hincrby"] - before.get("hincrby", 0) == 5 * 2
    assert after["expireat"] - before.get("expireat", 0) == minutes
    stored = recent.read(redis_client, ["Orders"], start // 60, (start + 4) // 60)
    assert sum(s.processed for m in stored.values() for s in m.values()) == 5 * 9000
    # Each minute's hash expires ten minutes after the minute ends.
    key = recent.seconds_hash("Orders", start // 60)
    expected = (start // 60 + 1 + recent.KEPT_MINUTES) * 60 - now
    assert expected - 2 <= redis_client.ttl(key) <= expected + 1


def test_seconds_too_old_to_be_shown_are_dropped_not_written(redis_client):
    down = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2)
    clock = Clock(T0 + 0.5)
    recorder = Recorder(down, ["Orders"], clock=clock)
    recorder.for_queue("Orders").performed(jobs(3, T0), T0 + 0.4)
    with pytest.raises(redis.ConnectionError):
        recorder.flush()
    assert len(recorder.for_queue("Orders").seconds) == 1
    clock.now = T0 + recent.KEPT_MINUTES * 60 + 1  # Redis is still out of reach
    recorder.for_queue("Orders").performed(jobs(2, T0), clock.now - 0.1)
    with pytest.raises(redis.ConnectionError):
        recorder.flush()
    assert len(recorder.for_queue("Orders").seconds) == 1  # the old second is gone
    recorder.client = redis_client
    recorder.flush()
    stored = recent.read(redis_client, ["Orders"], MINUTE, MINUTE + recent.KEPT_MINUTES + 1)
    assert [s for m in stored.values() for s in m.values()] == [SecondCounts(2, 0)]
    # The minutes are written for the history, whatever their age.
    assert read(redis_client, {"W": "Orders"}, 60, now=clock.now)["W"].total.jobs == 5
