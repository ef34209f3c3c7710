"""Whether a worker process is live and ready, from its heartbeats (no Redis call).

*Live* (``GET /live``): every loop of the process makes progress.  A
processing thread in one ``perform`` for longer than ``stuck_after`` seconds (for
a worker with ``perform_timeout``: that + :data:`lowkiq.perform.timeouts.STUCK_GRACE`,
past which the perform could not be interrupted), or a loop (a processing thread
outside ``perform``, or the coordinator) that has not stamped its heartbeat for
:func:`silent_after` seconds, makes it not live: restarting the process is the
cure.  A Redis outage does not: the loops keep turning while they back off and
retry.

*Ready* (``GET /ready``): live, registered (its first heartbeat reached
Redis), connected (its last heartbeat round reached Redis, within
``lease_ttl``), and neither quiet nor stopping: a process that serves shards
or is about to; and on a Redis that neither evicts keys (unless
``settings.allow_eviction``) nor is full, as the memory watch last read it
(:mod:`lowkiq.health.memory_watch`).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any

from lowkiq.health.heartbeats import CoordinatorBeat, Heartbeat, Heartbeats, Performing
from lowkiq.perform.timeouts import Watched, performs
from lowkiq.settings import Settings

#: Least seconds a loop may go without a heartbeat before the process is not live.
SILENT_AFTER_MIN = 60.0


def silent_after(config: Settings) -> float:
    """Seconds a loop may go without a heartbeat: :data:`SILENT_AFTER_MIN`, or three of
    its longest regular wait (``poll_interval``, ``heartbeat_interval``) when longer."""
    return max(SILENT_AFTER_MIN, 3 * config.poll_interval, 3 * config.heartbeat_interval)


@dataclass(frozen=True)
class Limits:
    """The thresholds of the verdicts, in seconds."""

    stuck_after: float
    silent_after: float
    #: The last heartbeat that reached Redis must be this recent to count as connected.
    connected_within: float

    @classmethod
    def of(cls, config: Settings) -> Limits:
        """The limits of ``config`` (``stuck_after``, :func:`silent_after`, ``lease_ttl``)."""
        return cls(config.stuck_after, silent_after(config), config.lease_ttl)


@dataclass(frozen=True)
class ProcessState:
    """What the process's server knows of itself at the time of a probe."""

    process_id: str = ""
    #: The shards whose lease it holds, ``Worker:shard``.
    shards: list[str] = field(default_factory=list)
    #: Batches in ``perform`` now.
    busy: int = 0
    quiet: bool = False
    stopping: bool = False


@dataclass(frozen=True)
class Verdict:
    """One probe's answer: ``ok`` (HTTP 200) or not (503), why not, and the facts."""

    ok: bool
    reason: str
    facts: dict[str, Any]

    def document(self) -> dict[str, Any]:
        """The JSON body: ``ok``, ``reason`` (empty when ok), then the facts."""
        return {"ok": self.ok, "reason": self.reason, **self.facts}


def _age(beat: Heartbeat, now: float) -> float | None:
    return None if beat.at is None else round(now - beat.at, 3)


def facts(heartbeats: Heartbeats, state: ProcessState, limits: Limits) -> dict[str, Any]:
    """The facts both probes report: threads, shards held, busy batches, beat ages."""
    now = heartbeats.clock()
    coordinator = heartbeats.coordinator
    threads = []
    for beat in heartbeats.threads():
        performing = beat.performing
        threads.append(
            {
                "name": beat.name,
                "beat_age": _age(beat, now),
                "performing": None
                if performing is None
                else {"shard": performing.shard, "for": round(now - performing.since, 3)},
            }
        )
    succeeded = coordinator.succeeded_at
    memory = heartbeats.redis_memory
    return {
        "pid": os.getpid(),
        "process_id": state.process_id,
        "threads": threads,
        "shards": state.shards,
        "busy": state.busy,
        "quiet": state.quiet,
        "stopping": state.stopping,
        "registered": succeeded is not None,
        "coordinator": {
            "beat_age": _age(coordinator, now),
            "last_success_age": None if succeeded is None else round(now - succeeded, 3),
            "failures": coordinator.failures,
            "error": coordinator.error,
        },
        "stuck_after": limits.stuck_after,
        "silent_after": limits.silent_after,
        "redis_memory": {
            "eviction": memory.eviction,
            "allow_eviction": memory.allow_eviction,
            "full": memory.full,
            "read_age": None if memory.read_at is None else round(now - memory.read_at, 3),
        },
    }


