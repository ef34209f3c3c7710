"""Shards named for people in one short line: ``OrderWorker:0-63 MailWorker:0,2,5-7``."""

from __future__ import annotations

from collections.abc import Iterable


def numbers_as_ranges(numbers: Iterable[int]) -> str:
    """``0-3,5,7-9``: the numbers sorted, each run of consecutive ones as ``first-last``."""
    ordered = sorted(set(numbers))
    runs: list[list[int]] = []
    for number in ordered:
        if runs and number == runs[-1][1] + 1:
            runs[-1][1] = number
        else:
            runs.append([number, number])
    return ",".join(str(first) if first == last else f"{first}-{last}" for first, last in runs)


def shard_ranges(shards: Iterable[tuple[str, int]]) -> str:
    """``(worker name, shard)`` pairs as ``Worker:ranges`` per worker, workers in the order
    they first appear: ``OrderWorker:0-63 MailWorker:0,2``."""
    by_worker: dict[str, list[int]] = {}
    for worker, shard in shards:
        by_worker.setdefault(worker, []).append(shard)
    return " ".join(f"{worker}:{numbers_as_ranges(found)}" for worker, found in by_worker.items())
