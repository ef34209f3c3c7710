"""The History and Charts pages (stored history over 1 h / 8 h / 72 h) and the live chart's
start from it."""

from __future__ import annotations

import html as html_module
import json
import re
import time

import pytest
from web_support import (
    LONG_AGO,
    MailWorker,
    OrderWorker,
    enqueue,
    fail_all,
    process,
    record_history,
)

import lowkiq
from lowkiq.storage.queue import PoppedJob
from lowkiq.telemetry.recent import SecondCounts
from lowkiq.telemetry.recorder import Recorder
from lowkiq_web import chart, history_charts
from lowkiq_web.rates import Interval
from tests.moved_clock import Clock


def cell(html: str, worker: str, count: str) -> str:
    row = re.search(rf'<tr data-worker="{worker}">(.*?)</tr>', html, re.S).group(1)
    return re.search(rf'data-count="{count}">.*?title="([^"]*)"', row, re.S).group(1)


def chart_data(html: str, chart_id: str) -> dict:
    """The JSON a page gives its chart script."""
    found = re.search(rf"<div id=\"{chart_id}-data\" hidden data-series='([^']*)'>", html)
    return json.loads(html_module.unescape(found.group(1)))


def test_the_metrics_index_sums_each_worker_over_the_window(client):
    now = time.time()
    record_history(OrderWorker, now - 30, batches=40, jobs=10)
    record_history(OrderWorker, now - 600, batches=5, jobs=10, failed=True)
    record_history(OrderWorker, now - 3 * 3600, batches=7, jobs=10)  # only in 8 h and 72 h
    record_history(MailWorker, now - 120, batches=3)
    html = client.get("/history").get_data(as_text=True)
    assert cell(html, "OrderWorker", "processed") == "400"
    assert cell(html, "OrderWorker", "failed") == "50"
    assert cell(html, "MailWorker", "processed") == "3"
    assert 'aria-current="page">1h<' in html.replace("\n", "")
    data = chart_data(html, "history-chart")
    assert data["unit"] == "jobs/min" and len(data["x"]) == 61  # 60 minutes and the end
    assert max(data["processed"]) == 400 and sum(data["processed"][:-1]) == 403
    assert sum(data["failed"][:-1]) == 50
    table = re.search(r"<noscript>(.*?)</noscript>", html, re.S).group(1)
    assert table.count("<tr>") == 61  # the header and a row per minute
    eight = client.get("/history?window=8h").get_data(as_text=True)
    assert cell(eight, "OrderWorker", "processed") == "470"
    assert "/OrderWorker/history?window=8h" in eight


def test_a_worker_page_shows_quantiles_histograms_and_throughput(client):
    now = time.time()
    record_history(OrderWorker, now - 60, batches=90, jobs=2, seconds=0.004, wait=0.02)
    record_history(OrderWorker, now - 60, batches=10, jobs=2, seconds=2.0, wait=40.0, failed=True)
    response = client.get("/OrderWorker/history")
    assert response.status_code == 200
    html = response.get_data(as_text=True)
    assert re.search(r'id="history-processed">\s*<span class="num" title="180"', html)
    assert re.search(r'id="history-failed">\s*<span class="num" title="20"', html)
    assert re.search(r'id="history-performs">\s*<span class="num" title="100"', html)
    duration = re.search(r'<tr data-metric="duration">(.*?)</tr>', html, re.S).group(1)
    cells = re.findall(r'<td class="num">([^<]*)</td>', duration)
    # p50 in (2.5 ms, 5 ms]; p95 and p99 in (1 s, 2.5 s]
    assert cells[0].endswith(" ms") and 2.5 < float(cells[0].split()[0]) <= 5
    assert cells[1].endswith(" s") and 1 < float(cells[1].split()[0]) <= 2.5
    wait = re.search(r'<tr data-metric="wait">(.*?)</tr>', html, re.S).group(1)
    assert re.findall(r'<td class="num">([^<]*)</td>', wait)[-1] == "200"
    histogram = re.search(r'aria-label="Perform time">(.*?)</section>', html, re.S).group(1)
    labels = re.findall(r'<th scope="row">([^<]*)</th>', histogram)
    assert labels[0] == "≤ 5 ms" and labels[-1] == "≤ 2.5 s"
    assert '<rect width="100.00"' in histogram
    assert re.search(r'aria-current="page" title="This worker[^"]*">Charts</a>', html)


