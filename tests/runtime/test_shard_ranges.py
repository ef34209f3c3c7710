"""Shards named for people: runs of consecutive shards as ranges (no Redis)."""

from __future__ import annotations

from lowkiq.runtime.shard_ranges import numbers_as_ranges, shard_ranges


def test_consecutive_numbers_are_ranges_and_the_others_stand_alone() -> None:
    assert numbers_as_ranges(range(64)) == "0-63"
    assert numbers_as_ranges([9, 0, 1, 2, 3, 5, 7, 8, 3]) == "0-3,5,7-9"
    assert numbers_as_ranges([4]) == "4"
    assert numbers_as_ranges([]) == ""


def test_each_worker_keeps_its_place_and_its_ranges() -> None:
    shards = [("OrderWorker", n) for n in range(64)] + [("MailWorker", 2), ("MailWorker", 0)]
    assert shard_ranges(shards) == "OrderWorker:0-63 MailWorker:0,2"
    assert shard_ranges([]) == ""
