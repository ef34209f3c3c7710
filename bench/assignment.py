"""The assignment function alone: time per call and shards moved per membership change.

For P processes (weight 1 each) and S shards, in 1 queue or in 10 queues of
S / 10, it times :func:`lowkiq.ownership.assignment.assign` from scratch and
from a previous assignment (a process joining), and counts the shards that
change owner when one process joins, one leaves, one is replaced (a leave and
a join seen at once), and over a full rolling deploy (each process replaced
once, recomputed from the previous assignment at every step), the new one
joining first or the old one leaving first.  Targets (issue 19): ≤ 100 ms per
call at P = 1,000, S = 10,000; a join or leave ≤ 1.5 × S/P moves, a rolling
deploy ≤ 2.5 × S.
Usage: python bench/assignment.py [--sizes 10x100,100x1000,1000x10000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence

from _machine import machine

from lowkiq.ownership.assignment import Member, ShardKey, assign


def moved(before: Mapping[ShardKey, str], after: Mapping[ShardKey, str]) -> int:
    """Shards whose owner changed (a shard that lost its owner counts too)."""
    return sum(1 for key, owner in before.items() if after.get(key) != owner)


def timed(call: Callable[[], object], repeat: int) -> tuple[float, float]:
    """Median milliseconds of ``repeat`` calls of ``call()``: wall clock and CPU of this process
    (on a busy host the CPU figure is the cost; the wall clock includes waiting for a core)."""
    walls, cpus = [], []
    for _ in range(repeat):
        wall, cpu = time.perf_counter(), time.process_time()
        call()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return statistics.median(walls) * 1000, statistics.median(cpus) * 1000


def rolling(
    members: list[Member], shards: Mapping[str, Sequence[int]], join_first: bool
) -> tuple[int, int]:
    """Total moves and the most at one step over a rolling deploy of every member."""
    fleet = list(members)
    owners = assign(fleet, shards)
    total = worst = 0
    for old in members:
        new = Member(f"new-{old.id}", old.weight, old.queues)
        steps = ["join", "leave"] if join_first else ["leave", "join"]
        for step in steps:
            if step == "join":
                fleet.append(new)
            else:
                fleet.remove(old)
            after = assign(fleet, shards, owners)
            count = moved(owners, after)
            total += count
            worst = max(worst, count)
            owners = after
    return total, worst


def one(processes: int, shards_total: int, queues: int, repeat: int) -> None:
    names = [f"Queue{q}" for q in range(queues)]
    shards = {name: range(shards_total // queues) for name in names}
    members = [Member(f"p{i:05d}", 1, frozenset(names)) for i in range(processes)]
    newcomer = Member("p99999", 1, frozenset(names))
    base = assign(members, shards)
    scratch = timed(lambda: assign(members, shards), repeat)
    joined_ms = timed(lambda: assign([*members, newcomer], shards, base), repeat)
    joined = assign([*members, newcomer], shards, base)
    left = assign(members[1:], shards, base)
    replaced = assign([*members[1:], newcomer], shards, base)
    counts = Counter(joined.values())
    loads = sorted(counts[m.id] for m in [*members, newcomer])
    join_first, join_worst = rolling(members, shards, join_first=True)
    leave_first, leave_worst = rolling(members, shards, join_first=False)
    ideal = shards_total / processes
    print(
        f"P={processes:>5} S={shards_total:>6} queues={queues:>2}  per call (wall / CPU): "
        f"from scratch {scratch[0]:.1f} / {scratch[1]:.1f} ms, "
        f"from previous {joined_ms[0]:.1f} / {joined_ms[1]:.1f} ms; "
        f"loads after a join {loads[0]}..{loads[-1]}"
    )
    print(
        f"    moves: join {moved(base, joined)}, leave {moved(base, left)}, "
        f"replace {moved(base, replaced)} (S/P = {ideal:g}, 1.5 x S/P = {1.5 * ideal:g}); "
        f"rolling deploy new-first {join_first} ({join_first / shards_total:.2f} x S, "
        f"worst step {join_worst}), old-first {leave_first} "
        f"({leave_first / shards_total:.2f} x S, worst step {leave_worst})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10x100,100x1000,1000x10000", help="PxS,...")
    parser.add_argument("--repeat", type=int, default=5, help="calls timed per figure")
    args = parser.parse_args()
    print(machine())
    for size in args.sizes.split(","):
        processes, shards_total = (int(part) for part in size.split("x"))
        for queues in (1, 10):
            one(processes, shards_total, queues, args.repeat)


if __name__ == "__main__":
    main()