def test_the_history_pages_show_discarded_jobs_beside_processed_and_failed(client):
    now = time.time()
    record_history(OrderWorker, now - 30, batches=6, jobs=10)
    record_history(OrderWorker, now - 30, batches=1, jobs=10, failed=True)
    record_history(OrderWorker, now - 90, batches=2, jobs=10, discarded=True)
    html = client.get("/history").get_data(as_text=True)
    counts = [cell(html, "OrderWorker", kind) for kind in ("processed", "failed", "discarded")]
    assert counts == ["60", "10", "20"]
    assert re.search(r'<th title="Jobs dropped without a retry[^"]*">Discarded</th>', html)
    data = chart_data(html, "history-chart")
    assert sum(data["processed"][:-1]) == 60 and sum(data["discarded"][:-1]) == 20
    assert len(data["discarded"]) == len(data["x"])
    table = re.search(r"<noscript>(.*?)</noscript>", html, re.S).group(1)
    assert '<th class="num">Discarded, jobs/min</th>' in table
    worker = client.get("/OrderWorker/history").get_data(as_text=True)
    assert re.search(r'id="history-discarded">\s*<span class="num" title="20"', worker)
    assert re.search(r'id="history-processed">\s*<span class="num" title="60"', worker)
    assert "Processed / failed / discarded, jobs per minute" in worker
    # The live chart shows processed and failed only.
    assert "discarded" not in chart_data(client.get("/").get_data(as_text=True), "live-chart")


def test_an_idle_worker_page_says_nothing_was_performed(client):
    html = client.get("/MailWorker/history?window=72h").get_data(as_text=True)
    assert "Nothing performed in this window." in html
    assert re.search(r'<tr data-metric="duration">.*?<td class="num">–</td>', html, re.S)


@pytest.mark.parametrize(
    ("url", "status", "message"),
    [
        ("/history?window=2h", 400, "window must be one of 1h, 8h, 72h, got &#39;2h&#39;"),
        ("/OrderWorker/history?window=", 200, ""),
        ("/OrderWorker/history?window=forever", 400, "window must be one of"),
        ("/NoSuchWorker/history", 404, "no worker named"),
    ],
)
def test_bad_window_is_a_400_and_unknown_worker_a_404(client, url, status, message):
    response = client.get(url)
    assert response.status_code == status
    assert message in response.get_data(as_text=True)


def test_every_page_links_to_the_history_and_a_worker_page_to_its_charts(client):
    """The two history links have names of their own (they were both "Metrics", the
    name of the Prometheus endpoint too), and the History page links that endpoint."""
    html = client.get("/").get_data(as_text=True)
    nav = re.search(r'<nav class="pages".*?</nav>', html, re.S).group(0)
    assert re.findall(r">([^<>]+)</a>", nav) == [
        "Dashboard",
        "Processes",
        "Schedules",
        "Workflows",
        "History",
    ]
    assert re.search(r'href="/history" title="Every worker[^"]*">History</a>', nav)
    dead = client.get("/OrderWorker/dead").get_data(as_text=True)
    assert re.search(r'href="/OrderWorker/history" *title="This worker[^"]*">Charts</a>', dead)
    assert ">Metrics<" not in html + dead
    index = client.get("/history").get_data(as_text=True)
    assert "<h1>History · last 1h</h1>" in index
    assert '<a class="prometheus" href="/metrics"><code>/metrics</code></a>' in index
    assert client.get("/metrics").status_code == 200


def samples_of(html: str) -> list[tuple[float, int, int]]:
    """The live part's hidden field: its samples' time, processed and failed."""
    field = re.search(r'name="history" value="([^"]*)"', html).group(1)
    return [(float(t), int(p), int(f)) for t, p, f in (s.split(":") for s in field.split(","))]


