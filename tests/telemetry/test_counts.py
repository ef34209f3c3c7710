"""Histogram buckets and quantiles of the metrics history (pure, no Redis)."""

from __future__ import annotations

import pytest

from lowkiq.telemetry.counts import BUCKETS, FIELDS, SIZE, SLOTS, Counts, bucket, quantile


def test_buckets_run_from_one_millisecond_to_thirty_minutes_plus_an_overflow():
    assert BUCKETS[0] == 0.001 and BUCKETS[-1] == 1800.0
    assert list(BUCKETS) == sorted(set(BUCKETS))
    assert len(BUCKETS) + 1 == SLOTS and len(FIELDS) == SIZE == len(set(FIELDS))


@pytest.mark.parametrize(
    ("seconds", "slot"),
    [(0.0, 0), (0.001, 0), (0.0011, 1), (0.7, 9), (1.0, 9), (1800.0, 18), (1800.5, 19), (1e9, 19)],
)
def test_a_duration_goes_to_the_first_bound_it_does_not_exceed(seconds, slot):
    assert bucket(seconds) == slot


def test_quantiles_interpolate_inside_the_bucket_like_prometheus():
    buckets = [0] * SLOTS
    buckets[bucket(0.2)] = 100  # 100 performs in (0.1, 0.25]
    assert quantile(buckets, 0.5) == pytest.approx(0.175)
    assert quantile(buckets, 0.99) == pytest.approx(0.1 + 0.15 * 0.99)
    buckets[bucket(4000)] = 100  # as many beyond 30 min: reported as 30 min
    assert quantile(buckets, 0.25) == pytest.approx(0.175)
    assert quantile(buckets, 0.99) == 1800.0
    assert quantile([0] * SLOTS, 0.5) is None


def test_counts_read_from_a_hash_and_sum_field_by_field():
    one = Counts.from_hash({b"n": b"2", b"j": b"5", b"p": b"9", b"t": b"3000", b"d2": b"2"})
    two = Counts.from_hash({"n": 1, "f": 1, "j": 1, "fj": 1, "p": 1, "unknown": 7})
    total = Counts.total([one, two])
    assert (total.performs, total.failures, total.jobs, total.failed_jobs) == (3, 1, 6, 1)
    assert total.processed_jobs == 5 and total.payloads == 10 and total.payloads_merged == 4
    assert one.mean_duration == pytest.approx(0.0015)
    assert one.duration_buckets[2] == 2 and sum(one.wait_buckets) == 0
    assert Counts().mean_duration is None and Counts().mean_wait is None
