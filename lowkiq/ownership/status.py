"""Who serves what, for people: the live worker processes and each queue's shard owners.

:func:`processes` reads the membership (what each process told about itself
at its last heartbeat) and the shard leases (who holds each shard now), so
the dashboard can show every live process and flag the shards nobody serves.
:func:`command_process` leaves a command (quiet, stop) that the process picks
up at once (it is woken) or at its next heartbeat at the latest.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lowkiq.ownership.leases import parse_owner, tokens
from lowkiq.ownership.membership import COMMANDS, ProcessInfo, live_processes, send_command
from lowkiq.settings import Settings, settings


@dataclass(frozen=True)
class RunningBatchInfo:
    """A batch a process performs, as of its last report."""

    #: ``Queue:shard``.
    shard: str
    #: The executor thread performing it.
    thread: str
    #: Unix time its perform started.
    started_at: float
    #: Whether it was asked to stop (the process stops, or the shard is handed over).
    stopping: bool


@dataclass(frozen=True)
class Process:
    """A live ``lowkiq worker`` process as of its last heartbeat."""

    id: str
    host: str
    pid: int
    threads: int
    queues: list[str]
    version: str
    #: Unix time it started.
    started_at: float
    #: Seconds since its last heartbeat, on Redis's clock.
    beat_age: float
    #: Seconds until it ages out unless it beats again.
    expires_in: float
    #: Resident memory, bytes.
    rss: int
    #: Batches in ``perform`` now.
    busy: int
    #: The shards it holds, ``"Queue:shard"``.
    shards: list[str]
    #: ``automatic`` (shards assigned by the membership) or ``static`` (a splitter).
    mode: str
    #: Takes no new batches and hands its shards over (quiet from the dashboard).
    quiet: bool
    #: The batches it performs (as of its last report, sent when they change).
    running: tuple[RunningBatchInfo, ...] = ()

    @property
    def shards_by_queue(self) -> dict[str, list[int]]:
        """Its shards grouped by queue, in order."""
        by_queue: dict[str, list[int]] = {}
        for name in self.shards:
            queue, _, shard = name.rpartition(":")
            by_queue.setdefault(queue, []).append(int(shard))
        return {queue: sorted(shards) for queue, shards in sorted(by_queue.items())}


@dataclass(frozen=True)
class QueueOwners:
    """Who holds each shard of one worker's queue."""

    worker: str
    queue: str
    #: Per shard, the id of the process holding its lease, or ``None``.
    owners: list[str | None]
    #: Per shard, whether its holder is a live process.
    live: list[bool]
    #: The number of the first shard (shards are renumbered by a reshard).
    first: int = 0

    @property
    def unowned(self) -> list[int]:
        """Shards no live process serves: nobody holds the lease, or a lapsed process
        still does (it is taken over when that lease expires)."""
        return [self.first + index for index, live in enumerate(self.live) if not live]


@dataclass(frozen=True)
class Processes:
    """The live processes and the shard owners of every worker's queue."""

    #: Redis's time of the reading, Unix seconds.
    at: float
    processes: list[Process]
    queues: list[QueueOwners]

    def find(self, process_id: str) -> Process | None:
        """The live process ``process_id``, or ``None``."""
        return next((p for p in self.processes if p.id == process_id), None)


def _process(info: ProcessInfo, now_ms: int) -> Process:
    told: dict[str, Any] = info.info
    return Process(
        id=info.id,
        host=str(told.get("host", "?")),
        pid=int(told.get("pid", 0)),
        threads=int(told.get("threads", 0)),
        queues=list(info.queues),
        version=str(told.get("version", "?")),
        started_at=float(told.get("started_at", 0.0)),
        beat_age=max(0, now_ms - info.beat_ms) / 1000.0,
        expires_in=max(0, info.expires_ms - now_ms) / 1000.0,
        rss=int(told.get("rss", 0)),
        busy=int(told.get("busy", 0)),
        shards=[str(s) for s in told.get("shards", [])],
        mode=str(told.get("mode", "automatic")),
        quiet=bool(told.get("quiet", False)) or info.quiet,
        running=tuple(
            RunningBatchInfo(
                str(batch.get("shard", "?")),
                str(batch.get("thread", "?")),
                float(batch.get("started_at") or 0.0),
                bool(batch.get("stopping", False)),
            )
            for batch in told.get("running", [])
        ),
    )


def processes(config: Settings = settings) -> Processes:
    """The live processes (oldest first) and the shard owners of ``config.workers``."""
    client = config.client()
    now_ms, infos = live_processes(client)
    found = sorted((_process(info, now_ms) for info in infos), key=lambda p: p.started_at)
    live_ids = {p.id for p in found}
    queues = []
    for worker in config.workers:
        queue = worker.queue(client, config)
        queue.refresh_layout()
        owners = [parse_owner(token) if token else None for token in tokens(queue)]
        live = [owner is not None and owner in live_ids for owner in owners]
        queues.append(QueueOwners(worker.__name__, queue.name, owners, live, queue.shards.start))
    return Processes(now_ms / 1000.0, found, queues)


def command_process(process_id: str, command: str, config: Settings = settings) -> bool:
    """Leave ``command`` (``quiet`` or ``stop``) for a live process and wake it.

    ``quiet``: it takes no new batches, finishes its running ones and hands its
    shards to the other processes, staying up (like Sidekiq's quiet).
    ``stop``: it shuts down as on TERM and exits 0.  Returns ``False`` when no
    live process has that id; raises :class:`ValueError` for another command.
    """
    if command not in COMMANDS:
        raise ValueError(f"unknown command {command!r}; commands: {', '.join(COMMANDS)}")
    return send_command(config.client(), process_id, command)
