"""The assigner: the one process that computes the assignment, and only on change.

Whichever live process holds the assigner role (a key with a TTL, taken by a
beat when nobody holds it, kept by its holder's beats) recomputes the
assignment when its beat shows that the membership version moved past the
version of the published assignment.  It reads the live processes once
(:meth:`~lowkiq.ownership.membership.Membership.snapshot`) and the published
assignment, computes the new one from them (sticky: see
:func:`~lowkiq.ownership.assignment.assign`) and publishes only what changed
(``lua/assignment_publish.lua``), which wakes the processes whose shards changed
and no other.  Publishing is fenced by the role: a process that lost it
changes nothing.  It is also fenced by the assignment it was computed against:
the changes are written only while the generation the snapshot read is still the
published one, and never over an assignment of a newer membership version, so a
run that read an older snapshot can never overwrite a newer assignment (another
process that held the role meanwhile, or another run of this process).  The runs
of one process take turns (the coordinator's thread, and ``close()`` on the main
thread when the process stops).  Between changes nobody computes anything.

A shard whose previous owner died is served again only once that owner's lease
expires; the assignment sends such orphans to the youngest processes.  The assigner
also remembers which shards it moved lately and from whom (:class:`RecentMoves`): a
shard that moved away from a process that is gone since may still be waiting out
its lease, and is placed as an orphan too.  The role goes to the youngest process
when it is free (``lua/membership_beat.lua``), so a rolling restart keeps one
assigner, and its memory, to the end.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field

from lowkiq.ownership.assignment import Member, ShardKey, assign
from lowkiq.ownership.membership import STALE, Beat, Membership, shard_name

log = logging.getLogger("lowkiq.ownership")

Assign = Callable[
    [Sequence[Member], Mapping[str, Sequence[int]], Mapping[ShardKey, str]], dict[ShardKey, str]
]


@dataclass(frozen=True)
class Published:
    """What one computation published."""

    version: int
    generation: int
    #: Processes whose shards changed, and shards that changed owner.
    processes_changed: int
    shards_moved: int
    #: Seconds the computation took (read, compute, publish).
    took: float


def encode(shards: Mapping[str, Sequence[int]]) -> str:
    """One process's shards as the assignment hash stores them."""
    return json.dumps(
        {name: list(numbers) for name, numbers in sorted(shards.items())}, separators=(",", ":")
    )


def by_process(owners: Mapping[ShardKey, str]) -> dict[str, dict[str, list[int]]]:
    """``process id -> {queue: [shard, ...]}`` of an owner map, shards in order."""
    by_owner: dict[str, dict[str, list[int]]] = {}
    for (queue, shard), owner in owners.items():
        by_owner.setdefault(owner, {}).setdefault(queue, []).append(shard)
    for shards in by_owner.values():
        for numbers in shards.values():
            numbers.sort()
    return by_owner


@dataclass
class RecentMoves:
    """The shards the assignment moved within the last ``horizon`` seconds, and from
    which process: one that moved away from a process that is gone since may still be
    waiting out that process's lease (it died before handing the shard over)."""

    horizon: float
    clock: Callable[[], float] = time.monotonic
    #: Per shard: the processes it moved away from, and when (by ``clock``).
    _moves: dict[ShardKey, list[tuple[str, float]]] = field(
        default_factory=dict, init=False, repr=False
    )

    def record(self, previous: Mapping[ShardKey, str], owners: Mapping[ShardKey, str]) -> None:
        """Remember the shards that moved from ``previous`` to ``owners``."""
        now = self.clock()
        for key, owner in owners.items():
            before = previous.get(key)
            if before is not None and before != owner:
                self._moves.setdefault(key, []).append((before, now))
        self._forget(now)

    def waiting(self, present: Collection[str]) -> set[ShardKey]:
        """The shards that moved lately away from a process not in ``present``."""
        self._forget(self.clock())
        return {
            key
            for key, moves in self._moves.items()
            if any(before not in present for before, _ in moves)
        }

    def _forget(self, now: float) -> None:
        since = now - self.horizon
        for key in list(self._moves):
            moves = [move for move in self._moves[key] if move[1] > since]
            if moves:
                self._moves[key] = moves
            else:
                del self._moves[key]


