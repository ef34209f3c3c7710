"""The ticks of periodic jobs in Redis (:mod:`lowkiq.periodic`): pass ticks and enqueue
their jobs (one script call), run one now, and read a schedule's state.

A schedule's state lives in the shard of its job id (``schedule_hash``,
``schedule_log_list`` in :mod:`lowkiq.storage.keys`), so the ``schedule_tick``
script compares-and-sets the last passed tick and writes the tick's job in one
atomic step, in one Redis Cluster slot.  During a reshard the state stays in the
id's old shard until that shard is retired (:meth:`Queue.locator`); then the
reshard copies it to the id's new shard (:func:`carry_over`), and a claim that
finds no state in the new shard meanwhile starts from the retired one's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from lowkiq.errors import LowkiqError
from lowkiq.storage.layout import Layout
from lowkiq.storage.queue import Queue

#: What the script replies (see ``schedule_tick.lua``).
DONE, MOVED, NOT_DUE, RETIRED = 1, 0, 2, -1
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
    it was enqueued, how many ticks were enqueued, the last run asked now (ms), and the
    latest enqueues, newest first."""

    last: int | None = None
    enqueued: int | None = None
    enqueued_at: int | None = None
    runs: int = 0
    run_now_at: int | None = None
    log: list[Enqueue] = field(default_factory=list)


def _int(value: bytes | None) -> int | None:
    return None if value is None else int(value)


def _seed(queue: Queue, schedule_id: str, shard: int) -> str:
    """The last tick of the id's shard a running reshard retired, when ``shard`` is not it."""
    previous = queue.layout.previous
    if previous is None:
        return ""
    old = Layout(*previous).shard_of(schedule_id)
    if old == shard:
        return ""
    last = queue.client.hget(queue.keys.schedule_hash(old, schedule_id), "last")
    return "" if last is None else str(int(last))


def _call(queue: Queue, schedule_id: str, args: Sequence[str | bytes], by: str) -> TickReply:
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
) -> TickReply:
    """Pass every tick up to ``last`` (ms) and enqueue ``jobs`` (tick in ms, serialized
    payload; score and perform_in = the tick), if the last passed tick is still
    ``expected`` and ``last`` is due on Redis's clock; ``by`` names the caller in the log."""
    args: list[str | bytes] = ["" if expected is None else str(expected), str(last)]
    for tick, payload in jobs:
        args += [_score(tick), payload]
    return _call(queue, schedule_id, args, by)


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
    )


#: The fields of a schedule's state a reshard copies to its new shard.
_CARRIED = ("last", "enqueued", "enqueued_at", "runs", "run_now_at")


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
