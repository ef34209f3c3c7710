"""`lowkiq worker --processes N`: forked worker processes, restarted, signals forwarded."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import pytest
import redis

import lowkiq
from lowkiq.ownership.membership import live_processes
from tests.apps.runner import WorkerProcess, eventually, main_thread_wakeups


@pytest.fixture
def supervised(redis_client: redis.Redis, redis_url: str) -> Iterator[WorkerProcess]:
    process = WorkerProcess(
        "-r",
        "tests/apps/recorder.py",
        "--processes",
        "2",
        env={"REDIS_URL": redis_url, "TEST_LEASE_TTL": "2"},
    )
    process.wait_started()
    yield process
    if process.process.poll() is None:
        process.signal(signal.SIGTERM)  # the children stop with it
        process.wait()
    process.close()


class Recorder(lowkiq.Worker):
    """The queue of tests/apps/recorder.py, to enqueue from the test."""

    shards_count = 6


def child_pids(client: redis.Redis) -> set[int]:
    return {p.info["pid"] for p in live_processes(client)[1]}


def test_children_share_the_shards_and_a_dead_child_is_restarted(
    supervised: WorkerProcess, redis_client: redis.Redis
) -> None:
    pids = eventually(lambda: (found := child_pids(redis_client)) and len(found) == 2 and found)
    assert supervised.process.pid not in pids
    eventually(
        lambda: sorted(len(p.info["shards"]) for p in live_processes(redis_client)[1]) == [2, 3]
    )
    victim = min(pids)
    os.kill(victim, signal.SIGKILL)
    eventually(lambda: "restarting in" in supervised.output())
    eventually(lambda: len(child_pids(redis_client) - {victim}) == 2, timeout=15)

    supervised.signal(signal.SIGTERM)
    assert supervised.wait() == 0
    assert "worker processes exited with [0, 0]" in supervised.output()
    eventually(lambda: child_pids(redis_client) == set())


def test_an_idle_supervisor_sleeps_until_a_child_exits(
    supervised: WorkerProcess, redis_client: redis.Redis
) -> None:
    pids = eventually(lambda: (found := child_pids(redis_client)) and len(found) == 2 and found)
    time.sleep(1)  # the rest of its start-up
    before = main_thread_wakeups(supervised.process.pid)
    time.sleep(3)
    # About once a second; it looked at its children 20 times a second before.
    assert main_thread_wakeups(supervised.process.pid) - before <= 12
    os.kill(min(pids), signal.SIGKILL)  # SIGCHLD wakes it: the child is reaped at once
    eventually(lambda: "restarting in" in supervised.output(), timeout=5)


def test_ttin_is_forwarded_to_every_child(supervised: WorkerProcess) -> None:
    eventually(lambda: supervised.output().count("TTIN") >= 2)
    supervised.signal(signal.SIGTTIN)
    eventually(lambda: supervised.output().count("wrote the stacks of") == 2)
    for line in supervised.output().splitlines():
        if "wrote the stacks of" in line:
            os.unlink(line.rsplit(" ", 1)[-1])


def test_children_stop_when_the_supervisor_is_killed(
    supervised: WorkerProcess, redis_client: redis.Redis
) -> None:
    eventually(lambda: len(child_pids(redis_client)) == 2)
    supervised.kill()
    eventually(lambda: child_pids(redis_client) == set())  # they deregistered on TERM


def test_a_killed_childs_shards_are_taken_over_before_its_leases_expire(
    redis_client: redis.Redis, redis_url: str
) -> None:
    # Leases of 30 s: without the supervisor freeing them, the dead child's shards would
    # wait 30 s for their leases to expire.
    process = WorkerProcess(
        "-r",
        "tests/apps/recorder.py",
        "--processes",
        "2",
        env={"REDIS_URL": redis_url, "TEST_LEASE_TTL": "30", "TEST_SHARDS": "6"},
    )
    try:
        process.wait_started()
        eventually(
            lambda: sorted(len(p.info["shards"]) for p in live_processes(redis_client)[1]) == [3, 3]
        )
        victim = min(child_pids(redis_client))
        os.kill(victim, signal.SIGKILL)
        killed_at = time.monotonic()
        Recorder.perform_async([{"id": str(i), "payload": {"v": 1}} for i in range(30)])
        eventually(lambda: len(set(redis_client.lrange("test:finished", 0, -1))) == 30, 25)
        assert time.monotonic() - killed_at < 20
        assert "freed" in process.output() and "which died" in process.output()
        # The dead child is no member; every shard is held by a live child.
        live = {p.id for p in live_processes(redis_client)[1]}
        assert all(str(victim) != p.split(":")[1] for p in live)
    finally:
        if process.process.poll() is None:
            process.signal(signal.SIGTERM)
            process.wait()
        process.close()