def test_a_fresh_dashboard_chart_starts_from_the_stored_history(client):
    now = time.time()
    minute = int(now // 60)
    # 120 jobs processed in a second three minutes ago, 60 failed in a second two minutes ago.
    enqueue(OrderWorker, 120, perform_in=LONG_AGO)
    process(OrderWorker, 120)
    record_history(OrderWorker, (minute - 3) * 60 + 10.5, batches=120)
    enqueue(MailWorker, 60, perform_in=LONG_AGO)
    fail_all(MailWorker)
    record_history(MailWorker, (minute - 2) * 60 + 10.5, batches=60, failed=True)
    html = client.get("/live").get_data(as_text=True)
    samples = samples_of(html)
    # A sample where the first stored minute began, where each busy second began and
    # ended, and now: the totals of now minus what was stored after each.
    first = (minute - 3) * 60.0
    assert [s[0] for s in samples[:-1]] == [first, first + 10, first + 11, first + 70, first + 71]
    assert [s[1:] for s in samples] == [(0, 0), (0, 0), (120, 0), (120, 0), (120, 60), (120, 60)]
    data = chart_data(html, "live-chart")
    assert data["x"] == [s[0] for s in samples] and data["unit"] == "jobs/s"
    assert data["processed"][:5] == [0.0, 120.0, 0.0, 0.0, 0.0]
    assert data["failed"][:5] == [0.0, 0.0, 0.0, 60.0, 0.0]


def test_a_fresh_dashboard_chart_shows_a_burst_at_its_rate_per_second(client):
    """2,200 jobs in two seconds read as 1,100 jobs/s, not as the minute's average."""
    now = time.time()
    start = int(now) - 40
    enqueue(OrderWorker, 2200, perform_in=LONG_AGO)
    process(OrderWorker, 2200)
    clock = Clock(start)
    recorder = Recorder(lowkiq.settings.client(), [OrderWorker.queue_name], clock=clock)
    tally = recorder.for_queue(OrderWorker.queue_name)
    for batch in range(220):  # batches of 10, from half a second in to 2.5 s
        clock.now = start + 0.5 + batch / 110
        ten = [PoppedJob(f"b{batch}-{n}", -1, ["p"], start) for n in range(10)]
        tally.performed(ten, clock.now - 0.001)
    recorder.flush()
    assert OrderWorker.metrics()["processed"] == 2200
    html = client.get("/").get_data(as_text=True)
    data = chart_data(html, "live-chart")
    assert data["unit"] == "jobs/s"
    assert max(data["processed"]) == 1100  # a minute's average would read 2,200 / 60 = 37
    rates = dict(zip(data["x"], data["processed"], strict=True))
    assert rates[start] == 550 and rates[start + 1] == 1100 and rates[start + 2] == 550
    spans = zip(data["x"], data["x"][1:], data["processed"], strict=False)
    assert sum(rate * (end - at) for at, end, rate in spans) == pytest.approx(2200)  # all, once
    assert "jobs per second" in html


def test_chart_seeds_nothing_without_stored_minutes_and_fills_from_the_right():
    now = chart.Sample(1000.0, 50, 2)
    assert chart.seed_samples(now, {}) == [now]
    drawn = chart.build_chart([chart.Sample(990.0, 40, 2), now], min_window=100.0)
    assert (drawn.start, drawn.end) == (900.0, 1000.0)
    assert drawn.intervals == (Interval(990.0, 1000.0, 1.0, 0.0),)
    # One stored minute: a sample where it began, and one where the next began.
    seeded = chart.seed_samples(chart.Sample(130.0, 50, 2), {1: lowkiq.Counts.from_hash({"j": 8})})
    assert seeded == [
        chart.Sample(60.0, 42, 2),
        chart.Sample(120.0, 50, 2),
        chart.Sample(130.0, 50, 2),
    ]


def test_chart_seed_is_per_second_where_kept_else_per_minute_and_the_last_seconds_one_step():
    minutes = {
        10: lowkiq.Counts.from_hash({"j": 60}),  # before the per-second counts were kept
        11: lowkiq.Counts.from_hash({"j": 30, "fj": 3}),
        12: lowkiq.Counts.from_hash({"j": 9}),
    }
    seconds = {
        11: {665: SecondCounts(20, 0), 666: SecondCounts(7, 3)},
        12: {720: SecondCounts(4, 0), 742: SecondCounts(2, 0), 744: SecondCounts(3, 0)},
    }
    steps = chart.stored_steps(745.5, minutes, seconds)
    assert [(s.start, s.end, s.processed, s.failed) for s in steps] == [
        (600, 660, 60, 0),  # minute 10, as one step
        (660, 665, 0, 0),
        (665, 666, 20, 0),
        (666, 667, 7, 3),
        (667, 720, 0, 0),
        (720, 721, 4, 0),
        (721, 740, 0, 0),
        (740, 745.5, 5, 0),  # the last seconds, which a process may not have written yet
    ]
    seeded = chart.seed_samples(chart.Sample(745.5, 1000, 10), minutes, seconds)
    assert seeded[0] == chart.Sample(600, 1000 - 96, 10 - 3) and len(seeded) == len(steps) + 1


def test_chart_seed_joins_the_steps_that_differ_least_and_keeps_a_burst():
    steady = [chart.Step(t, t + 1, 10 + t % 3, 0) for t in range(600)]  # 10-12 jobs/s
    steady[300] = chart.Step(300, 301, 1100, 5)
    joined = chart.simplified(steady, 40)
    assert len(joined) <= 40
    assert chart.Step(300, 301, 1100, 5) in joined  # the burst is still a step of its own
    assert sum(s.processed for s in joined) == sum(s.processed for s in steady)
    assert [s.start for s in joined] == sorted(s.start for s in joined)
    assert all(a.end == b.start for a, b in zip(joined, joined[1:], strict=False))
    # Idle neighbours (and any of the same rate) are joined whatever the limit.
    idle = [chart.Step(t, t + 1, 0, 0) for t in range(5)] + [chart.Step(5, 6, 3, 0)]
    assert chart.simplified(idle, 40) == [chart.Step(0, 5, 0, 0), chart.Step(5, 6, 3, 0)]


def test_histogram_bars_span_the_used_buckets_and_labels_name_their_bound():
    assert history_charts.bucket_label(0) == "≤ 1 ms"
    assert history_charts.bucket_label(13) == "≤ 30 s"
    assert history_charts.bucket_label(16) == "≤ 5 min"
    assert history_charts.bucket_label(19) == "> 30 min"
    bars = history_charts.histogram([0, 0, 4, 0, 1] + [0] * 15)
    assert [(b.label, b.count, b.length) for b in bars] == [
        ("≤ 5 ms", 4, 100.0),
        ("≤ 10 ms", 0, 0.0),
        ("≤ 25 ms", 1, 25.0),
    ]
    assert history_charts.histogram([0] * 20) == []
