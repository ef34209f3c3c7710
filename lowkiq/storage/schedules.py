"""The ticks of periodic jobs in Redis (:mod:`lowkiq.periodic`): pass ticks and enqueue
their jobs (one script call), run one now, and read a schedule's state; and what was
changed of the schedules at run time (:mod:`lowkiq.periodic.control`).

A schedule's state lives in the shard of its job id (``schedule_hash``,
``schedule_log_list`` in :mod:`lowkiq.storage.keys`), so the ``schedule_tick``
script compares-and-sets the last passed tick and writes the tick's job in one
atomic step, in one Redis Cluster slot.  During a reshard the state stays in the
id's old shard until that shard is retired (:meth:`Queue.locator`); then the
reshard copies it to the id's new shard (:func:`carry_over`), and a claim that
finds no state in the new shard meanwhile starts from the retired one's.

What was changed at run time (paused, resumed, ticks changed, added, removed,
reset) is one hash in the ownership slot, ``lowkiq:{lowkiq}:schedules`` (name ->
``revision json``), with its version ``lowkiq:{lowkiq}:schedules_version`` (a
counter: each change's revision).  Each change's revision is also recorded in the
state of the schedule's id (``rev``, :func:`revise`): the tick script refuses a
process that follows an older definition, so a paused schedule passes no tick
once its pause returned, wherever a process has not read the change yet.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from lowkiq.clients.connection import Client
from lowkiq.errors import LowkiqError
from lowkiq.storage.keys import OWNERSHIP_PREFIX
from lowkiq.storage.layout import Layout
from lowkiq.storage.queue import Queue
from lowkiq.storage.scripts import Scripts

#: What the script replies (see ``schedule_tick.lua``); STALE: the caller follows an
#: older definition than the one recorded in the shard (it passed nothing).
DONE, MOVED, NOT_DUE, STALE, RETIRED = 1, 0, 2, 3, -1
#: The schedules changed at run time: name -> ``revision json`` (a hash).
OVERRIDES_HASH = OWNERSHIP_PREFIX + "schedules"
#: Their version: the revision of the latest change (a counter).
OVERRIDES_VERSION = OWNERSHIP_PREFIX + "schedules_version"
#: How many times one call follows a reshard before it gives up.
REROUTES = 3


@dataclass(frozen=True)
class TickReply:
    """The outcome of one ``schedule_tick`` call.

    ``status``: :data:`DONE`, :data:`MOVED` (another process passed ticks since the
    caller looked), :data:`NOT_DUE` (the tick is later than Redis's clock) or
    :data:`RETIRED`.  ``now_ms``: Redis's clock; ``last``: the last passed tick.
    """

    status: int
    now_ms: int
    last: int | None


@dataclass(frozen=True)
class Enqueue:
    """One entry of a schedule's log: the job of ``tick`` (ms) enqueued at
    ``enqueued_at`` (ms, Redis's clock) by ``by`` (``host:pid``, or ``dashboard``);
    ``kind`` is ``tick``, or ``now`` for a run asked outside the ticks."""

    tick: int
    enqueued_at: int
    kind: str
    by: str = ""

    @property
    def delay_ms(self) -> int:
        """How long after its tick the job was enqueued."""
        return self.enqueued_at - self.tick


@dataclass(frozen=True)
class ScheduleState:
    """What Redis holds of a schedule: the last passed tick, the last enqueued tick, when
    it was enqueued, how many ticks were enqueued, the last run asked now (ms), the
    latest enqueues, newest first, and the revision of its definition."""

    last: int | None = None
    enqueued: int | None = None
    enqueued_at: int | None = None
    runs: int = 0
    run_now_at: int | None = None
    log: list[Enqueue] = field(default_factory=list)
    #: The revision of its definition recorded here (0: never changed at run time), and
    #: when it was recorded (ms; ``last`` was set to it: no tick of it passed yet then).
    rev: int = 0
    revised_at: int | None = None


def _int(value: bytes | None) -> int | None:
    return None if value is None else int(value)


def _seed(queue: Queue, schedule_id: str, shard: int) -> str:
    """``last rev`` of the id's shard a running reshard retired, when ``shard`` is not it."""
    previous = queue.layout.previous
    if previous is None:
        return ""
    old = Layout(*previous).shard_of(schedule_id)
    if old == shard:
        return ""
    last, rev = queue.client.hmget(queue.keys.schedule_hash(old, schedule_id), ["last", "rev"])
    if last is None:
        return ""
    return f"{int(last)} {int(rev or 0)}"


def _call(
    queue: Queue, schedule_id: str, args: Sequence[str | bytes], by: str, rev: int = 0
) -> TickReply:
    for _ in range(REROUTES):
        shard = queue.locator()(schedule_id)
        seed = _seed(queue, schedule_id, shard)
        status, now_ms, last = queue.write(
            "schedule_tick",
            [queue.keys.prefix(shard)],
            schedule_id,
            *args[:2],
            seed,
            by.replace(" ", "_"),
            str(rev),
            *args[2:],
        )
        if status != RETIRED:
            return TickReply(int(status), int(now_ms), _int(last) if last else None)
        queue.refresh_layout()
    raise LowkiqError(f"{queue.name}: schedule {schedule_id!r}: resharded during every attempt")


def pass_ticks(
    queue: Queue,
    schedule_id: str,
    expected: int | None,
    last: int,
    jobs: Sequence[tuple[int, bytes]],
    by: str = "",
    rev: int = 0,
) -> TickReply:
    """Pass every tick up to ``last`` (ms) and enqueue ``jobs`` (tick in ms, serialized
    payload; score and perform_in = the tick), if the last passed tick is still
    ``expected`` and ``last`` is due on Redis's clock; ``by`` names the caller in the log.
    ``rev``: the revision of the definition the caller follows (0: unchanged at run
    time); an older one than the shard's passes nothing (:data:`STALE`)."""
    args: list[str | bytes] = ["" if expected is None else str(expected), str(last)]
    for tick, payload in jobs:
        args += [_score(tick), payload]
    return _call(queue, schedule_id, args, by, rev)


def run_now(queue: Queue, schedule_id: str, payload: bytes, now: float, by: str = "") -> TickReply:
    """Enqueue the schedule's job now (score ``now``, unix seconds), its ticks untouched."""
    return _call(queue, schedule_id, ["", "", repr(now), payload], by)


def _score(tick_ms: int) -> str:
    return f"{tick_ms // 1000}.{tick_ms % 1000:03d}"


def read_state(queue: Queue, schedule_id: str) -> ScheduleState:
    """The schedule's state, read from the shard it is in now."""
    shard = queue.locator()(schedule_id)
    pipe = queue.client.pipeline(transaction=False)
    pipe.hgetall(queue.keys.schedule_hash(shard, schedule_id))
    pipe.lrange(queue.keys.schedule_log_list(shard, schedule_id), 0, -1)
    fields, entries = pipe.execute()
    log = []
    for entry in entries:
        tick, at, kind, by = (entry.decode().split(" ", 3) + [""])[:4]
        log.append(Enqueue(int(tick), int(at), kind, by))
    return ScheduleState(
        last=_int(fields.get(b"last")),
        enqueued=_int(fields.get(b"enqueued")),
        enqueued_at=_int(fields.get(b"enqueued_at")),
        runs=int(fields.get(b"runs", 0)),
        run_now_at=_int(fields.get(b"run_now_at")),
        log=log,
        rev=int(fields.get(b"rev", 0)),
        revised_at=_int(fields.get(b"revised_at")),
    )


def revise(queue: Queue, schedule_id: str, rev: int) -> bool:
    """Record revision ``rev`` of the schedule's definition in its id's shard: a process
    following an older one passes no tick from now on, and the schedule's ticks start
    again after now (``last`` = now).  ``False`` when the shard has ``rev`` or a newer one."""
    for _ in range(REROUTES):
        shard = queue.locator()(schedule_id)
        status, _ = queue.write("schedule_revise", [queue.keys.prefix(shard)], schedule_id, rev)
        if status != RETIRED:
            return bool(status)
        queue.refresh_layout()
    raise LowkiqError(f"{queue.name}: schedule {schedule_id!r}: resharded during every attempt")


@dataclass(frozen=True)
class StoredOverride:
    """One entry of the schedules changed at run time: its revision and its JSON."""

    rev: int
    document: str


def read_overrides(
    client: Client, known_version: int | None = None
) -> tuple[int, dict[str, StoredOverride] | None]:
    """The version of the schedules changed at run time and, unless it is
    ``known_version``, every entry by name (``None`` when unchanged)."""
    script = getattr(Scripts.for_client(client), "schedule_overrides")  # noqa: B009 - not typed in Scripts
    reply = script(keys=[OWNERSHIP_PREFIX], args=["" if known_version is None else known_version])
    version = int(reply[0])
    if len(reply) == 1:
        return version, None
    flat = reply[1]
    entries: dict[str, StoredOverride] = {}
    for name, value in zip(flat[::2], flat[1::2], strict=True):
        rev, _, document = value.decode().partition(" ")
        entries[name.decode()] = StoredOverride(int(rev), document)
    return version, entries


def write_override(client: Client, name: str, expected_rev: int, document: str) -> int | None:
    """Store ``document`` as the run-time entry of schedule ``name`` if its entry is still
    at ``expected_rev`` (0: none); returns the new revision, or ``None`` when the entry
    changed meanwhile (nothing written)."""
    script = getattr(Scripts.for_client(client), "schedule_define")  # noqa: B009 - not typed in Scripts
    done, rev = script(keys=[OWNERSHIP_PREFIX], args=[name, expected_rev, document])
    return int(rev) if done else None


#: The fields of a schedule's state a reshard copies to its new shard.
_CARRIED = ("last", "enqueued", "enqueued_at", "runs", "run_now_at", "rev", "revised_at")


def carry_over(queue: Queue, old: int, layout: Layout) -> int:
    """Copy the state of the schedules in the retired shard ``old`` to their shards of
    ``layout`` (each field only where the new shard has none: a claim there may have
    started from it already); returns how many schedules."""
    members = queue.client.smembers(queue.keys.schedules_set(old))
    ids = [m.decode() if isinstance(m, bytes) else m for m in members]
    for schedule_id in ids:
        new = layout.shard_of(schedule_id)
        fields = queue.client.hmget(queue.keys.schedule_hash(old, schedule_id), _CARRIED)
        # Two writes that may be split: a missing set member only keeps a later reshard
        # from carrying this state on (the next claim then seeds it from this shard).
        pipe = queue.client.pipeline(transaction=False)
        for name, value in zip(_CARRIED, fields, strict=True):
            if value is not None:
                pipe.hsetnx(queue.keys.schedule_hash(new, schedule_id), name, value)
        pipe.sadd(queue.keys.schedules_set(new), schedule_id)
        pipe.execute()
    return len(ids)
