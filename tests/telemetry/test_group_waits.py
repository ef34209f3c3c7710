"""Prometheus ``lowkiq_group_wait_seconds``: each job's wait from due to start by group, for
the groups with the most jobs (``settings.metrics_top_groups``) and ``other``, so its
cardinality stays bounded; jobs popped tell their group; on one server and on a Redis
Cluster."""

from __future__ import annotations

import lowkiq
from lowkiq.storage.queue import PoppedJob
from lowkiq.telemetry import group_waits
from lowkiq.telemetry.counts import PAYLOADS, SIZE, SLOTS, WAIT_BUCKETS, WAIT_US, bucket
from lowkiq.telemetry.group_waits import OTHER, GroupWaits
from lowkiq.telemetry.prometheus import render
from lowkiq.telemetry.recorder import Recorder, WorkerTally
from tests.both_redis import server_or_cluster_client  # noqa: F401  (redis_client)
from tests.leasing import pop

T0 = 1_700_000_000.0


def job(group: str | None, waited: float, n: int = 0) -> PoppedJob:
    return PoppedJob(f"{group}{n}", -1, ["p"], T0 - waited, group=group)


def counted(waits: GroupWaits, everything: bool = True) -> dict[str, list[float]]:
    return group_waits.merge(waits.take(everything))


def tally(limit: int) -> tuple[WorkerTally, GroupWaits]:
    """A processing thread's tally of one worker, and its waits by group."""
    made = WorkerTally(clock=lambda: T0 + 1.0, top_groups=limit)
    assert made.groups is not None
    return made, made.groups


def test_a_tally_counts_waits_by_group_and_jobs_without_one_as_the_empty_group() -> None:
    batches, waits = tally(limit=2)
    batches.performed([job("A", 0.002), job("A", 3.0, 1), job(None, 0.5)], started=T0)
    found = counted(waits)
    assert sorted(found) == ["", "A"]
    assert found["A"][bucket(0.002)] == 1 and found["A"][bucket(3.0)] == 1
    assert abs(found["A"][SLOTS] - 3.002) < 1e-5
    assert found[""][bucket(0.5)] == 1


def test_a_tally_keeps_a_bounded_number_of_groups_apart() -> None:
    batches, waits = tally(limit=1)  # 4 groups apart in an interval
    batches.performed([job(f"g{n}", 1.0) for n in range(10)], started=T0)
    found = counted(waits)
    assert len(found) == 5 and found[OTHER][bucket(1.0)] == 6


def test_the_flush_thread_takes_the_counts_at_the_threads_next_batch() -> None:
    batches, waits = tally(limit=5)
    batches.performed([job("A", 1.0)], started=T0)
    assert waits.take() == []  # asked for: handed over at the next batch
    batches.performed([job("B", 1.0)], started=T0)
    assert list(group_waits.merge(waits.take())) == ["A"]
    assert list(counted(waits)) == ["B"]


def test_redis_keeps_the_groups_with_the_most_jobs_apart_and_adds_the_rest_to_other(
    redis_client,
) -> None:
    def batch(sizes: dict[str, int]) -> dict[str, list[float]]:
        counts = {}
        for group, size in sizes.items():
            row = [0.0] * (SLOTS + 1)
            row[bucket(1.0)] = size
            row[SLOTS] = float(size)
            counts[group] = row
        return counts

    group_waits.add(redis_client, {"Q": batch({"A": 50, "B": 30, "C": 5})}, limit=2)
    (stored,) = group_waits.read(redis_client, ["Q"])
    assert {g: c[bucket(1.0)] for g, c in stored.items()} == {"A": 50, "B": 30, OTHER: 5}
    # D outnumbers the smallest kept (B): B's histogram joins other's.
    group_waits.add(redis_client, {"Q": batch({"D": 40, "E": 1})}, limit=2)
    (stored,) = group_waits.read(redis_client, ["Q"])
    assert {g: c[bucket(1.0)] for g, c in stored.items()} == {"A": 50, "D": 40, OTHER: 36}
    # A lowered limit: the smallest give their places up; nothing is lost.
    group_waits.add(redis_client, {"Q": batch({"A": 1})}, limit=1)
    (stored,) = group_waits.read(redis_client, ["Q"])
    assert {g: c[bucket(1.0)] for g, c in stored.items()} == {"A": 51, OTHER: 76}
    assert sum(c[SLOTS] for c in stored.values()) == 127


