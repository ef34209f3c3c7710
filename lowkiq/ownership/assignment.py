"""Which live process owns which shard: a pure function, tested without Redis.

:func:`assign` divides the shards of every queue among the live processes
that serve it, by weight (threads), keeping each shard with its previous
owner whenever that owner is still within its share.  It runs in two steps:

1. **Counts.**  A process's share of a queue is ``shards * weight / total
   weight of the queue's processes``; it gets that share rounded down or up,
   and its total over all queues is its summed share rounded down or up.
   Which processes get the rounded-up counts is chosen to keep shards where
   they are: first the processes that already hold that many.  Such a
   rounding always exists (a matrix can be rounded keeping every entry, row
   sum and column sum within one; Bacharach, 1966): a greedy pass finds most
   of it, and alternating paths (as in bipartite matching) fix the rest.
2. **Shards.**  Each process keeps its previous shards of a queue up to its
   count; the shards left over (new, or owned by a process that left or has
   too many) are dealt to the processes still short: orphans (shards of a
   process that is no longer a member: it died) to the youngest first, the
   others round-robin, youngest first.  An orphan waits out its dead owner's
   lease, so it must not go to the process a rolling restart stops next (the
   oldest): one still placed on an older process is exchanged for a younger
   one's shard (:mod:`~lowkiq.ownership.orphans`).

The cost is O(S + P × Q) for S shards, P processes and Q queues (5–25 ms
at S = 10,000 and P = 1,000 in 1 or 10 queues; ``bench/assignment.py``), and
the moves are the fewest the counts allow: a process joining or leaving moves
about S / P shards, a full rolling deploy about 2 × S.  A process that dies
moves its shards and at most as many more (one exchange per orphan): about
2.8 × S when every process of a rolling restart is killed.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

from lowkiq.ownership.orphans import shelter

#: A shard as ownership sees it: ``(queue name, shard number)``.
ShardKey = tuple[str, int]


@dataclass(frozen=True)
class Member:
    """A live process as the assignment sees it."""

    id: str
    weight: int
    queues: frozenset[str]
    #: When it joined, Redis's time in ms (0: unknown).  The youngest processes are the
    #: least likely to leave next: a rolling restart stops the oldest first.
    joined: int = 0


def assign(
    members: Sequence[Member],
    shards_by_queue: Mapping[str, Sequence[int]],
    previous: Mapping[ShardKey, str] | None = None,
    waiting: Collection[ShardKey] = (),
) -> dict[ShardKey, str]:
    """``(queue, shard) -> member id`` for every shard some live member serves.

    Members with weight 0 (quiet) take nothing, a member takes only shards of
    the queues it serves, and a queue no member serves is left out.  With
    ``W_q`` the total weight of the members serving queue ``q`` (of ``n_q``
    shards), member ``m`` (weight ``w``) has the share ``a(m, q) = n_q * w / W_q``
    of ``q`` and the share ``R(m) = sum of a(m, q)`` over its queues in total.
    Guaranteed, whatever the weights and queue sets:

    * ``m`` owns ``floor(a(m, q))`` or ``ceil(a(m, q))`` shards of each queue;
    * ``m`` owns ``floor(R(m))`` or ``ceil(R(m))`` shards in total.  When every
      member serves every queue, ``R(m) = S * w / W`` for all ``S`` shards and
      total weight ``W``.  A queue's shards are divided among the members that
      serve it only: a member serving fewer queues does not take more of the
      queues it serves to even out the totals.
    * Each member keeps ``min(previous, count)`` of the shards of a queue it
      owned in ``previous`` (less those it gives for orphans, below): the
      shards that move are those whose previous owner left, went quiet or
      stopped serving the queue, and per member and queue those beyond its new
      count.  Which members get the rounded-up counts is chosen to keep as many
      shards in place as it can (among those holding one, the oldest first, so
      that the oldest have the least room for orphans; among the others, the
      youngest first).
    * Orphans, the shards whose previous owner is not in ``members`` at all
      (its process died and aged out; a stopping process goes quiet first and
      hands its shards over), go to the youngest members (latest ``joined``),
      the least likely to leave before the dead owner's lease expires: first to
      those with room, then each orphan still on a member in exchange for a
      shard of a younger one, which goes to the older member instead (one
      kept shard moves per orphan at most).  Members that joined at the same
      time exchange nothing.  ``waiting`` names more shards to treat as orphans
      although their previous owner is a member: those that moved to it from a
      process that is gone since, whose lease they may still be waiting out.
    * The result depends on the members' ids, weights, queues and join times,
      not on their order.

    Without ``previous`` the shards of each queue are dealt round-robin to its
    members, youngest first (in the order of their ids when they joined at the
    same time).  Raises :class:`ValueError` on a duplicate member id or a
    negative weight.
    """
    _check(members)
    live = sorted((m for m in members if m.weight > 0), key=lambda m: m.id)
    present = frozenset(m.id for m in members)
    plan = _Plan(live, shards_by_queue, previous or {}, present, waiting)
    plan.round_up()
    return plan.place()


class _Plan:
    """One call of :func:`assign`: the counts (:meth:`round_up`), then the shards (:meth:`place`).

    Members are numbered by id order; "extra" means a member's count of a
    queue is its share rounded up rather than down.  ``present`` is every
    member's id, quiet ones too: a previous owner not among them is gone.
    ``waiting``: the shards :func:`assign` treats as orphans besides.
    """

    def __init__(
        self,
        live: list[Member],
        shards_by_queue: Mapping[str, Sequence[int]],
        previous: Mapping[ShardKey, str],
        present: frozenset[str],
        waiting: Collection[ShardKey] = (),
    ) -> None:
        self.live = live
        index = {m.id: i for i, m in enumerate(live)}
        #: Per member: its rank youngest first, and oldest first (ties: id order).
        self.youth = _ranks(live, lambda m: (-m.joined, m.id))
        self.seniority = _ranks(live, lambda m: (m.joined, m.id))
        #: Per queue: the shards whose previous owner is gone (their process died).
        self.orphaned: dict[str, set[int]] = {}
        self.queues: list[str] = []
        self.shards: dict[str, Sequence[int]] = {}
        #: Per queue: its members' base counts (share rounded down), by member number.
        self.base: dict[str, dict[int, int]] = {}
        #: Per queue: the members whose share is fractional, in member order.
        self.eligible: dict[str, list[int]] = {}
        #: Per queue: how many of its eligible members get an extra.
        self.extras: dict[str, int] = {}
        #: Per queue: each shard's previous owner if a member serving it (else -1).
        self.was: dict[str, list[int]] = {}
        #: Per queue: how many shards each member owned before.
        self.held: dict[str, dict[int, int]] = {}
        #: Per queue: the total weight of its members.
        self.totals: dict[str, int] = {}
        #: Per member: the numerator of its share of each queue where that is fractional.
        self.fractions: list[dict[str, int]] = [{} for _ in live]
        owner_of, number_of, known = previous.get, index.get, present | {""}
        waiting_by_queue: dict[str, set[int]] = {}
        for queue, shard in waiting:
            waiting_by_queue.setdefault(queue, set()).add(shard)
        for queue in sorted(shards_by_queue):
            serving = [i for i, m in enumerate(live) if queue in m.queues]
            if not serving:
                continue
            shards = shards_by_queue[queue]
            total = sum(live[i].weight for i in serving)
            count = len(shards)
            base: dict[int, int] = {}
            eligible: list[int] = []
            for i in serving:
                whole, part = divmod(count * live[i].weight, total)
                base[i] = whole
                if part:
                    eligible.append(i)
                    self.fractions[i][queue] = part  # over `total`
            self.queues.append(queue)
            self.totals[queue] = total
            self.shards[queue] = shards
            self.base[queue] = base
            self.eligible[queue] = eligible
            self.extras[queue] = count - sum(base.values())
            was = [-1] * count
            lost = waiting_by_queue[queue] & set(shards) if queue in waiting_by_queue else set()
            if previous:
                before = [owner_of((queue, shard), "") for shard in shards]
                was = [number_of(owner, -1) for owner in before]
                was = [i if i in base else -1 for i in was]
                gone = zip(shards, before, strict=True)
                lost.update(shard for shard, owner in gone if owner not in known)
            self.was[queue] = was
            self.held[queue] = Counter(i for i in was if i >= 0)
            self.orphaned[queue] = lost
        self._bounds()
        #: Per member: the queues where it has an extra, in the order they were given.
        self.chosen: list[dict[str, None]] = [{} for _ in live]
        #: Per queue: the members with an extra there.
        self.takers: dict[str, dict[int, None]] = {q: {} for q in self.queues}

    def _bounds(self) -> None:
        """Each member's least and most extras: its fractional parts summed, rounded."""
        totals = self.totals
        common = math.lcm(*totals.values()) if totals else 1
        self.low: list[int] = []
        self.high: list[int] = []
        self.expected: list[float] = []
        for parts in self.fractions:
            numerator = sum(part * (common // totals[q]) for q, part in parts.items())
            self.low.append(numerator // common)
            self.high.append(-(-numerator // common))
            self.expected.append(numerator / common)

    def round_up(self) -> None:
        """Choose the extras: first where they are already held, then the rest,
        each within the members' bounds where it can; then repair the bounds."""
        self.taken = [0] * len(self.live)
        holding: dict[str, list[int]] = {}
        #: Per member: in how many queues still to come it holds an extra's worth.
        self.later = [0] * len(self.live)
        for queue in self.queues:
            held, base = self.held[queue], self.base[queue]
            holding[queue] = [i for i in self.eligible[queue] if held.get(i, 0) > base[i]]
            for i in holding[queue]:
                self.later[i] += 1
        for queue in self.queues:
            for i in holding[queue]:
                self.later[i] -= 1
            self._choose(queue, holding[queue], self.extras[queue], past_high=False)
        for queue in self.queues:
            while len(self.takers[queue]) < self.extras[queue] and self._keep(queue, holding):
                pass
        for queue in self.queues:
            takers = self.takers[queue]
            rest = [i for i in self.eligible[queue] if i not in takers]
            self._choose(queue, rest, self.extras[queue] - len(takers), past_high=True)
        for i in range(len(self.live)):
            while self.taken[i] < self.low[i] and self._give(i):
                pass
        for i in range(len(self.live)):
            while self.taken[i] > self.high[i] and self._take(i):
                pass

    def _choose(self, queue: str, candidates: list[int], count: int, past_high: bool) -> None:
        """Give ``count`` extras of ``queue`` to candidates: those short of their
        least extras first, then those with room, then (``past_high``) the others;
        within each, those holding fewer extras' worth in queues still to come
        (so they keep those too), then the fewest extras for their fractional share,
        then the oldest (extras already held) or the youngest (the others)."""
        taken, low, high, expected = self.taken, self.low, self.high, self.expected
        later = self.later
        age = self.youth if past_high else self.seniority
        ranked = sorted(
            (
                0 if taken[i] < low[i] else 1 if taken[i] < high[i] else 2,
                later[i],
                (taken[i] + 1) / expected[i],
                age[i],
                i,
            )
            for i in candidates
        )
        for tier, _, _, _, i in ranked[:count]:
            if tier == 2 and not past_high:
                break
            taken[i] += 1
            self.chosen[i][queue] = None
            self.takers[queue][i] = None

    def _keep(self, start: str, holding: dict[str, list[int]]) -> bool:
        """One more extra of ``start`` kept where it is held, along an alternating
        path of such extras ending at a member below its most; False if none."""
        via_member: dict[int, str] = {}
        via_queue: dict[str, int] = {start: -1}
        frontier = [start]
        while frontier:
            following: list[str] = []
            for queue in frontier:
                for i in holding[queue]:
                    if i in via_member or queue in self.chosen[i]:
                        continue
                    via_member[i] = queue
                    if self.taken[i] < self.high[i]:
                        self.taken[i] += 1
                        while True:  # i gains `queue`; the member it came from gives it up
                            queue = via_member[i]
                            self.chosen[i][queue] = None
                            self.takers[queue][i] = None
                            if queue == start:
                                return True
                            i = via_queue[queue]
                            del self.chosen[i][queue]
                            del self.takers[queue][i]
                    for other in self.chosen[i]:
                        if other not in via_queue:
                            via_queue[other] = i
                            following.append(other)
            frontier = following
        return False

    def _give(self, short: int) -> bool:
        """One more extra for ``short``, along an alternating path ending at a
        member that can spare one; False if there is none."""
        via_queue: dict[str, int] = {}
        via_member: dict[int, str] = {short: ""}
        frontier = [short]
        while frontier:
            following: list[int] = []
            for i in frontier:
                for queue in self.fractions[i]:
                    if queue in self.chosen[i] or queue in via_queue:
                        continue
                    via_queue[queue] = i
                    for j in self.takers[queue]:
                        if j in via_member:
                            continue
                        via_member[j] = queue
                        if self.taken[j] > self.low[j]:
                            self._flip(j, short, via_queue, via_member, giving=True)
                            return True
                        following.append(j)
            frontier = following
        return False

    def _take(self, over: int) -> bool:
        """One extra less for ``over``, along an alternating path ending at a
        member that has room for one; False if there is none."""
        via_queue: dict[str, int] = {}
        via_member: dict[int, str] = {over: ""}
        frontier = [over]
        while frontier:
            following: list[int] = []
            for i in frontier:
                for queue in self.chosen[i]:
                    if queue in via_queue:
                        continue
                    via_queue[queue] = i
                    takers = self.takers[queue]
                    for j in self.eligible[queue]:
                        if j in takers or j in via_member:
                            continue
                        via_member[j] = queue
                        if self.taken[j] < self.high[j]:
                            self._flip(j, over, via_queue, via_member, giving=False)
                            return True
                        following.append(j)
            frontier = following
        return False

    def _flip(
        self,
        end: int,
        start: int,
        via_queue: dict[str, int],
        via_member: dict[int, str],
        giving: bool,
    ) -> None:
        """Swap the extras along the path from ``start`` to ``end``."""
        self.taken[end] += -1 if giving else 1
        self.taken[start] += 1 if giving else -1
        j = end
        while j != start:
            queue = via_member[j]
            i = via_queue[queue]
            # Giving: j gives up its extra of `queue` to i; taking: i gives it to j.
            loser, winner = (j, i) if giving else (i, j)
            del self.chosen[loser][queue]
            del self.takers[queue][loser]
            self.chosen[winner][queue] = None
            self.takers[queue][winner] = None
            j = i

    def place(self) -> dict[ShardKey, str]:
        """Keep previous owners up to their counts; deal orphans to the youngest first and
        the rest round-robin, youngest first; then exchange orphans left on older members."""
        owner_of: dict[ShardKey, int] = {}
        kept: set[ShardKey] = set()
        orphans: list[ShardKey] = []
        for queue in self.queues:
            takers, lost = self.takers[queue], self.orphaned[queue]
            room = {i: b + (i in takers) for i, b in self.base[queue].items()}
            left: list[int] = []
            orphaned: list[int] = []
            pairs = list(zip(self.shards[queue], self.was[queue], strict=True))
            # A member over its count keeps the shards it serves before those still waiting.
            for shard, i in sorted(pairs, key=lambda pair: pair[0] in lost) if lost else pairs:
                if i >= 0 and room[i] > 0:
                    room[i] -= 1
                    owner_of[(queue, shard)] = i
                    kept.add((queue, shard))
                else:
                    (orphaned if shard in lost else left).append(shard)
            orphans += [(queue, shard) for shard in lost]
            short = sorted((i for i, r in room.items() if r > 0), key=self.youth.__getitem__)
            for i in short:
                given, orphaned = orphaned[: room[i]], orphaned[room[i] :]
                for shard in given:
                    owner_of[(queue, shard)] = i
                room[i] -= len(given)
            short = [i for i in short if room[i]]
            self._deal(queue, [*orphaned, *left], short, room, owner_of)
        shelter(owner_of, orphans, kept, [m.joined for m in self.live], self._count_bounds)
        ids = [m.id for m in self.live]
        return {key: ids[i] for key, i in owner_of.items()}

    @staticmethod
    def _deal(
        queue: str,
        left: list[int],
        short: list[int],
        room: dict[int, int],
        owner_of: dict[ShardKey, int],
    ) -> None:
        """Deal ``left`` round-robin to the ``short`` members, each up to its room (the
        rooms add up to the shards left)."""
        position = 0
        while position < len(left) and short:
            still: list[int] = []
            for i in short:
                owner_of[(queue, left[position])] = i
                position += 1
                room[i] -= 1
                if room[i]:
                    still.append(i)
            short = still

    def _count_bounds(self, i: int, queue: str) -> tuple[int, int] | None:
        """The least and most shards of ``queue`` member ``i`` may own (``None``: it does
        not serve it)."""
        base = self.base[queue].get(i) if queue in self.base else None
        return None if base is None else (base, base + (queue in self.fractions[i]))


def _ranks(live: Sequence[Member], key: Callable[[Member], tuple[int, str]]) -> list[int]:
    """Each member's position (by number) when ordered by ``key``."""
    ranks = [0] * len(live)
    for rank, i in enumerate(sorted(range(len(live)), key=lambda i: key(live[i]))):
        ranks[i] = rank
    return ranks


def _check(members: Sequence[Member]) -> None:
    seen: set[str] = set()
    for member in members:
        if member.weight < 0:
            raise ValueError(f"member {member.id!r} has a negative weight {member.weight}")
        if member.id in seen:
            raise ValueError(f"member id {member.id!r} is listed twice")
        seen.add(member.id)
