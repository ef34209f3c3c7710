"""The dashboard in a real headless Chromium: live counts, row actions, confirmations.

Any console error, a CSP violation included, fails the test (see the ``page`` fixture).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import time
import urllib.parse

import pytest
from web_support import (
    ARTIFACTS,
    LONG_AGO,
    REPO,
    MailWorker,
    OrderWorker,
    bury,
    enqueue,
    fail_all,
    hold,
    process,
    record_history,
)

import lowkiq

expect = pytest.importorskip("playwright.sync_api").expect


class ReportWorker(lowkiq.Worker):
    """A third queue, for a fuller screenshot."""

    shards_count = 2


def test_dashboard_counts_change_without_reload(page, live_server):
    lowkiq.settings.workers = [OrderWorker, MailWorker, ReportWorker]
    enqueue(OrderWorker, 1200)
    page.goto(live_server + "/")
    enqueued = page.locator("#total-enqueued")
    assert enqueued.inner_text() == "1.2K"
    assert enqueued.locator("span").get_attribute("title") == "1,200"
    page.select_option("select[name=interval]", "2")
    expect(page.locator("#live")).to_have_attribute("hx-trigger", "every 2s")
    marker = page.evaluate("() => (window.lowkiqMarker = 42)")
    enqueue(MailWorker, 7, perform_in=LONG_AGO)
    bury(ReportWorker, 3)
    expect(page.locator("#total-dead")).to_have_text("3", timeout=10_000)
    assert page.locator("#total-enqueued").inner_text() == "1.2K"
    assert page.locator("tr[data-worker=MailWorker] a[data-count=length]").inner_text() == "7"
    assert page.evaluate("() => window.lowkiqMarker") == marker  # no reload happened


def test_dashboard_screenshot(page, live_server):
    """A realistic dashboard kept as docs/dashboard.png and as a test artifact (light and dark)."""
    lowkiq.settings.workers = [OrderWorker, MailWorker, ReportWorker]
    now = time.time()
    enqueue(OrderWorker, 300, prefix="f", perform_in=now - 45)
    fail_all(OrderWorker)  # 300 retries, due in an hour
    enqueue(OrderWorker, 2600, perform_in=now - 45)
    process(OrderWorker, 1400)
    enqueue(MailWorker, 140, perform_in=now + 600)
    bury(ReportWorker, 12, error="TimeoutError: report service did not answer in 30 s")
    enqueue(ReportWorker, 4, prefix="r", perform_in=now - 3)
    hold(ReportWorker, 0)
    totals = page.request.get(live_server + "/api/v1/stats").json()["total"]
    assert totals["morgue_length"] == 12
    # The page's own chart history (client state): 40 samples, 2 s apart, ending now.
    processed, failed = 1400, 312
    samples = []
    for i in range(40):
        samples.append(f"{now - 2 - 2 * i:.3f}:{processed}:{failed}")
        processed -= int(14 + 9 * math.sin(i / 4))
        failed -= int(3 + 3 * math.sin(i / 3))
    history = ",".join(reversed(samples))
    page.goto(live_server + "/?" + urllib.parse.urlencode({"history": history}))
    expect(page.locator("#total-dead")).to_have_text("12")
    hover(page, "live-chart", now - 31)  # the picture shows a read-out
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "dashboard.png"
    page.screenshot(path=str(shot), full_page=True)
    # The docs' picture: written when missing or asked for, so runs leave the tree clean.
    docs = REPO / "docs" / "dashboard.png"
    if not docs.exists() or os.environ.get("LOWKIQ_UPDATE_SCREENSHOT") == "1":
        docs.parent.mkdir(exist_ok=True)
        shutil.copyfile(shot, docs)
    page.emulate_media(color_scheme="dark")
    page.screenshot(path=str(ARTIFACTS / "dashboard-dark.png"), full_page=True)
    page.goto(live_server + "/ReportWorker/dead")
    page.screenshot(path=str(ARTIFACTS / "dead-dark.png"), full_page=True)


def test_pause_stops_the_refresh(page, live_server):
    page.goto(live_server + "/")
    page.check("input[name=paused]")
    expect(page.locator("#live")).to_have_attribute("data-paused", "yes")
    enqueue(OrderWorker, 5)
    page.wait_for_timeout(5600)  # longer than the default 5 s interval
    assert page.locator("#total-enqueued").inner_text() == "0"


def test_queue_up_a_dead_job_removes_its_row(page, live_server):
    ids = bury(OrderWorker, 3)
    page.goto(live_server + "/OrderWorker/dead")
    rows = page.locator("tr.job")
    assert rows.count() == 3
    page.locator(f'tr[data-id="{ids[1]}"] button[data-action=queue_up]').click()
    expect(rows).to_have_count(2)
    expect(page.locator("#counts b[data-count=morgue_length]")).to_have_text("2")
    assert page.locator("#counts b[data-count=length]").inner_text() == "1"
    assert OrderWorker.queries().fetch([ids[1]])


def test_delete_all_asks_for_confirmation(page, live_server):
    bury(OrderWorker, 4)
    page.goto(live_server + "/OrderWorker/dead")
    questions: list[str] = []

    def refuse(dialog):
        questions.append(dialog.message)
        dialog.dismiss()

    page.once("dialog", refuse)
    page.click("button[data-action=delete_all]")
    page.wait_for_timeout(300)
    assert questions and "Delete every dead job of OrderWorker?" in questions[0]
    assert OrderWorker.metrics()["morgue_length"] == 4

    page.once("dialog", lambda dialog: dialog.accept())
    page.click("button[data-action=delete_all]")
    expect(page.locator(".notice")).to_have_text("4 jobs deleted.")
    assert page.locator("tr.job").count() == 0
    assert OrderWorker.metrics()["morgue_length"] == 0
    expect(page.locator("#counts b[data-count=morgue_length]")).to_have_text("0")


def test_delete_one_dead_job_after_confirmation(page, live_server):
    ids = bury(OrderWorker, 2)
    page.goto(live_server + "/OrderWorker/dead")
    page.once("dialog", lambda dialog: dialog.accept())
    page.locator(f'tr[data-id="{ids[0]}"] button[data-action=delete]').click()
    expect(page.locator("tr.job")).to_have_count(1)
    assert OrderWorker.metrics()["morgue_length"] == 1


def test_enqueued_bulk_action_after_confirmation(page, live_server):
    enqueue(OrderWorker, 5)
    page.goto(live_server + "/OrderWorker/enqueued")
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("button[data-action=perform_all_now]")
    expect(page.locator(".notice")).to_have_text("5 jobs made due now.")


def test_error_banner_on_a_refused_action(page, live_server):
    bury(OrderWorker, 1)
    page.goto(live_server + "/OrderWorker/dead")
    page.context.clear_cookies()  # the CSRF cookie is gone: the POST is refused
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("button[data-action=delete_all]")
    expect(page.locator("#flash")).to_contain_text("CSRF")
    assert all("403" in error for error in page.console_errors)
    page.console_errors.clear()
    assert OrderWorker.metrics()["morgue_length"] == 1


def test_metrics_pages_from_the_nav_link(page, live_server):
    """The History and Charts pages over stored history: index, a worker, another window
    (screenshots)."""
    lowkiq.settings.workers = [OrderWorker, MailWorker, ReportWorker]
    now = time.time()
    for minute in range(59):  # an hour of OrderWorker, busier lately; the first minute stays
        # inside the hour's window whichever second the page is read at
        at = now - minute * 60
        record_history(OrderWorker, at, batches=20 - minute // 4, jobs=10, seconds=0.004, wait=0.3)
        record_history(OrderWorker, at, batches=3, jobs=10, seconds=0.12, wait=2.0)
        if minute % 10 == 0:
            record_history(OrderWorker, at, batches=2, jobs=10, seconds=1.5, failed=True)
    record_history(MailWorker, now - 300, batches=40, seconds=0.3, wait=12.0)
    record_history(ReportWorker, now - 5 * 3600, batches=4, seconds=95.0, wait=0.01)
    page.goto(live_server + "/")
    # The live chart starts from the stored history, not empty.
    expect(page.locator("#live-chart canvas")).to_have_count(1)
    assert len(json.loads(page.locator("#live-chart-data").get_attribute("data-series"))["x"]) > 2
    page.click("header nav.pages >> text=History")
    expect(page).to_have_url(live_server + "/history")
    order = page.locator("tr[data-worker=OrderWorker]")
    expect(order.locator("td[data-count=processed] span")).to_have_attribute("title", "9,510")
    expect(page.locator("tr[data-worker=ReportWorker] td[data-count=processed]")).to_have_text("0")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "metrics.png"), full_page=True)
    order.locator("th a").click()
    expect(page.locator("h1")).to_have_text("OrderWorker · Charts · last 1h")
    buckets = page.locator("section[aria-label='Perform time'] tbody tr")
    assert buckets.count() == 9  # ≤ 5 ms to ≤ 2.5 s
    expect(page.locator("#history-failed span")).to_have_attribute("title", "120")
    hover(page, "history-chart", now - 1200)  # a minute with failures
    page.screenshot(path=str(ARTIFACTS / "metrics-worker.png"), full_page=True)
    docs = REPO / "docs" / "metrics.png"
    if not docs.exists() or os.environ.get("LOWKIQ_UPDATE_SCREENSHOT") == "1":
        shutil.copyfile(ARTIFACTS / "metrics-worker.png", docs)
    page.emulate_media(color_scheme="dark")
    page.screenshot(path=str(ARTIFACTS / "metrics-worker-dark.png"), full_page=True)
    page.goto(live_server + "/history")
    page.click("nav.windows >> text=8h")
    expect(page.locator("tr[data-worker=ReportWorker] td[data-count=processed]")).to_have_text("4")
    page.locator("tr[data-worker=ReportWorker] th a").click()
    quantiles = page.locator("tr[data-metric=duration] td")
    expect(quantiles.first).to_have_text("1m 30s")


def wait_for_chart(page, chart_id):
    """Wait until the chart script has drawn the chart in box ``chart_id``."""
    page.wait_for_function(
        "(id) => { const box = document.getElementById(id);"
        " return !!(box && box.lowkiqChart && box.lowkiqChart.plot); }",
        arg=chart_id,
    )


def chart_state(page, chart_id):
    """What the chart script drew in box ``chart_id``: axes, x range, data, legend values."""
    wait_for_chart(page, chart_id)
    return page.evaluate(
        """(id) => {
            const plot = document.getElementById(id).lowkiqChart.plot;
            return {
                axes: plot.axes.map((axis) => axis.label),
                canvas: !!plot.root.querySelector("canvas"),
                x: [plot.scales.x.min, plot.scales.x.max],
                data: plot.data,
                legend: Array.from(plot.root.querySelectorAll(".u-legend .u-value"),
                                   (cell) => cell.textContent),
            };
        }""",
        chart_id,
    )


def hover(page, chart_id, at):
    """Move the mouse over the chart at unix time ``at``, halfway up."""
    wait_for_chart(page, chart_id)
    box = page.evaluate(
        """([id, at]) => {
            const plot = document.getElementById(id).lowkiqChart.plot;
            const over = plot.over.getBoundingClientRect();
            return {x: over.left + plot.valToPos(at, "x"), y: over.top + over.height / 2};
        }""",
        [chart_id, at],
    )
    page.mouse.move(box["x"], box["y"])


def test_live_chart_draws_stored_history_reads_out_on_hover_and_updates(page, live_server):
    now = time.time()
    minute = int(now // 60)
    enqueue(OrderWorker, 120, perform_in=LONG_AGO)
    process(OrderWorker, 120)
    burst = (minute - 3) * 60 + 10
    for second in range(10):  # 12 jobs/s for 10 s, three minutes ago
        record_history(OrderWorker, burst + second + 0.5, batches=12)
    page.goto(live_server + "/")
    expect(page.locator("#live-chart canvas")).to_have_count(1)
    state = chart_state(page, "live-chart")
    assert state["axes"] == ["time (UTC)", "jobs/s"]
    assert state["data"][0][:3] == [(minute - 3) * 60.0, burst, burst + 10]
    assert state["data"][1][:3] == [0.0, 12.0, 0.0]  # per second, not the minute's 2 jobs/s
    assert state["x"][1] - state["x"][0] >= 5 * 58  # the window: 58 refreshes at least
    assert state["legend"][1:] == ["0 jobs/s", "0 jobs/s"]  # the latest interval, idle
    hover(page, "live-chart", burst + 5)
    expect(page.locator("#live-chart .u-legend .u-value").nth(1)).to_have_text("12.0 jobs/s")
    assert (
        page.locator("#live-chart .u-legend .u-value")
        .first.inner_text()
        .startswith(time.strftime("%Y-%m-%d %H:%M:10", time.gmtime(burst)))
    )
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    # caret="initial": Playwright's caret-hiding style would be an inline style the
    # page's CSP refuses (a console error).
    page.screenshot(path=str(ARTIFACTS / "live-chart-seeded.png"), caret="initial")
    page.mouse.move(0, 0)
    page.evaluate(
        """() => {
            window.firstPlot = document.getElementById("live-chart").lowkiqChart.plot;
            // Jobs drawn after the seeded steps: each rate times its interval's length.
            const seeded = window.firstPlot.data[0].length - 1;
            window.liveJobs = (plot) => {
                const [x, processed] = plot.data;
                let jobs = 0;
                for (let i = seeded; i < x.length - 1; i++) {
                    jobs += processed[i] * (x[i + 1] - x[i]);
                }
                return jobs;
            };
        }"""
    )
    page.select_option("select[name=interval]", "2")
    enqueue(MailWorker, 40, perform_in=LONG_AGO)
    process(MailWorker, 40)
    # New counts come in with the next refreshes; the chart keeps its canvas and redraws.
    page.wait_for_function(
        """() => {
            const plot = document.getElementById("live-chart").lowkiqChart.plot;
            return plot === window.firstPlot && window.liveJobs(plot) > 39;
        }""",
        timeout=10_000,
    )
    assert abs(page.evaluate("() => window.liveJobs(window.firstPlot)") - 40) < 0.5


def test_live_chart_of_a_fresh_page_shows_a_burst_at_its_rate_per_second(page, live_server):
    """2,200 jobs in two seconds, 40 s ago: 1,100 jobs/s on the chart, not a minute's 37."""
    start = int(time.time()) - 40
    enqueue(OrderWorker, 2200, perform_in=LONG_AGO)
    process(OrderWorker, 2200)
    for second in range(2):
        record_history(OrderWorker, start + second + 0.5, batches=110, jobs=10)
    page.goto(live_server + "/")
    state = chart_state(page, "live-chart")
    assert state["axes"] == ["time (UTC)", "jobs/s"]
    assert max(state["data"][1]) == 1100
    index = state["data"][0].index(start)
    assert state["data"][0][index + 1] == start + 2 and state["data"][1][index] == 1100
    hover(page, "live-chart", start + 1)
    expect(page.locator("#live-chart .u-legend .u-value").nth(1)).to_have_text("1,100 jobs/s")
    expect(page.locator("#live-rates")).to_contain_text("peak 1,100/s")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "live-chart-burst.png"), caret="initial")