def test_popped_jobs_tell_their_group(redis_client) -> None:
    class Mixed(lowkiq.Worker):
        shards_count = 1
        batch_size = 10

    lowkiq.settings.workers = [Mixed]
    Mixed.perform_async([{"id": f"a{n}", "group": "A"} for n in range(3)])
    queue = Mixed.queue()
    alone = pop(queue, 0, 10)  # one group in the shard: not indexed
    assert alone is not None and [j.group for j in alone] == ["A", "A", "A"]
    queue.ack(0, queue.client.get(queue.keys.lease(0)).decode(), 1)
    Mixed.perform_async([{"id": f"a{n}", "group": "A"} for n in range(3)])
    Mixed.perform_async([{"id": f"b{n}", "group": "B"} for n in range(2)])
    Mixed.perform_async([{"id": f"x{n}"} for n in range(2)])
    mixed = pop(queue, 0, 10)
    assert mixed is not None and len(mixed) == 7
    assert {j.id: j.group for j in mixed} == {
        **{f"a{n}": "A" for n in range(3)},
        **{f"b{n}": "B" for n in range(2)},
        **{f"x{n}": "" for n in range(2)},
    }


def test_jobs_of_a_shard_without_groups_tell_none(redis_client) -> None:
    class Plain(lowkiq.Worker):
        shards_count = 1
        batch_size = 10

    lowkiq.settings.workers = [Plain]
    Plain.perform_async([{"id": n} for n in range(3)])
    popped = pop(Plain.queue(), 0, 10)
    assert popped is not None and [j.group for j in popped] == [None, None, None]


def test_prometheus_serves_the_histogram_of_each_top_group_and_other(redis_client) -> None:
    class Tenants(lowkiq.Worker):
        shards_count = 2

    lowkiq.settings.workers = [Tenants]
    lowkiq.settings.metrics_top_groups = 1
    recorder = Recorder(redis_client, [Tenants.queue_name])
    tally = recorder.for_queue(Tenants.queue_name)
    tally.performed([job("big", 0.2, n) for n in range(5)] + [job("small", 7.0)], T0)
    recorder.stop()  # the last flush takes the thread's counts
    text = render()[0].decode()
    lines = [line for line in text.splitlines() if line.startswith("lowkiq_group_wait_seconds")]
    assert 'lowkiq_group_wait_seconds_count{group="big",worker="Tenants"} 5.0' in lines
    assert 'lowkiq_group_wait_seconds_count{group="other",worker="Tenants"} 1.0' in lines
    assert 'lowkiq_group_wait_seconds_sum{group="other",worker="Tenants"} 7.0' in lines
    assert 'lowkiq_group_wait_seconds_bucket{group="big",le="0.25",worker="Tenants"} 5.0' in lines
    assert not any('group="small"' in line for line in lines)


def test_jobs_counted_one_batch_each_count_as_in_one_batch() -> None:
    """A batch of one job is counted by lines of its own: the waits, payloads and waits by
    group come out as when the same jobs are counted in one batch (a wait below 0, from
    another host's clock, as 0)."""
    jobs = [job("A", 0.002), job(None, 0.5, 1), job("", 3.0, 2), job("A", -1.0, 3)]
    alone, alone_waits = tally(limit=5)
    for one in jobs:
        alone.performed([one], started=T0)
    together, together_waits = tally(limit=5)
    together.performed(jobs, started=T0)
    assert counted(alone_waits) == counted(together_waits)
    (minute,) = alone.minutes.unwritten().values()
    (same,) = together.minutes.unwritten().values()
    waits = slice(WAIT_BUCKETS, SIZE)
    assert minute[waits] == same[waits] and minute[waits] != [0] * SLOTS
    assert minute[WAIT_US] == same[WAIT_US] and minute[PAYLOADS] == same[PAYLOADS] == 4
