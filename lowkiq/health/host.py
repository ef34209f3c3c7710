"""This host's worker processes, as the membership lists them: ``lowkiq status`` and
``lowkiq quiet``.

A process is *alive and registered* while it is in the membership: its
heartbeat reached Redis within ``lease_ttl`` (:mod:`lowkiq.ownership.membership`).
A host is this machine's name (``socket.gethostname()``), as each process
tells it with every heartbeat; in a container, the container's.
"""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from dataclasses import dataclass

from lowkiq.ownership.status import Process, Processes


def this_host() -> str:
    """The name this machine's processes register under."""
    return socket.gethostname()


@dataclass(frozen=True)
class Wanted:
    """Which processes a command is about: every one of ``host``, or one of them."""

    host: str
    pid: int | None = None
    process_id: str | None = None

    def matches(self, process: Process) -> bool:
        """Whether ``process`` is one of the wanted ones."""
        if self.process_id is not None:
            return process.id == self.process_id
        return process.host == self.host and (self.pid is None or process.pid == self.pid)

    def describe(self) -> str:
        """The wanted processes, for messages."""
        if self.process_id is not None:
            return f"process {self.process_id}"
        if self.pid is not None:
            return f"process {self.pid} of host {self.host}"
        return f"worker process of host {self.host}"


def select(found: Processes, wanted: Wanted) -> list[Process]:
    """The live processes ``wanted`` names, oldest first."""
    return [process for process in found.processes if wanted.matches(process)]


def describe(process: Process) -> str:
    """One line about a live process: id, threads, shards, busy batches, last heartbeat."""
    line = (
        f"{process.id}: {process.threads} threads, {len(process.shards)} shards, "
        f"{process.busy} busy, heartbeat {process.beat_age:.1f}s ago"
    )
    return line + (", quiet" if process.quiet else "")


@dataclass(frozen=True)
class Status:
    """The answer of ``lowkiq status``: ok (exit 0) or not, why not, and the processes."""

    ok: bool
    reason: str
    processes: list[Process]


def status(found: Processes, wanted: Wanted, at_least: int = 1) -> Status:
    """Whether the processes ``wanted`` names are alive and registered (``at_least``
    of them, when it names every process of the host)."""
    chosen = select(found, wanted)
    if chosen and len(chosen) < at_least:
        return Status(
            False,
            f"{len(chosen)} of the {at_least} expected worker processes of host "
            f"{wanted.host} are registered",
            chosen,
        )
    if not chosen:
        what = wanted.describe()
        if wanted.process_id is None and wanted.pid is None:
            return Status(False, f"no {what} is registered", [])
        return Status(False, f"{what} is not registered (not running, or its heartbeat lapsed)", [])
    return Status(True, "", chosen)


def settled(process: Process | None) -> bool:
    """Whether a quieted process is done handing over: gone, or holding no shard and
    performing no batch (as of its last heartbeat)."""
    return process is None or (process.quiet and not process.shards and not process.busy)


def check_url(url: str, timeout: float = 5.0) -> Status:
    """``GET url`` (a worker's ``/live`` or ``/ready``): ok on 200, else why not."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return Status(response.status == 200, "", [])
    except urllib.error.HTTPError as error:
        reason = f"{url} answered {error.code}"
        try:
            told = json.loads(error.read()).get("reason", "")
        except (ValueError, AttributeError):
            told = ""
        return Status(False, f"{reason}: {told}" if told else reason, [])
    except (urllib.error.URLError, OSError) as error:
        cause = getattr(error, "reason", error)
        return Status(False, f"{url} does not answer: {cause}", [])
