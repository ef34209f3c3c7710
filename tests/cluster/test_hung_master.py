"""A master of the cluster hangs (SIGSTOP) under a running worker, and stays hung: the
shards of the other masters keep being served by the same process while it hangs, and
once its replica took over, its own shards are served again, from the replica.  A
worker whose processing connection waits on the hung master without a bound serves no
shard at all until that master answers again: here, never."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

import lowkiq
from lowkiq.clients.embedded_cluster import EmbeddedCluster, start_cluster
from lowkiq.ownership import leases
from lowkiq.storage.enqueueing import shard_of
from lowkiq.storage.queue import Queue
from tests.apps.runner import WorkerProcess, eventually
from tests.cluster.test_failover_leases import master_of, promoted, stop_all
from tests.conftest import lowkiq_on

#: The worker's lease TTL, seconds: longer than the master hangs before its replica
#: takes over.
LEASE_TTL = 10.0
#: How long the cluster waits before it fails a silent master over, milliseconds: the
#: other masters serve on meanwhile.
NODE_TIMEOUT_MS = 6000
#: Shards of the worker (tests/cluster/hung_master_app.py).
SHARDS = 12


def ids_in(shards: set[int], count: int, prefix: str) -> list[str]:
    """``count`` job ids whose shards are among ``shards``."""
    found: list[str] = []
    n = 0
    while len(found) < count:
        job_id = f"{prefix}-{n}"
        if shard_of(job_id, SHARDS) in shards:
            found.append(job_id)
        n += 1
    return found


def performed(path: Path) -> set[str]:
    """The ids the worker performed so far."""
    return set(path.read_text().split()) if path.exists() else set()


def enqueued(enqueue: Callable[[], None], timeout: float) -> None:
    """Call ``enqueue`` until the cluster takes it (its slots may have no master yet)."""

    def attempt() -> bool:
        try:
            enqueue()
        except (redis.RedisError, lowkiq.LowkiqError):
            return False
        return True

    eventually(attempt, timeout, interval=0.2)


def shards_by_master(
    cluster: EmbeddedCluster, client: redis.RedisCluster, queue: Queue
) -> dict[int, set[int]]:
    """The queue's shards by the index of their master in ``cluster.masters``."""
    by_master: dict[int, set[int]] = {}
    for shard in range(SHARDS):
        by_master.setdefault(master_of(cluster, client, queue.keys.prefix(shard)), set()).add(shard)
    return by_master


def victim_of(cluster: EmbeddedCluster, client: redis.RedisCluster, queue: Queue) -> int:
    """A master serving some of the queue's shards, but not the membership's keys or the
    queue's layout (a push reads it)."""
    spared = {
        master_of(cluster, client, key)
        for key in ("lowkiq:{lowkiq}:processes", queue.keys.layout_hash)
    }
    return min(set(shards_by_master(cluster, client, queue)) - spared)


@pytest.mark.timeout(180)
def test_a_hung_master_holds_up_only_its_own_shards_until_its_replica_takes_over(
    tmp_path: Path,
) -> None:
    cluster = start_cluster(
        tmp_path / "cluster", masters=3, replicas=1, node_timeout_ms=NODE_TIMEOUT_MS
    )
    worker: WorkerProcess | None = None
    try:
        # The test's own calls give up after a bound: none may wait on the hung master.
        def bounded() -> redis.RedisCluster:
            return redis.RedisCluster.from_url(cluster.url, socket_timeout=2)

        with lowkiq_on(bounded) as client:
            assert isinstance(client, redis.RedisCluster)
            from tests.cluster.hung_master_app import Noted

            lowkiq.settings.workers = [Noted]
            queue = Noted.queue(client)
            path = tmp_path / "performed"
            url = cluster.url.replace("redis://", "redis+cluster://")
            worker = WorkerProcess(
                "-r", "tests/cluster/hung_master_app.py", "--threads", "4",
                env={"REDIS_URL": url, "TEST_LEASE_TTL": str(LEASE_TTL),
                     "TEST_PERFORMED": str(path)},
            )  # fmt: skip
            worker.wait_started()
            eventually(lambda: all(leases.tokens(queue)), 20)
            warm = [f"warm-{n}" for n in range(48)]  # every shard serves a batch first
            Noted.perform_async([{"id": job_id} for job_id in warm])
            eventually(lambda: set(warm) <= performed(path), 20, interval=0.05)

            index = victim_of(cluster, client, queue)
            own = shards_by_master(cluster, client, queue)[index]
            victim = cluster.masters[index]
            assert victim.process is not None
            victim.process.send_signal(signal.SIGSTOP)
            stopped = time.monotonic()

            others = ids_in(set(range(SHARDS)) - own, 40, "other")
            Noted.perform_async([{"id": job_id} for job_id in others])
            eventually(lambda: set(others) <= performed(path), NODE_TIMEOUT_MS / 1000 - 1)
            served = time.monotonic() - stopped

            # (Redis Cluster's own election: on a loaded host it took longer than 30 s.)
            eventually(lambda: promoted(cluster.replicas[index]), 60, interval=0.05)
            mine = ids_in(own, 20, "own")
            enqueued(lambda: Noted.perform_async([{"id": job_id} for job_id in mine]), 20)
            eventually(lambda: set(mine) <= performed(path), 30, interval=0.05)
            recovered = time.monotonic() - stopped
            print(
                f"the other masters' jobs ran {served:.2f} s after the master hung; its own "
                f"ran on its replica {recovered:.2f} s after"
            )
            assert worker.process.poll() is None
    finally:
        stop_all(cluster, worker)
