"""Several real `lowkiq worker` processes on the same queues: one owner per shard, always.

Every test records each perform's start and end per id in Redis (the recorder
app) and checks that no two performs of one id overlapped and nothing was lost.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path

import redis

from lowkiq.clients.embedded import start_server
from lowkiq.ownership import leases
from lowkiq.ownership.membership import live_processes
from tests.apps.runner import WorkerProcess, eventually, unreachable_cluster_app
from tests.health.probe import free_ports

#: The recorder app's lease TTL (``TEST_LEASE_TTL``, default 2 s).
TTL = 2.0


def feed(recorder: type, ids: list[str], versions: range, sleep: float = 0.0) -> None:
    """Enqueue versioned updates of every id, version by version."""
    for version in versions:
        recorder.perform_async(
            [{"id": i, "payload": {"v": version, "sleep": sleep}, "score": version} for i in ids]
        )


def assert_all_seen_in_order(client: redis.Redis, ids: list[str], versions: range) -> None:
    for job_id in ids:
        seen = [int(v) for v in client.lrange(f"test:seen:{job_id}", 0, -1)]
        assert set(seen) == set(versions), (job_id, seen)
        assert seen == sorted(seen), (job_id, seen)


def shards_of(client: redis.Redis) -> dict[int, list[str]]:
    """pid -> the shards each live process says it holds."""
    _, processes = live_processes(client)
    return {p.info["pid"]: p.info["shards"] for p in processes}


def test_two_processes_share_the_shards_with_no_overlap_and_nothing_lost(
    workers: Callable[..., WorkerProcess], recorder: type, redis_client: redis.Redis
) -> None:
    first = workers()
    second = workers()
    ids = [f"order{n}" for n in range(40)]
    feed(recorder, ids, range(1, 16), sleep=0.002)
    eventually(lambda: recorder.metrics()["length"] == 0 and recorder.metrics()["busy"] == 0, 60)
    assert_all_seen_in_order(redis_client, ids, range(1, 16))
    assert redis_client.llen("test:overlaps") == 0

    def balanced() -> dict[int, list[str]] | None:
        # Each process tells its shards at its own heartbeat: during a handover one may
        # still list a shard the other already took, until its next beat.
        now = shards_of(redis_client)
        return now if sorted(len(v) for v in now.values()) == [2, 3] else None

    owned = eventually(balanced)
    first_shards, second_shards = owned[first.process.pid], owned[second.process.pid]
    assert not set(first_shards) & set(second_shards)


def test_a_rolling_restart_hands_shards_over_without_overlap(
    workers: Callable[..., WorkerProcess], recorder: type, redis_client: redis.Redis
) -> None:
    old = workers()
    ids = [f"slow{n}" for n in range(10)]
    feed(recorder, ids, range(1, 4), sleep=0.3)
    eventually(lambda: redis_client.llen("test:started") >= 3)
    new = workers()  # the new one starts while the old one is mid-batch
    old.signal(signal.SIGTERM)
    assert old.wait() == 0
    exited = time.monotonic()
    eventually(lambda: len(shards_of(redis_client).get(new.process.pid, [])) == 5)
    assert time.monotonic() - exited < 1.5
    eventually(lambda: recorder.metrics()["length"] == 0 and recorder.metrics()["busy"] == 0, 60)
    assert_all_seen_in_order(redis_client, ids, range(1, 4))
    assert redis_client.llen("test:overlaps") == 0
    assert "released" in old.output()


def test_a_paused_owner_is_fenced_after_its_lease_and_nothing_is_lost(
    workers: Callable[..., WorkerProcess], recorder: type, redis_client: redis.Redis
) -> None:
    paused = workers()
    recorder.perform_async([{"id": "p", "payload": {"v": 1, "sleep": 1.0}, "score": 1}])
    eventually(lambda: redis_client.llen("test:started") == 1)
    paused.signal(signal.SIGSTOP)
    try:
        other = workers()
        # The other process takes the shard after the lease lapses, restores the batch, runs it.
        eventually(lambda: redis_client.llen("test:started") == 2, TTL * 4)
    finally:
        paused.signal(signal.SIGCONT)
    eventually(lambda: "is no longer held" in paused.output(), 10)
    eventually(lambda: recorder.metrics()["busy"] == 0 and recorder.metrics()["length"] == 0)
    assert recorder.metrics()["processed"] == 1  # the late ack was dropped
    assert [int(v) for v in set(redis_client.lrange("test:seen:p", 0, -1))] == [1]
    assert other.process.poll() is None


def test_after_kill_9_the_shards_are_taken_over_within_the_lease_ttl(
    workers: Callable[..., WorkerProcess], recorder: type, redis_client: redis.Redis
) -> None:
    doomed = workers()
    survivor = workers()
    eventually(lambda: len(shards_of(redis_client)) == 2)
    eventually(lambda: len(shards_of(redis_client).get(doomed.process.pid, [])) > 0)
    doomed.kill()
    killed = time.monotonic()
    eventually(lambda: len(shards_of(redis_client).get(survivor.process.pid, [])) == 5, TTL * 4)
    assert time.monotonic() - killed <= TTL + 1.0
    ids = [f"k{n}" for n in range(20)]
    feed(recorder, ids, range(1, 3))
    eventually(lambda: recorder.metrics()["length"] == 0 and recorder.metrics()["busy"] == 0)
    assert_all_seen_in_order(redis_client, ids, range(1, 3))


def test_a_process_joining_and_leaving_moves_shards(
    workers: Callable[..., WorkerProcess], recorder: type, redis_client: redis.Redis
) -> None:
    first = workers()
    eventually(lambda: len(shards_of(redis_client).get(first.process.pid, [])) == 5)
    second = workers()
    eventually(lambda: sorted(len(s) for s in shards_of(redis_client).values()) == [2, 3])
    second.signal(signal.SIGTERM)
    assert second.wait() == 0
    eventually(
        lambda: shards_of(redis_client) == {first.process.pid: [f"Recorder:{n}" for n in range(5)]}
    )


def test_term_while_waiting_for_redis_at_start_exits_0(
    workers: Callable[..., WorkerProcess],
) -> None:
    waiting = workers(wait=False, REDIS_URL="redis://127.0.0.1:1/0")
    eventually(lambda: "Redis is unreachable" in waiting.output())
    waiting.signal(signal.SIGTERM)
    assert waiting.wait(10) == 0


def test_a_worker_started_on_a_hung_redis_waits_for_it_and_then_serves(
    workers: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    """Redis accepts the connection but answers nothing (SIGSTOP): the start's calls time
    out, and the process waits and tries again instead of exiting."""
    server = start_server(tmp_path / "hung", port=free_ports())
    assert server.process is not None
    try:
        server.process.send_signal(signal.SIGSTOP)
        waiting = workers(wait=False, REDIS_URL=server.url)
        eventually(lambda: "Redis is unreachable" in waiting.output(), timeout=30)
        assert waiting.process.poll() is None  # still waiting, not dead
        server.process.send_signal(signal.SIGCONT)
        client = server.client()
        eventually(lambda: len(live_processes(client)[1]) == 1, timeout=30)
        assert waiting.process.poll() is None
    finally:
        server.process.send_signal(signal.SIGCONT)
        server.stop()


def test_a_stopped_process_leaves_no_lease_and_no_membership_behind(
    workers: Callable[..., WorkerProcess], recorder: type, redis_client: redis.Redis
) -> None:
    worker = workers()
    eventually(lambda: len(shards_of(redis_client).get(worker.process.pid, [])) == 5)
    time.sleep(TTL / 2)  # a few heartbeats, so one may run while the threads stop
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    assert leases.tokens(recorder.queue()) == [None] * 5
    assert live_processes(redis_client)[1] == []


def test_a_worker_started_while_no_cluster_node_answers_waits_and_stops_on_term(
    tmp_path: Path,
) -> None:
    """A Redis Cluster client reads its nodes when it is made: with every node out of
    reach (restarting), the worker's start waits and tries again instead of crashing,
    and TERM still ends it cleanly."""
    port = free_ports()  # nothing listens there
    app = unreachable_cluster_app(tmp_path, port)
    waiting = WorkerProcess("-r", str(app))
    try:
        eventually(lambda: "waiting for Redis" in waiting.output(), timeout=30)
        assert waiting.process.poll() is None  # still waiting, not dead
        waiting.signal(signal.SIGTERM)
        assert waiting.wait() == 0
    finally:
        waiting.close()