class Assigner:
    """Computes and publishes the assignment when this process holds the assigner role.

    ``compute`` replaces :func:`~lowkiq.ownership.assignment.assign` (tests); by default
    the shards :attr:`recent` says are waiting out a gone process's lease are placed as
    orphans.  They are remembered for twice the membership TTL, at least a lease TTL
    (:func:`~lowkiq.ownership.membership.membership_ttl`)."""

    def __init__(self, membership: Membership, compute: Assign | None = None) -> None:
        self.membership = membership
        self.compute: Assign = compute or self._assign
        #: What this process's publications moved lately.
        self.recent = RecentMoves(2 * membership.ttl)
        #: The last publication of this process (for logs, the health page and benches).
        self.last: Published | None = None
        #: Shards moved and seconds spent, over every publication of this process.
        self.moves = 0
        self.took = 0.0
        # The generation this process published last, and that assignment.
        self._kept: tuple[int, dict[ShardKey, str]] | None = None
        # One run at a time: a run that read an older snapshot would be refused anyway.
        self._running = threading.Lock()

    def _assign(
        self,
        members: Sequence[Member],
        shards: Mapping[str, Sequence[int]],
        previous: Mapping[ShardKey, str],
    ) -> dict[ShardKey, str]:
        present = {member.id for member in members}
        return assign(members, shards, previous, self.recent.waiting(present))

    def due(self, beat: Beat) -> bool:
        """Whether ``beat`` asks this process to recompute the assignment."""
        return beat.assigner and beat.assigned_version != beat.version

    def published(self) -> dict[ShardKey, str]:
        """The published assignment: ``(queue, shard) -> process id``."""
        client = self.membership.client
        raw = client.hgetall(self.membership.keys.assignment_hash)
        # One JSON document of all the processes' entries parses faster than one each.
        text = ",".join(v.decode() if isinstance(v, bytes) else str(v) for v in raw.values())
        entries = json.loads(f"[{text}]")
        owners: dict[ShardKey, str] = {}
        for process, shards_by_queue in zip(raw, entries, strict=True):
            owner = process.decode() if isinstance(process, bytes) else str(process)
            for queue, shards in shards_by_queue.items():
                for shard in shards:
                    owners[(queue, shard)] = owner
        return owners

    def run(self) -> Published | None:
        """Recompute from the live processes and publish the changes; ``None`` when this
        process is no longer the assigner, or when another run published after the
        snapshot this one read (that one is kept; the next beat recomputes if the
        membership moved again).  Runs of this process take turns."""
        with self._running:
            return self._run()

    def _run(self) -> Published | None:
        started = time.perf_counter()
        snapshot = self.membership.snapshot()
        kept = self._kept
        if kept is not None and kept[0] == snapshot.generation:
            previous = kept[1]  # this process published it: not read again
        else:
            # Read after the snapshot: when it is newer than the snapshot's generation,
            # the publication below is refused (the generation moved), never misapplied.
            previous = self.published()
        shards = {name: list(numbers) for name, numbers in snapshot.shards_by_queue.items()}
        owners = self.compute(snapshot.members, shards, previous)
        moved: list[tuple[str, str]] = []
        # The processes whose shards changed: the old and new owners of the moved ones.
        touched: set[str] = set()
        owner_before = previous.get
        for key, owner in owners.items():
            before = owner_before(key)
            if before != owner:
                moved.append((shard_name(key), owner))
                touched.add(owner)
                if before is not None:
                    touched.add(before)
        for key in previous.keys() - owners.keys():
            moved.append((shard_name(key), ""))
            touched.add(previous[key])
        after = by_process({key: owner for key, owner in owners.items() if owner in touched})
        changed = [
            (process, encode(after[process]) if process in after else "")
            for process in sorted(touched)
        ]
        generation = self.membership.publish(snapshot.version, snapshot.generation, changed, moved)
        if generation == STALE:
            log.debug(
                "assignment of membership %d not published: generation %d was replaced",
                snapshot.version,
                snapshot.generation,
            )
        if generation <= 0:
            return None
        self.last = Published(
            snapshot.version, generation, len(changed), len(moved), time.perf_counter() - started
        )
        self._kept = (generation, owners)
        self.recent.record(previous, owners)
        self.moves += len(moved)
        self.took += self.last.took
        if moved:
            log.info(
                "assignment %d (membership %d, %d processes): %d shard(s) moved, %d "
                "process(es) woken, in %.0f ms",
                generation,
                snapshot.version,
                len(snapshot.members),
                len(moved),
                len(changed),
                self.last.took * 1000,
            )
        return self.last
