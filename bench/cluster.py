"""One Redis server vs a 3-master Redis Cluster on this machine, in one run: enqueue
(jobs/s) and drain (blank jobs through an in-process server, jobs/s, and CPU µs per job
of this process and of Redis), and both again with ``wait_replicas = 1`` (every write
waits for its replica: the cost of durability).

Both start privately from the same redis-server binary (lowkiq.clients.embedded), never REDIS_URL,
with the same replication: ``--replicas`` replicas (default 1) of the server and of each
master.  The cluster's share is of the server reached over TCP, as the cluster's nodes
are; the same server over its unix socket, a cheaper transport, is printed as well.
Redis µs/job counts the server or the masters, not their replicas.  Every target is
measured once per round, in turn, and the medians of the rounds are printed.
Usage: python bench/cluster.py [--jobs 100000] [--drain-jobs 30000] [--threads 5]
[--shards 12] [--replicas 1] [--rounds 3]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from statistics import median

import redis
from _machine import flush, machine
from drain import drain, make_worker

import lowkiq
from lowkiq.clients.connection import Client
from lowkiq.clients.embedded import EmbeddedServer, socket_path, start_server
from lowkiq.clients.embedded_cluster import free_port, start_cluster


def enqueue(make: Callable[[], Client], jobs: int, shards: int, wait: int) -> float:
    """jobs/s of perform_async, 1,000 small jobs per call."""
    lowkiq.settings.reset()
    lowkiq.settings.redis = make
    lowkiq.settings.wait_replicas = wait
    worker = make_worker(shards, 1)
    lowkiq.settings.workers = [worker]
    flush(lowkiq.settings.client())
    started = time.perf_counter()
    for start in range(0, jobs, 1000):
        worker.perform_async(
            [
                {"id": n, "payload": {"order_id": n, "status": "paid"}}
                for n in range(start, start + 1000)
            ]
        )
    return jobs / (time.perf_counter() - started)


def start_replicated_server(replicas: int) -> list[EmbeddedServer]:
    """A server on a TCP port and ``replicas`` replicas of it, in sync (the server first)."""
    server = start_server(tempfile.mkdtemp(prefix="lowkiq-bench-"), port=free_port())
    nodes = [server]
    port = server.url.rsplit(":", 1)[1]
    for _ in range(replicas):
        config = ["--replicaof", "127.0.0.1", port]
        directory = tempfile.mkdtemp(prefix="lowkiq-bench-replica-")
        nodes.append(start_server(directory, port=free_port(), config=config))
    deadline = time.monotonic() + 10
    for replica in nodes[1:]:
        with replica.client() as client:
            while client.info("replication")["master_link_status"] != "up":
                if time.monotonic() > deadline:
                    raise RuntimeError("a replica of the benchmark's server did not sync")
                time.sleep(0.05)
    return nodes


def main() -> None:
    """Print enqueue and drain figures of both, and the cluster's share of the server's."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--drain-jobs", type=int, default=30_000)
    parser.add_argument("--threads", type=int, default=5)
    parser.add_argument("--shards", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=3, help="every target once per round")
    parser.add_argument(
        "--replicas", type=int, default=1, help="of the server and of each master (0: no WAIT rows)"
    )
    args = parser.parse_args()
    servers = start_replicated_server(args.replicas)
    server = servers[0]
    local = f"unix://{socket_path(server.directory)}"
    cluster = start_cluster(
        tempfile.mkdtemp(prefix="lowkiq-bench-cluster-"), masters=3, replicas=args.replicas
    )

    def on_server() -> Client:
        return redis.Redis.from_url(server.url)

    def on_cluster() -> Client:
        return redis.RedisCluster.from_url(cluster.url)

    targets: dict[str, tuple[Callable[[], Client], int]] = {
        "1 server": (on_server, 0),
        "1 server, unix": (lambda: redis.Redis.from_url(local), 0),
        "3-master cluster": (on_cluster, 0),
    }
    if args.replicas:
        targets["1 server, WAIT 1"] = (on_server, 1)
        targets["cluster, WAIT 1"] = (on_cluster, 1)
    try:
        print(machine())
        print(f"{args.shards} shards, {args.threads} threads, {args.replicas} replica(s) each")
        # Each round measures every target once, in turn: the host's speed drifts, and
        # the median of the rounds is steadier than one round.
        rounds: dict[str, list[list[float]]] = {name: [] for name in targets}
        for _ in range(args.rounds):
            for name, (make, wait) in targets.items():
                figures = [enqueue(make, args.jobs, args.shards, wait)]
                for batch in (1, 10):
                    figures += drain(make, args.drain_jobs, args.threads, args.shards, batch, wait)
                rounds[name].append(figures)
        rows = {
            name: [median(column) for column in zip(*runs, strict=True)]
            for name, runs in rounds.items()
        }
        heads = ["enqueue/s"]
        for batch in (1, 10):
            heads += [f"drain b={batch} /s", "worker µs/job", "Redis µs/job"]
        print(f"medians of {args.rounds} round(s):")
        print(f"{'':<18}" + "".join(f"{head:>15}" for head in heads))
        for name, figures in rows.items():
            print(f"{name:<18}" + "".join(f"{figure:>15,.0f}" for figure in figures))
        for server_row, cluster_row, label in (
            ("1 server", "3-master cluster", "cluster/server"),
            ("1 server, WAIT 1", "cluster, WAIT 1", "WAIT 1: c/s"),
        ):
            if cluster_row not in rows:
                continue
            pairs = zip(rows[server_row], rows[cluster_row], strict=True)
            print(f"{label:<18}" + "".join(f"{b / a:>15.0%}" for a, b in pairs))
        each = [
            c[1] / s[1] for s, c in zip(rounds["1 server"], rounds["3-master cluster"], strict=True)
        ]
        print("drain b=1, cluster/server of each round: " + " / ".join(f"{r:.0%}" for r in each))
    finally:
        lowkiq.settings.reset()
        cluster.stop()
        for node in servers:
            node.stop()


if __name__ == "__main__":
    main()
