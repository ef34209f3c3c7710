"""A master of the cluster fails over in about 4 s under a running worker whose leases last
10 s: every lease on that master is renewed on its replica once promoted, none is lost,
and a lease that may have lapsed by the worker's clock is reported once, not in a loop.

The master is killed (SIGKILL), or hung (SIGSTOP, resumed once its replica took over),
just before the worker renews its leases, so its replica holds them for the shortest
time the renewals allow (two thirds of the TTL)."""

from __future__ import annotations

import re
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis

import lowkiq
from lowkiq.clients.embedded import EmbeddedServer
from lowkiq.clients.embedded_cluster import EmbeddedCluster, start_cluster
from lowkiq.ownership import leases
from lowkiq.storage.queue import Queue
from tests.apps.runner import WorkerProcess, eventually
from tests.conftest import lowkiq_on

#: The worker's lease TTL, seconds.
LEASE_TTL = 10.0
#: How long the cluster takes to notice a dead master: with the election, it promotes
#: the replica about 4 s after the master died.
NODE_TIMEOUT_MS = 2000
#: Where a warning says a lease may have lapsed, and which shard it names.
LAPSE_WARNING = re.compile(r"(Steady:\d+): lease epoch \d+ may have lapsed")
#: What a worker logs when it lost a lease.
LOST = ("expired before it was renewed", "is no longer held")


def master_of(cluster: EmbeddedCluster, client: redis.RedisCluster, key: str) -> int:
    """The index in ``cluster.masters`` of the master serving ``key``."""
    port = client.get_node_from_key(key).port
    return next(i for i, m in enumerate(cluster.masters) if m.url.endswith(f":{port}"))


def victim_of(
    cluster: EmbeddedCluster, client: redis.RedisCluster, queue: Queue
) -> tuple[int, list[int]]:
    """The master serving the most shards (not the membership's master: its failover is
    tested elsewhere), and its shards."""
    ownership = master_of(cluster, client, "lowkiq:{lowkiq}:processes")
    by_master: dict[int, list[int]] = {}
    for shard in queue.shards:
        by_master.setdefault(master_of(cluster, client, queue.keys.prefix(shard)), []).append(shard)
    index = max((i for i in by_master if i != ownership), key=lambda i: len(by_master[i]))
    return index, by_master[index]


@contextmanager
def feeding(worker: type[lowkiq.Worker]) -> Iterator[None]:
    """Enqueue a job in every shard every 50 ms, on a thread, ignoring failures (the
    slots of a dead master refuse them until its replica is promoted)."""
    stop = threading.Event()

    def feed() -> None:
        round_ = 0
        while not stop.wait(0.05):
            round_ += 1
            try:
                worker.perform_async([{"id": f"{round_}-{i}", "payload": {}} for i in range(48)])
            except Exception:  # noqa: BLE001 - a slot without a master, for now
                continue

    thread = threading.Thread(target=feed, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(5)


def stop_before_renewal(
    master: EmbeddedServer, lease_key: str, signum: signal.Signals
) -> tuple[float, int]:
    """Send ``signum`` (SIGKILL: it dies; SIGSTOP: it hangs) to ``master`` just before
    the worker's next renewal of ``lease_key`` (whose lease is renewed every third of the
    TTL); returns when (``time.monotonic``), and the lease's TTL then (ms)."""
    due_soon = (LEASE_TTL * 2 / 3 + 0.3) * 1000
    with master.client() as one:

        def renewal_due() -> int:
            ms = int(one.pttl(lease_key))
            return ms if 0 < ms < due_soon else 0

        left = eventually(renewal_due, 2 * LEASE_TTL, interval=0.01)
    assert master.process is not None
    master.process.send_signal(signum)
    return time.monotonic(), int(left)


def resume(master: EmbeddedServer) -> None:
    """Let a master stopped by SIGSTOP run again."""
    assert master.process is not None
    master.process.send_signal(signal.SIGCONT)


def stop_all(cluster: EmbeddedCluster, worker: WorkerProcess | None) -> None:
    """Stop the worker, then the cluster, resuming the nodes a test stopped first (a
    stopped node would not end on SIGTERM)."""
    if worker is not None:
        worker.close()
    for node in cluster.nodes:
        if node.process is not None and node.process.poll() is None:
            resume(node)
    cluster.stop()


def promoted(replica: EmbeddedServer) -> bool:
    """Whether ``replica`` is a master now."""
    with replica.client() as one:
        return bool(one.info("replication")["role"] == "master")


def renewed_on(replica: EmbeddedServer, lease_key: str, before: int) -> bool:
    """Whether the lease's TTL on ``replica`` went up since it read ``before`` ms."""
    with replica.client() as one:
        return bool(one.pttl(lease_key) > before + 500)


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGSTOP], ids=["killed", "hung"])
def test_a_four_second_failover_loses_no_lease_and_warns_at_most_once_per_shard(
    tmp_path: Path, signum: signal.Signals
) -> None:
    cluster = start_cluster(
        tmp_path / "cluster", masters=3, replicas=1, node_timeout_ms=NODE_TIMEOUT_MS
    )
    worker: WorkerProcess | None = None
    try:
        with lowkiq_on(lambda: redis.RedisCluster.from_url(cluster.url)) as client:
            assert isinstance(client, redis.RedisCluster)
            from tests.cluster.failover_app import Steady

            lowkiq.settings.workers = [Steady]
            queue = Steady.queue(client)
            url = cluster.url.replace("redis://", "redis+cluster://")
            worker = WorkerProcess(
                "-r", "tests/cluster/failover_app.py", "--threads", "4",
                env={"REDIS_URL": url, "TEST_LEASE_TTL": str(LEASE_TTL)},
            )  # fmt: skip
            worker.wait_started()
            eventually(lambda: all(leases.tokens(queue)), 20)
            tokens = leases.tokens(queue)
            index, shards = victim_of(cluster, client, queue)
            dead, replica = cluster.masters[index], cluster.replicas[index]
            lease_key = queue.keys.lease(shards[0])
            with feeding(Steady):
                killed, left = stop_before_renewal(dead, lease_key, signum)
                eventually(lambda: promoted(replica), 30, interval=0.01)
                failover = time.monotonic() - killed
                eventually(lambda: renewed_on(replica, lease_key, left), LEASE_TTL, interval=0.01)
                reached = time.monotonic() - killed - failover
                if signum == signal.SIGSTOP:
                    resume(dead)  # it comes back as its replica's replica
                # Past the TTL since the kill: any lease not renewed meanwhile has lapsed.
                time.sleep(max(killed + LEASE_TTL + 1.0 - time.monotonic(), 0.0))
            fresh = redis.RedisCluster.from_url(replica.url)
            try:
                after = leases.tokens(Steady.queue(fresh))
            finally:
                fresh.close()
            output = worker.output()
        warned = LAPSE_WARNING.findall(output)
        lost = sum(now != then for now, then in zip(after, tokens, strict=True))
        print(
            f"failover {failover:.2f} s; renewals reached the new master {reached:.2f} s "
            f"after; {lost} of {len(shards)} leases lost; {len(warned)} lapse warning(s), "
            f"{output.count(' WARNING ')} warning(s) in all"
        )
        assert 2.5 < failover < 6.0, f"the failover took {failover:.2f} s"
        assert after == tokens, "a lease was lost: its shard was taken again, a new epoch"
        assert not [line for line in output.splitlines() if any(m in line for m in LOST)]
        assert all(warned.count(name) <= 1 for name in warned), f"{len(warned)} warnings"
        assert reached < LEASE_TTL / 6
        assert worker.process.poll() is None
    finally:
        stop_all(cluster, worker)
