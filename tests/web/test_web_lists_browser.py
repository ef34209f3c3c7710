"""The lists in a real headless Chromium: the Retries list's rows and a checked row's Perform
now, the Busy page while a ``lowkiq worker`` process performs a batch, the banner of shards
no live process serves, a row's payloads expander and the id search of the Scheduled list;
screenshots in the test artifacts.

Any console error, a CSP violation included, fails the test (see the ``page`` fixture).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

import pytest
from web_support import ARTIFACTS, LONG_AGO, OrderWorker, enqueue

import lowkiq
from lowkiq.testing import drain
from lowkiq_web import unserved
from tests.apps.runner import WorkerProcess, eventually

expect = pytest.importorskip("playwright.sync_api").expect


def shoot(page: Any, name: str) -> None:
    """Save a full-page screenshot in the test artifacts."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / name), full_page=True)


def answer(page: Any) -> list[str]:
    """Accept the next dialog; returns the list its question is put in."""
    questions: list[str] = []

    def handle(dialog: Any) -> None:
        questions.append(dialog.message)
        dialog.accept()

    page.once("dialog", handle)
    return questions


def utc(timestamp: float) -> str:
    """The exact time a list shows on hover."""
    return datetime.fromtimestamp(timestamp, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


class InvoiceWorker(lowkiq.Worker):
    """Its performs fail for real: a missing key for ``inv-*``, the ledger down otherwise;
    a failed job waits an hour for its retry."""

    shards_count = 2
    batch_size = 1

    @classmethod
    def retry_in(cls, retry_count: int) -> float:
        return 3600.0

    @classmethod
    def perform(cls, payloads_by_id: dict) -> None:
        for job_id, payloads in payloads_by_id.items():
            if job_id.startswith("inv-"):
                payloads[0]["status"]  # raises KeyError('status')
            raise ConnectionError("ledger service did not answer in 30 s")


def test_retries_rows_show_the_error_the_retry_and_the_time_and_perform_now_acts(page, live_server):
    lowkiq.settings.workers = [InvoiceWorker]
    InvoiceWorker.perform_async(
        [{"id": i, "payload": {"total": 12}} for i in ("inv-1", "inv-2", "refund-1")]
    )
    drain(InvoiceWorker)  # each fails once: retry 1, due in an hour
    InvoiceWorker.actions().perform_now(["inv-2"])
    drain(InvoiceWorker)  # inv-2 fails again: retry 2
    page.goto(live_server + "/InvoiceWorker/retries")
    expect(page.locator("tr.job")).to_have_count(3)
    for job in InvoiceWorker.queries().fetch(["inv-1", "inv-2", "refund-1"]):
        row = page.locator(f'tr[data-id="{job["id"]}"]')
        error = "KeyError: 'status'" if job["id"].startswith("inv-") else (
            "ConnectionError: ledger service did not answer in 30 s"
        )  # fmt: skip
        expect(row.locator(".error-summary")).to_have_text(error)
        retry = row.locator(".retry")
        expect(retry).to_have_text(f"retry {job['retry_count'] + 1}")
        expect(retry).to_have_attribute("title", re.compile(r"^failed (once|2 times) "))
        when = row.locator("time.when")
        expect(when).to_have_text(re.compile(r"^in (59m \d+s|1h 0m)$"))
        when.hover()
        expect(when).to_have_attribute(
            "title", f"{utc(job['perform_in'])} (unix {job['perform_in']})"
        )
    expect(page.locator('tr[data-id="inv-2"] .retry')).to_have_text("retry 2")
    shoot(page, "retries.png")

    page.check('tr[data-id="refund-1"] input[form=checked]')
    expect(page.locator("[data-checked-count]")).to_have_text("1")
    questions = answer(page)
    page.click("button[data-action=checked-perform_now]")
    expect(page.locator(".notice")).to_have_text("1 job made due now.")
    assert questions == ["Perform now the 1 checked job(s) of InvoiceWorker?"]
    refund = page.locator('tr[data-id="refund-1"]')
    expect(refund.locator("time.when")).to_have_text(re.compile(r"ago$"))
    expect(refund.locator(".retry")).to_have_text("retry 1")  # its retry count stays
    [job] = InvoiceWorker.queries().fetch(["refund-1"])
    assert job["perform_in"] <= time.time() and job["retry_count"] == 0
    shoot(page, "retries-after-perform-now.png")


def test_busy_names_the_process_thread_start_and_running_time_of_a_batch(
    page,
    live_server,
    worker_processes: Callable[..., WorkerProcess],
    recorder: type,
):
    lowkiq.settings.workers = [recorder]
    worker = worker_processes("--threads", "2")
    recorder.perform_async([{"id": "slow-1", "payload": {"sleep": 8}}])
    shard = f"{recorder.queue_name}:{recorder.queue().shard_of('slow-1')}"
    running = lambda: [  # noqa: E731
        batch
        for process in lowkiq.processes().processes
        for batch in process.running
        if batch.shard == shard
    ]
    [batch] = eventually(running, 10)
    [process] = lowkiq.processes().processes
    assert process.pid == worker.process.pid
    time.sleep(1.2)  # a running time of at least a second
    page.goto(live_server + f"/{recorder.__name__}/busy")
    row = page.locator('tr[data-id="slow-1"]')
    expect(row).to_have_count(1)
    cells = row.locator("td")
    expect(row.locator("td.process")).to_have_text(f"{process.host}:{process.pid}")
    expect(cells.nth(4)).to_have_text(batch.thread)
    started = cells.nth(5).locator("time.when")
    expect(started).to_have_text(re.compile(r"^\d+s ago$"))
    expect(started).to_have_attribute("title", re.compile(rf"^{utc(batch.started_at)} "))
    expect(row.locator("td.elapsed")).to_have_text(re.compile(r"^[1-9]\d*s$"))
    headers = page.locator("table.job-list thead th")
    expect(headers.nth(4)).to_have_text("Thread")
    expect(headers.nth(5)).to_have_text("Started")
    expect(page.locator("#counts b[data-count=busy]")).to_have_text("1")
    shoot(page, "busy-running.png")


def test_the_banner_names_shards_no_live_process_serves_until_one_does(
    page,
    live_server,
    worker_processes: Callable[..., WorkerProcess],
    recorder: type,
):
    lowkiq.settings.workers = [recorder]
    recorder.perform_async([{"id": f"w{n}", "payload": {"v": 1}} for n in range(12)])
    message = f"{recorder.__name__}: 5 of 5 shards have no live process (12 jobs waiting)"
    for path in ("/", f"/{recorder.__name__}/enqueued", f"/{recorder.__name__}/job?id=w1"):
        page.goto(live_server + path)
        banner = page.locator(".banner-unserved")
        expect(banner).to_be_visible()
        expect(banner.locator(f'p[data-worker="{recorder.__name__}"]')).to_have_text(f"⚠ {message}")
    shoot(page, "banner-unserved.png")
    page.locator(".banner-unserved a", has_text="Processes").click()
    expect(page).to_have_url(live_server + "/processes")
    expect(page.locator("#total-unowned")).to_have_text("5")

    worker_processes()
    eventually(lambda: not lowkiq.processes().queues[0].unowned, 15)
    unserved.reset()  # the page process reads the owners every few seconds
    page.goto(live_server + "/")
    expect(page.locator(".banner-unserved")).to_have_count(0)


def test_a_rows_payloads_take_one_line_until_opened(page, live_server):
    later = time.time() + 3600
    OrderWorker.perform_async(
        [
            {
                "id": "cart-7",
                "payload": {"sku": f"A-{n}", "qty": n, "note": "gift wrap " * 4},
                "score": n,
                "perform_in": later,
            }
            for n in range(1, 4)
        ]
    )
    enqueue(OrderWorker, 1, prefix="single-", perform_in=LONG_AGO)
    page.goto(live_server + "/OrderWorker/enqueued")
    row = page.locator('tr[data-id="cart-7"]')
    line = row.locator("details.payloads-line")
    expect(line).not_to_have_attribute("open", "")
    expect(line.locator("summary small")).to_have_text("(3 payloads)")
    expect(line.locator("ol.payloads")).to_be_hidden()
    summary = line.locator("summary code")
    expect(summary).to_contain_text(re.compile(r'^\{"note":.*"sku":"A-1"\}, \{.*…$'))  # cut short
    height = summary.bounding_box()["height"]
    font = float(summary.evaluate("e => getComputedStyle(e).lineHeight.replace('px', '')"))
    assert height < 1.5 * font, "one line by default"
    expect(page.locator('tr[data-id="single-0000"] summary small')).to_have_count(0)
    shoot(page, "payloads-closed.png")

    line.locator("summary").click()
    items = line.locator("ol.payloads > li")
    expect(items).to_have_count(3)
    expect(items.first).to_be_visible()
    for n in range(1, 4):
        item = items.nth(n - 1)
        expect(item.locator(".score")).to_have_text(re.compile(rf"^{n}(\.0)?$"))
        text = item.locator("pre").inner_text()
        assert f'"sku": "A-{n}"' in text and "\n" in text, text  # pretty-printed in full
        assert "gift wrap " * 4 in text
    shoot(page, "payloads-open.png")
    line.locator("summary").click()
    expect(line.locator("ol.payloads")).to_be_hidden()


def test_search_the_scheduled_list_by_a_part_of_an_id(page, live_server):
    later = time.time() + 600
    OrderWorker.perform_async(
        [
            {"id": i, "payload": {"n": 1}, "perform_in": later + n}
            for n, i in enumerate(["order-4711-a", "eu-4711", "order-4712", "order-4711-b"])
        ]
    )
    enqueue(OrderWorker, 1, prefix="due-4711-", perform_in=LONG_AGO)  # due: not scheduled
    page.goto(live_server + "/OrderWorker/scheduled")
    expect(page.locator("tr.job")).to_have_count(4)
    search = page.locator("#filters input[name=prefix]")
    expect(search).to_have_attribute("placeholder", "part of an id: lists by id")
    search.fill("4711")
    search.press("Enter")
    expect(page).to_have_url(re.compile(r"/OrderWorker/scheduled\?.*prefix=4711"))
    rows = page.locator("tr.job")
    expect(rows).to_have_count(3)
    assert [rows.nth(n).get_attribute("data-id") for n in range(3)] == [
        "eu-4711",
        "order-4711-a",
        "order-4711-b",
    ]
    expect(search).to_have_value("4711")
    order = page.locator("#filters select[name=by] option:checked")
    expect(order).to_have_text("id")
    expect(page.locator("[data-search-stopped]")).to_have_count(0)
    shoot(page, "scheduled-search.png")
    questions = answer(page)
    page.locator('tr[data-id="order-4711-b"] button[data-action=delete]').click()
    expect(rows).to_have_count(2)  # the list comes back still searched
    assert questions == ["Delete job order-4711-b?"]
    assert [rows.nth(n).get_attribute("data-id") for n in range(2)] == ["eu-4711", "order-4711-a"]

    search.fill("order-47")
    search.press("Enter")
    expect(rows).to_have_count(2)
    expect(page.locator('tr[data-id="order-4712"]')).to_have_count(1)
    search.fill("")
    search.press("Enter")
    expect(rows).to_have_count(3)
    expect(rows.first).to_have_attribute("data-id", "order-4711-a")  # soonest first again
    expect(order).to_have_text("perform_in")
