"""Process membership: register, heartbeat, age out on Redis's clock, deregister.

Each ``lowkiq worker`` process beats every ``heartbeat_interval`` seconds
(``lua/membership_beat.lua``).  A beat costs Redis O(1): it returns no member
list, only the membership *version* (which grows when a process joins, leaves,
lapses or changes its weight or queues), the *generation* of the published
assignment, and whether this process is the *assigner*, the one process that
computes the assignment (:mod:`~lowkiq.ownership.assigner`) when the version
moved.  A process reads its own shards only when the generation moved.  A
process whose beat lapses (:func:`membership_ttl`: a heartbeat less than
``lease_ttl``) is dropped by the next beat of any process (O(expired)).
"""

from __future__ import annotations

import json
import os
import socket
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lowkiq.clients.connection import Client
from lowkiq.ownership.assignment import Member, ShardKey
from lowkiq.storage.keys import OwnershipKeys
from lowkiq.storage.scripts import ScriptCall, Scripts, run_pipelined

#: Commands the dashboard can leave for a process.
COMMANDS = ("quiet", "stop")

#: A blocking wait for a nudge ends before the socket would time out: at this share of
#: the socket timeout, less the time Redis may take to notice a blocked wait ended.
SOCKET_MARGIN = 0.8
TIMER_SLACK = 0.11


#: What :meth:`Membership.publish` returns for an assignment computed from a stale view.
STALE = -1

#: Set by a supervisor in a child process: the membership id it gave the child.
PROCESS_ID_ENV = "LOWKIQ_PROCESS_ID"


def new_process_id(pid: int | None = None, suffix: str | None = None) -> str:
    """A process id unique across hosts and restarts: ``host:pid:random``."""
    suffix = suffix or uuid.uuid4().hex[:8]
    return f"{socket.gethostname()}:{pid or os.getpid()}:{suffix}"


def own_process_id() -> str:
    """This process's membership id: the one its supervisor gave it, else a new one."""
    given = os.environ.get(PROCESS_ID_ENV, "")
    if given and given.split(":")[-2:-1] == [str(os.getpid())]:
        return given
    return new_process_id()


def membership_ttl(lease_ttl: float, heartbeat_interval: float) -> float:
    """How long a process stays a member without beating: a heartbeat less than a lease
    (but at least two heartbeats).  A process that died is then dropped, and its shards
    reassigned, before its leases expire, so their new owners take them as soon as
    they expire: a crash costs a shard about ``lease_ttl``, not ``lease_ttl`` plus a
    heartbeat."""
    return min(lease_ttl, max(lease_ttl - heartbeat_interval, 2 * heartbeat_interval))


def shard_name(key: ShardKey) -> str:
    """``queue:shard``, as the owners hash and the dashboard name a shard."""
    return f"{key[0]}:{key[1]}"


@dataclass(frozen=True)
class Beat:
    """What one heartbeat learnt."""

    #: Redis's time, ms.
    now_ms: int
    #: The membership version (grows on every join, leave, lapse or change of weight).
    version: int
    #: The published assignment's generation, and the membership version it is of.
    generation: int
    assigned_version: int
    #: A command the dashboard left for this process (``quiet``, ``stop``) or ``""``.
    command: str
    #: Whether this process computes and publishes the assignment.
    assigner: bool
    #: Grows when a queue is paused or resumed, or a reshard changed shards.
    config_version: int
    #: The reply of the call the beat carried in its round trip (``None``: none).
    carried: Any = None


@dataclass(frozen=True)
class Snapshot:
    """The live processes at one membership version, and the shards of their queues."""

    version: int
    #: The generation of the assignment published when the snapshot was read.
    generation: int
    members: list[Member]
    #: Every queue some live process serves, and its shards (as those processes see
    #: them; when they disagree, during a reshard, the newest range).
    shards_by_queue: dict[str, range]