def _stuck(
    performing: Performing, now: float, limits: Limits, watched: Watched | None
) -> str | None:
    """Why a thread in ``perform`` is stuck, or ``None``: past its worker's
    ``perform_timeout`` + grace while under it (``watched``, timed from that perform's
    own start), else past its threshold (``stuck_after``)."""
    if watched is not None:
        return watched.stuck(time.monotonic())
    took = now - performing.since
    if performing.stuck_after is not None:
        limit, name = performing.stuck_after, "perform_timeout + grace"
    elif performing.stuck_floor is not None and performing.stuck_floor > limits.stuck_after:
        limit, name = performing.stuck_floor, "max_perform_seconds + grace"
    else:
        limit, name = limits.stuck_after, "stuck_after"
    if took <= limit:
        return None
    return f"in perform of {performing.shard} for {took:.1f}s ({name} {limit:g}s)"


def _not_live(heartbeats: Heartbeats, state: ProcessState, limits: Limits) -> list[str]:
    now = heartbeats.clock()
    reasons = []
    limited = {watched.shard: watched for watched in performs()}
    for beat in heartbeats.threads():
        performing = beat.performing
        if performing is not None:
            stuck = _stuck(performing, now, limits, limited.get(performing.shard))
            if stuck is not None:
                reasons.append(f"{beat.name} {stuck}")
            continue
        if state.stopping or beat.at is None:
            continue  # a stopping process's loops end; a loop not started has no beat
        if now - beat.at > limits.silent_after:
            reasons.append(
                f"{beat.name} silent for {now - beat.at:.1f}s "
                f"(silent_after {limits.silent_after:g}s)"
            )
    coordinator = heartbeats.coordinator
    if not state.stopping and coordinator.at is not None:
        silent = now - coordinator.at
        if silent > limits.silent_after:
            reasons.append(
                f"coordinator silent for {silent:.1f}s (silent_after {limits.silent_after:g}s)"
            )
    return reasons


def live(heartbeats: Heartbeats, state: ProcessState, limits: Limits) -> Verdict:
    """The ``/live`` verdict (see the module)."""
    reasons = _not_live(heartbeats, state, limits)
    return Verdict(not reasons, "; ".join(reasons), facts(heartbeats, state, limits))


def _waiting(coordinator: CoordinatorBeat, now: float) -> str:
    """``waiting for Redis at URL for 40 s (the error)``: a process not registered yet."""
    where = f" at {coordinator.redis}" if coordinator.redis else ""
    since = coordinator.failing_since
    waited = "" if since is None else f" for {now - since:.0f} s"
    return f"waiting for Redis{where}{waited} ({coordinator.error})"


def ready(heartbeats: Heartbeats, state: ProcessState, limits: Limits) -> Verdict:
    """The ``/ready`` verdict (see the module)."""
    now = heartbeats.clock()
    coordinator = heartbeats.coordinator
    reasons = [f"not live: {reason}" for reason in _not_live(heartbeats, state, limits)]
    if state.stopping:
        reasons.append("stopping")
    elif state.quiet:
        reasons.append("quiet: takes no batches and hands its shards over")
    if coordinator.succeeded_at is None and coordinator.failures:
        reasons.append(f"not registered yet: {_waiting(coordinator, now)}")
    elif coordinator.succeeded_at is None:
        reasons.append("not registered yet: no heartbeat has reached Redis")
    elif coordinator.failures:
        reasons.append(f"Redis does not answer the heartbeat: {coordinator.error}")
    elif now - coordinator.succeeded_at > limits.connected_within:
        reasons.append(
            f"no heartbeat reached Redis for {now - coordinator.succeeded_at:.1f}s "
            f"(lease_ttl {limits.connected_within:g}s)"
        )
    memory = heartbeats.redis_memory
    if memory.eviction is not None and not memory.allow_eviction:
        reasons.append(f"Redis may evict lowkiq's keys: {memory.eviction}")
    if memory.full is not None:
        reasons.append(memory.full)
    return Verdict(not reasons, "; ".join(reasons), facts(heartbeats, state, limits))
