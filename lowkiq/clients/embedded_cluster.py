"""A real Redis Cluster on this host, from the same ``redis-server`` binary: for tests,
benchmarks and development.

:func:`start_cluster` starts ``masters`` servers in cluster mode (and
``replicas`` replicas of each) on free TCP ports of 127.0.0.1, splits the
16,384 slots evenly over the masters with ``CLUSTER ADDSLOTS``, joins the
nodes with ``CLUSTER MEET``, attaches the replicas with ``CLUSTER
REPLICATE``, and returns once every node reports ``cluster_state:ok``, knows
every other node and the same config epoch of each master, and every replica has synced.
No external tool (``redis-cli --cluster``) is used.
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass, field
from pathlib import Path

import redis

from lowkiq.clients.embedded import START_TIMEOUT, EmbeddedServer, redis_server_binary, start_server
from lowkiq.errors import ConfigurationError

#: Slots of a Redis Cluster.
SLOTS = 16384
#: A node's cluster bus listens on its port plus this.
BUS_PORT_OFFSET = 10000


@dataclass
class EmbeddedCluster:
    """A started cluster: its nodes (masters first) and a URL naming one of them."""

    masters: list[EmbeddedServer]
    replicas: list[EmbeddedServer] = field(default_factory=list)

    @property
    def nodes(self) -> list[EmbeddedServer]:
        """Every node, masters first."""
        return self.masters + self.replicas

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:<port>`` of the first master (a cluster client finds the rest)."""
        return self.masters[0].url

    def client(self) -> redis.RedisCluster:
        """A new cluster client."""
        return redis.RedisCluster.from_url(self.url)

    def stop(self) -> None:
        """Stop every node."""
        for node in self.nodes:
            node.stop()


def free_port() -> int:
    """A TCP port of 127.0.0.1 that is free now, and whose cluster bus port is too."""
    while True:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = int(probe.getsockname()[1])
        if port + BUS_PORT_OFFSET >= 65536:
            continue
        with socket.socket() as bus:
            try:
                bus.bind(("127.0.0.1", port + BUS_PORT_OFFSET))
            except OSError:
                continue
        return port


def _port(node: EmbeddedServer) -> int:
    return int(node.url.rsplit(":", 1)[1])


def _start_node(directory: Path, binary: str, node_timeout_ms: int) -> EmbeddedServer:
    config = [
        "--cluster-enabled", "yes",
        "--cluster-config-file", str(directory / "nodes.conf"),
        "--cluster-node-timeout", str(node_timeout_ms),
        "--appendonly", "no",
    ]  # fmt: skip
    for _ in range(5):  # another process may take a probed port first
        try:
            return start_server(directory, binary=binary, config=config, port=free_port())
        except ConfigurationError:
            continue
    return start_server(directory, binary=binary, config=config, port=free_port())


def _settled(cluster: EmbeddedCluster) -> bool:
    """Whether every node sees every other and the cluster ``ok``, every replica has
    finished its first sync with its master (a replica still syncing cannot be
    promoted: a master failing then would stay failed), and every node knows the same,
    distinct config epoch of each master (the masters all start at 0 and tell theirs
    apart by gossip: a replica that still knows its master's old epoch asks the others'
    votes for it, and a master that knows the newer one refuses)."""
    nodes = cluster.nodes
    seen: list[dict[str, str]] = []
    for node in nodes:
        client = node.client()
        try:
            info = client.cluster("info")
            known = client.cluster("nodes")
            linked = node not in cluster.replicas or (
                client.info("replication").get("master_link_status") == "up"
            )
        finally:
            client.close()
        if info.get("cluster_state") != "ok" or len(known) != len(nodes) or not linked:
            return False
        seen.append({n["node_id"]: n["epoch"] for n in known.values() if "master" in n["flags"]})
    epochs = seen[0]
    return len(set(epochs.values())) == len(epochs) and all(view == epochs for view in seen)


def start_cluster(
    directory: Path | str,
    *,
    masters: int = 3,
    replicas: int = 0,
    binary: str | None = None,
    node_timeout_ms: int = 2000,
) -> EmbeddedCluster:
    """Start a Redis Cluster of ``masters`` masters with ``replicas`` replicas each,
    every node's data and log in a directory of its own under ``directory``."""
    if masters < 1 or replicas < 0:
        raise ValueError("a cluster needs at least one master and replicas >= 0")
    directory = Path(directory).resolve()
    binary = binary or redis_server_binary(prefer_path=True)
    cluster = EmbeddedCluster([])
    try:
        for i in range(masters * (1 + replicas)):
            node = _start_node(directory / f"node{i}", binary, node_timeout_ms)
            (cluster.masters if i < masters else cluster.replicas).append(node)
        for i, node in enumerate(cluster.masters):
            first, last = i * SLOTS // masters, (i + 1) * SLOTS // masters
            with node.client() as client:
                client.execute_command("CLUSTER ADDSLOTS", *range(first, last))
        with cluster.masters[0].client() as client:
            for node in cluster.nodes[1:]:
                client.execute_command("CLUSTER MEET", "127.0.0.1", _port(node))
        _attach_replicas(cluster, replicas)
        deadline = time.monotonic() + START_TIMEOUT
        while not _settled(cluster):
            if time.monotonic() > deadline:
                raise ConfigurationError(f"the cluster in {directory} did not settle")
            time.sleep(0.05)
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _attach_replicas(cluster: EmbeddedCluster, replicas: int) -> None:
    if not replicas:
        return
    ids = []
    for master in cluster.masters:
        with master.client() as client:
            ids.append(client.execute_command("CLUSTER MYID").decode())
    for i, replica in enumerate(cluster.replicas):
        master_id = ids[i % len(ids)]
        deadline = time.monotonic() + START_TIMEOUT
        with replica.client() as client:
            while True:  # the replica must have learnt of the master through gossip
                try:
                    client.execute_command("CLUSTER REPLICATE", master_id)
                    break
                except redis.ResponseError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)