@dataclass(frozen=True)
class ProcessInfo:
    """A live process as the dashboard shows it."""

    id: str
    weight: int
    queues: list[str]
    info: dict[str, Any]
    beat_ms: int
    expires_ms: int

    @property
    def quiet(self) -> bool:
        """Whether it takes no shards (quiet from the dashboard, or stopping)."""
        return self.weight == 0


def announce(queues: Mapping[str, range]) -> str:
    """The queues a process serves as its beat tells them: ``{name: [first, stop]}``."""
    return json.dumps(
        {name: [shards.start, shards.stop] for name, shards in sorted(queues.items())},
        separators=(",", ":"),
    )


def queue_names(announced: Any) -> list[str]:
    """The names of the queues in a beat's announcement (or an old list of names)."""
    return sorted(announced)


@dataclass
class Membership:
    """One process's registration, on one Redis client."""

    client: Client
    process_id: str
    ttl: float
    keys: OwnershipKeys = field(default_factory=OwnershipKeys)
    # The client's socket timeout (0: none), read once.
    _socket_timeout: tuple[float] | None = field(default=None, init=False, repr=False)

    def _call(self, name: str, *args: Any) -> ScriptCall:
        return (getattr(Scripts.for_client(self.client), name), [self.keys.prefix], args)

    def _run(self, name: str, *args: Any) -> Any:
        script, keys, arguments = self._call(name, *args)
        return script(keys=keys, args=arguments)

    def beat(
        self,
        weight: int,
        queues: Mapping[str, range],
        info: dict[str, Any] | None,
        carry: ScriptCall | None = None,
    ) -> Beat:
        """Say we are alive with ``weight`` threads (0: quiet or stopping), serving
        ``queues``; ``info`` (for the dashboard) is stored when given.  ``carry``: a
        script call sent in the same round trip (the lease renewals), its reply in
        :attr:`Beat.carried`."""
        args = (
            self.process_id,
            max(1, round(self.ttl * 1000)),
            weight,
            announce(queues),
            "" if info is None else json.dumps(info, sort_keys=True),
        )
        carried = None
        if carry is None:
            reply = self._run("membership_beat", *args)
        else:
            beat = self._call("membership_beat", *args)
            reply, carried = run_pipelined(self.client, [beat, carry])
        return Beat(
            now_ms=int(reply[0]),
            version=int(reply[1]),
            generation=int(reply[2]),
            assigned_version=int(reply[3]),
            command=reply[4].decode(),
            assigner=bool(int(reply[5])),
            config_version=int(reply[6]),
            carried=carried,
        )

    def snapshot(self) -> Snapshot:
        """The live processes and their queues' shards (for the assigner)."""
        reply = self._run("membership_snapshot")
        members: list[Member] = []
        shards: dict[str, range] = {}
        # Most processes announce the same queues: each announcement is read once.
        names_of: dict[bytes, frozenset[str]] = {}
        for i in range(2, len(reply), 4):
            raw = reply[i + 2]
            names = names_of.get(raw)
            if names is None:
                announced = json.loads(raw)
                names = names_of[raw] = frozenset(queue_names(announced))
                if isinstance(announced, dict):
                    for name, (first, stop) in announced.items():
                        known = shards.get(name)
                        if known is None or (first, stop) > (known.start, known.stop):
                            shards[name] = range(first, stop)
            members.append(Member(reply[i].decode(), int(reply[i + 1]), names, int(reply[i + 3])))
        return Snapshot(int(reply[0]), int(reply[1]), members, shards)

    def assigned(self) -> list[ShardKey]:
        """The shards the published assignment gives this process, in queue order."""
        raw = self.client.hget(self.keys.assignment_hash, self.process_id)
        if not raw:
            return []
        return [
            (name, shard) for name, shards in sorted(json.loads(raw).items()) for shard in shards
        ]

    def publish(
        self,
        version: int,
        generation: int,
        changed: Sequence[tuple[str, str]],
        moved: Sequence[tuple[str, str]],
    ) -> int:
        """As the assigner, publish an assignment computed from membership ``version`` as
        changes to assignment ``generation``: ``changed`` (process id, its encoded shards or
        ``""``) and ``moved`` (``queue:shard``, its owner or ``""``).  Returns the new
        generation; 0 when this process is not the assigner, :data:`STALE` when
        ``generation`` is no longer the published one or a newer membership version was
        published (nothing is written either way)."""
        args: list[object] = [self.process_id, version, generation, len(changed)]
        for pair in changed:
            args += pair
        args.append(len(moved))
        for pair in moved:
            args += pair
        return int(self._run("assignment_publish", *args))

    def handoff(self, released: Iterable[ShardKey]) -> int:
        """Wake the assigned owners of shards this process just released; returns how many."""
        names = [shard_name(key) for key in released]
        if not names:
            return 0
        return int(self._run("membership_handoff", self.process_id, *names))

    def leave(self) -> bool:
        """Deregister; the assigner (only) is woken to reassign this process's shards."""
        return bool(self._run("membership_leave", self.process_id))

    def wake(self) -> None:
        """Interrupt this process's own :meth:`wait_for_nudge` (the process is stopping)."""
        self.client.rpush(self.keys.nudge_list(self.process_id), "1")

    def longest_wait(self, wanted: float) -> float:
        """``wanted`` seconds, but short enough to end before the client's socket times out."""
        if self._socket_timeout is None:
            self._socket_timeout = (socket_timeout_of(self.client) or 0.0,)
        socket_timeout = self._socket_timeout[0]
        if socket_timeout:
            # Redis ends a blocked command's wait on its timer tick: up to TIMER_SLACK late.
            return min(wanted, socket_timeout * SOCKET_MARGIN - TIMER_SLACK)
        return wanted

    def wait_for_nudge(self, timeout: float) -> bool:
        """Block up to ``timeout`` seconds (capped below the socket timeout) for a nudge:
        the assignment changed for us, a command waits, or we are the assigner and the
        membership changed."""
        timeout = self.longest_wait(timeout)
        if timeout < 0.001:
            return False
        return (
            self.client.blpop([self.keys.nudge_list(self.process_id)], timeout=timeout) is not None
        )


