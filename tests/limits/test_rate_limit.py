"""``lowkiq.RateLimit``: the model, its text form, and the limit set at run time."""

from __future__ import annotations

import pytest

import lowkiq
from lowkiq.errors import ConfigurationError
from lowkiq.limits.rate_limit import RateLimit


def test_a_limit_is_jobs_per_period_with_an_optional_burst():
    limit = lowkiq.RateLimit(100, per=2.0, burst=10)
    assert limit.per_second == 50
    assert limit.capacity(batch_size=1) == 10
    assert limit.describe() == "100/2s (burst 10)"


def test_the_default_burst_is_a_twentieth_of_a_second_and_at_least_a_batch():
    assert RateLimit(500).capacity(batch_size=1) == 25
    assert RateLimit(500).capacity(batch_size=100) == 100
    assert RateLimit(1, per=60).capacity(batch_size=1) == 1


@pytest.mark.parametrize(
    "args",
    [
        *[(0,), (-1,), ("100",), (True,), (float("inf"),), (100, 0), (100, 1.0, 0)],
        *[(100, 1.0, 2.5), (100, 1.0, None, "yes")],
    ],
)
def test_bad_values_are_refused(args):
    with pytest.raises(ConfigurationError):
        RateLimit(*args)


@pytest.mark.parametrize(
    ("text", "limit"),
    [
        ("100/s", RateLimit(100, 1.0)),
        ("100 / 1.5s", RateLimit(100, 1.5)),
        ("6000/min", RateLimit(6000, 60.0)),
        ("10/h", RateLimit(10, 3600.0)),
        ("2.5/s", RateLimit(2.5, 1.0)),
        ("10/s per group", RateLimit(10, 1.0, per_group=True)),
        ("10 / min  PER  Group", RateLimit(10, 60.0, per_group=True)),
    ],
)
def test_a_limit_is_parsed_from_text(text, limit):
    assert RateLimit.parse(text) == limit


@pytest.mark.parametrize(
    "text", ["", "100", "100/", "100/day", "0/s", "x/s", "1.2.3/s", "100/0s", "10/s per"]
)
def test_bad_text_is_refused_with_a_clear_error(text):
    with pytest.raises(ConfigurationError):
        RateLimit.parse(text)


def test_a_limit_is_described_as_it_is_typed():
    for text in ("100/s", "6/min", "10/h", "5/1.5s", "2.5/s", "10/s per group"):
        assert RateLimit.parse(text).describe() == text


def test_a_limit_round_trips_through_its_stored_form():
    for limit in (RateLimit(100), RateLimit(2.5, per=0.5, burst=3), RateLimit(7, per_group=True)):
        assert RateLimit.decode(limit.encode()) == limit
    assert RateLimit.decode("none") is None


def test_a_worker_class_with_a_bad_rate_limit_is_refused():
    with pytest.raises(ConfigurationError, match="Bad.rate_limit"):

        class Bad(lowkiq.Worker):
            rate_limit = 100  # type: ignore[assignment]


def test_a_limit_set_at_run_time_overrides_the_class_until_cleared(redis_client):
    class PartnerWorker(lowkiq.Worker):
        rate_limit = RateLimit(100)

    assert PartnerWorker.current_rate_limit() == RateLimit(100)
    PartnerWorker.set_rate_limit(RateLimit(5, burst=2))
    assert PartnerWorker.current_rate_limit() == RateLimit(5, burst=2)
    PartnerWorker.set_rate_limit(None)
    assert PartnerWorker.current_rate_limit() is None
    assert PartnerWorker.clear_rate_limit()
    assert PartnerWorker.current_rate_limit() == RateLimit(100)
    assert not PartnerWorker.clear_rate_limit()
    with pytest.raises(ConfigurationError):
        PartnerWorker.set_rate_limit("100/s")  # type: ignore[arg-type]