def test_metrics_chart_reads_out_jobs_per_minute_on_hover(page, live_server):
    now = time.time()
    record_history(OrderWorker, now - 600, batches=30, jobs=10)
    record_history(OrderWorker, now - 600, batches=2, jobs=10, failed=True)
    record_history(OrderWorker, now - 600, batches=1, jobs=5, discarded=True)
    page.goto(live_server + "/OrderWorker/history")
    expect(page.locator("#history-chart canvas")).to_have_count(1)
    state = chart_state(page, "history-chart")
    assert state["axes"] == ["time (UTC)", "jobs/min"]
    minute = int((now - 600) // 60) * 60.0
    index = state["data"][0].index(minute)
    assert state["data"][1][index] == 300 and state["data"][2][index] == 20
    assert state["data"][3][index] == 5  # discarded, a series of its own
    hover(page, "history-chart", minute + 55)
    values = page.locator("#history-chart .u-legend .u-value")
    expect(values.nth(1)).to_have_text("300 jobs/min")
    expect(values.nth(2)).to_have_text("20.0 jobs/min")
    expect(values.nth(3)).to_have_text("5.00 jobs/min")
    labels = page.locator("#history-chart .u-legend .u-label")
    assert labels.all_inner_texts()[1:] == ["processed", "failed", "discarded"]
    stroke = """() => {
        const plot = document.getElementById("history-chart").lowkiqChart.plot;
        return [plot.series[1].stroke(plot, 1), plot.series[2].stroke(plot, 2)];
    }"""
    assert page.evaluate(stroke) == ["#1f8a4c", "#c0392b"]  # lowkiq.css, light
    page.emulate_media(color_scheme="dark")  # drawn again in the dark theme's colours
    expect(page.locator("#history-chart canvas")).to_have_count(1)
    # The colour-scheme change reaches the page as an event: give it a moment.
    deadline = time.monotonic() + 10
    while page.evaluate(stroke) != ["#4cc38a", "#ff6b5e"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert page.evaluate(stroke) == ["#4cc38a", "#ff6b5e"]


def test_charts_are_tables_without_javascript(browser, live_server, workers):
    record_history(OrderWorker, time.time() - 120, batches=6, jobs=10)
    context = browser.new_context(java_script_enabled=False)
    try:
        page = context.new_page()
        page.goto(live_server + "/")
        table = page.locator("table.chart-table[data-chart-table=live-chart]")
        expect(table).to_be_visible()
        assert table.locator("tbody tr").count() >= 1
        expect(page.locator("#live-chart canvas")).to_have_count(0)
        page.goto(live_server + "/OrderWorker/history")
        rows = page.locator("table.chart-table[data-chart-table=history-chart] tbody tr")
        expect(rows).to_have_count(60)
        expect(rows.filter(has_text="60.0")).to_have_count(1)  # 60 jobs in one minute
        page.goto(live_server + "/history?window=8h")
        expect(page.locator("table.chart-table tbody tr")).to_have_count(48)
    finally:
        context.close()


def test_pause_asks_for_confirmation_and_shows_the_state(page, live_server):
    page.goto(live_server + "/OrderWorker/enqueued")
    page.once("dialog", lambda dialog: dialog.dismiss())
    page.click("button[data-action=pause]")
    page.wait_for_timeout(300)
    assert not OrderWorker.paused()

    questions: list[str] = []

    def accept(dialog):
        questions.append(dialog.message)
        dialog.accept()

    page.once("dialog", accept)
    page.click("button[data-action=pause]")
    expect(page.locator("#pause [data-worker-paused]")).to_have_text("paused")
    assert "Pause OrderWorker on every worker process?" in questions[0]
    assert OrderWorker.paused()
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("button[data-action=resume]")
    expect(page.locator("button[data-action=pause]")).to_be_visible()
    assert not OrderWorker.paused()
