"""Process membership: register, heartbeat, age out on Redis's clock, deregister.

Each ``lowkiq worker`` process beats every ``heartbeat_interval`` seconds
(``lua/membership_beat.lua``); one whose beat lapses for ``lease_ttl`` seconds
is dropped by the next beat of any process.  A beat returns the live
processes, from which every process computes the same shard assignment, and
any command (quiet, stop) the dashboard left for this process.
"""

from __future__ import annotations

import json
import os
import socket
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from lowkiq.connection import Client
from lowkiq.ownership.assignment import Member
from lowkiq.storage.keys import OwnershipKeys
from lowkiq.storage.scripts import Scripts

#: Commands the dashboard can leave for a process.
COMMANDS = ("quiet", "stop")


def new_process_id() -> str:
    """A process id unique across hosts and restarts: ``host:pid:random``."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True)
class Beat:
    """What one heartbeat learnt: Redis's time, live members, a command for us."""

    now_ms: int
    members: list[Member]
    expiries_ms: dict[str, int]
    command: str


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


@dataclass
class Membership:
    """One process's registration, on one Redis client."""

    client: Client
    process_id: str
    ttl: float
    queues: Sequence[str]
    keys: OwnershipKeys = field(default_factory=OwnershipKeys)

    def _run(self, name: str, *args: Any) -> Any:
        script = getattr(Scripts.for_client(self.client), name)
        return script(keys=[self.keys.prefix], args=args)

    def beat(self, weight: int, info: dict[str, Any]) -> Beat:
        """Say we are alive with ``weight`` threads (0: quiet); returns the live members."""
        reply = self._run(
            "membership_beat",
            self.process_id,
            max(1, round(self.ttl * 1000)),
            weight,
            json.dumps(sorted(self.queues)),
            json.dumps(info, sort_keys=True),
        )
        members, expiries = [], {}
        for i in range(2, len(reply), 4):
            member_id = reply[i].decode()
            expiries[member_id] = int(float(reply[i + 1]))
            members.append(
                Member(member_id, int(reply[i + 2]), frozenset(json.loads(reply[i + 3])))
            )
        return Beat(int(reply[0]), members, expiries, reply[1].decode())

    def leave(self) -> int:
        """Deregister and nudge the others; returns how many were nudged."""
        return int(self._run("membership_leave", self.process_id))

    def nudge_others(self) -> None:
        """Wake every other live process's coordinator (e.g. after releasing leases)."""
        self._run("membership_nudge", self.process_id)

    def wake(self) -> None:
        """Interrupt this process's own :meth:`wait_for_nudge` (the process is stopping)."""
        self.client.rpush(self.keys.nudge_list(self.process_id), "1")

    def wait_for_nudge(self, timeout: float) -> bool:
        """Block up to ``timeout`` seconds for a nudge (membership changed, a command)."""
        if timeout < 0.001:
            return False
        return (
            self.client.blpop([self.keys.nudge_list(self.process_id)], timeout=timeout) is not None
        )


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
                queues=json.loads(reply[i + 3]),
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