def socket_timeout_of(client: Client) -> float | None:
    """The socket timeout of ``client``'s connections, seconds (``None``: none).  Read
    from a connection object of its pool (not connected), so a library default counts
    too (redis-py 8 reads with a 5 s timeout unless told otherwise)."""
    timeout = getattr(client, "socket_timeout", None)
    pool: Any = getattr(client, "connection_pool", None)
    if timeout is None and pool is not None and hasattr(pool, "connection_kwargs"):
        timeout = getattr(pool.connection_class(**pool.connection_kwargs), "socket_timeout", None)
    if timeout is None and hasattr(client, "get_connection_kwargs"):
        timeout = client.get_connection_kwargs().get("socket_timeout")  # a cluster's nodes
    return float(timeout) if timeout else None


def live_processes(client: Client) -> tuple[int, list[ProcessInfo]]:
    """Redis's time in ms and every live process, for the dashboard."""
    keys = OwnershipKeys()
    reply = Scripts.for_client(client).membership_list(keys=[keys.prefix], args=[])
    processes = []
    for i in range(1, len(reply), 6):
        processes.append(
            ProcessInfo(
                id=reply[i].decode(),
                expires_ms=int(float(reply[i + 1])),
                weight=int(reply[i + 2]),
                queues=queue_names(json.loads(reply[i + 3])),
                info=json.loads(reply[i + 4]),
                beat_ms=int(reply[i + 5]),
            )
        )
    return int(reply[0]), processes


def send_command(client: Client, process_id: str, command: str) -> bool:
    """Leave ``command`` (quiet, stop) for a live process; ``False`` when it is unknown."""
    if command not in COMMANDS:
        raise ValueError(f"unknown command {command!r}; commands: {', '.join(COMMANDS)}")
    keys = OwnershipKeys()
    script = Scripts.for_client(client).membership_command
    return bool(script(keys=[keys.prefix], args=[process_id, command]))
