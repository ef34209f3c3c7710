"""Formatting for people, the chart's history, and list-parameter parsing (no Redis)."""

from __future__ import annotations

import pytest

from lowkiq_web import chart, formatting, listing, rates


@pytest.mark.parametrize(
    ("value", "text"),
    [(0, "0"), (999, "999"), (1234, "1.2K"), (1000, "1K"), (3_400_000, "3.4M"),
     (250_000, "250K"), (2.5, "2.5"), (7e9, "7B")],
)  # fmt: skip
def test_human_number(value, text):
    assert formatting.human_number(value) == text


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0s"), (0.25, "250ms"), (59, "59s"), (192, "3m 12s"), (3600, "1h"),
     (3725, "1h 2m"), (90061, "1d 1h"), (-30, "-30s")],
)  # fmt: skip
def test_human_duration(seconds, text):
    assert formatting.human_duration(seconds) == text


@pytest.mark.parametrize(
    ("count", "text"),
    [(0, "0 B"), (1023, "1023 B"), (1024, "1.0 KiB"), (35_127_296, "33.5 MiB"),
     (3 * 2**30, "3.0 GiB"), (5 * 2**40, "5120.0 GiB")],
)  # fmt: skip
def test_human_bytes(count, text):
    assert formatting.human_bytes(count) == text


def test_times_and_labels():
    assert formatting.iso_time(0) == "1970-01-01 00:00:00 UTC"
    assert formatting.relative_time(100, now=40) == "in 1m"
    assert formatting.relative_time(40, now=100) == "1m ago"
    assert formatting.retry_label(-1) == "fresh"
    assert formatting.retry_label(3) == "retry 4"
    assert formatting.pretty_payload({"b": 1, "a": [1]}) == '{\n  "a": [\n    1\n  ],\n  "b": 1\n}'
    assert formatting.exact_number(1234567) == "1,234,567"


def test_chart_rates_from_history():
    samples = chart.parse_history("100.000:10:0,102.000:30:4")
    samples.append(chart.Sample(104.0, 30, 4))
    drawn = chart.build_chart(samples)
    assert drawn.intervals == (
        rates.Interval(100.0, 102.0, 10.0, 2.0),
        rates.Interval(102.0, 104.0, 0.0, 0.0),
    )
    assert drawn.peak == 10.0 and drawn.latest.processed == 0.0 and drawn.unit == "s"
    # The chart script's input: each interval's start, then the last one's end, repeated.
    assert drawn.chart_data() == {
        "unit": "jobs/s",
        "start": 100.0,
        "end": 104.0,
        "x": [100.0, 102.0, 104.0],
        "processed": [10.0, 0.0, 0.0],
        "failed": [2.0, 0.0, 0.0],
    }
    assert chart.encode_history(samples).count(",") == 2


def test_chart_keeps_the_last_samples_and_survives_counter_resets():
    text = ",".join(f"{t}:{1000 - t}:0" for t in range(200))
    samples = chart.parse_history(text)
    assert len(samples) == chart.MAX_SAMPLES
    assert chart.build_chart(samples).peak == 0.0
    empty = chart.build_chart([])
    assert empty.intervals == () and empty.chart_data()["x"] == []
    assert empty.latest == rates.Interval(0.0, 0.0, 0.0, 0.0)


@pytest.mark.parametrize(
    ("value", "text"), [(0, "0"), (0.254, "0.25"), (12.54, "12.5"), (1234.4, "1,234")]
)
def test_rate_as_the_chart_shows_it(value, text):
    assert formatting.rate(value) == text
    assert formatting.clock_time(3661) == "01:01:01"


@pytest.mark.parametrize("bad", ["x", "1:2", "a:1:2", "1:b:2", "inf:1:1"])
def test_chart_refuses_foreign_history(bad):
    with pytest.raises(listing.BadParameter):
        chart.parse_history(bad)


def test_list_query_defaults_and_params():
    query = listing.parse_query("enqueued", {})
    assert (query.by, query.direction, query.per) == ("perform_in", "asc", 25)
    assert listing.parse_query("dead", {}).direction == "desc"
    query = listing.parse_query("enqueued", {"by": "id", "from": "a", "per": "100"})
    assert query.params() == {"by": "id", "dir": "asc", "from": "a", "per": 100}
    assert query.params(after="b") == {
        "by": "id",
        "dir": "asc",
        "from": "a",
        "per": 100,
        "after": "b",
    }
    scored = listing.parse_query("dead", {"after": "1.5", "after_id": "7"})
    assert scored.params()["after_id"] == "7"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1795323225.5", 1795323225.5),
        ("2026-11-22T04:53:45Z", 1795323225.0),
        ("2026-11-22 04:53:45", 1795323225.0),  # no offset: UTC
        ("2026-11-22T06:53:45+02:00", 1795323225.0),
        ("2026-11-22", 1795305600.0),
    ],
)
def test_a_time_order_starts_from_a_timestamp_or_a_date_and_time(text, expected):
    for kind, by in (("enqueued", "perform_in"), ("dead", "updated_at")):
        assert float(listing.parse_query(kind, {"by": by, "from": text}).start) == expected


def test_a_bad_time_names_both_accepted_forms():
    with pytest.raises(listing.BadParameter, match="number or a date and time"):
        listing.parse_query("dead", {"by": "updated_at", "from": "yesterday"})
    with pytest.raises(listing.BadParameter, match="from must be a number"):
        listing.parse_query("enqueued", {"by": "retry_count", "from": "2026-11-22"})
