"""The job page's Events in a real headless Chromium: visible, in order, without console
errors (a CSP violation included, see the ``page`` fixture); a screenshot to look at."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_web_job_events import TrackedMail, TrackedWorker
from web_support import ARTIFACTS

import lowkiq
from lowkiq.ownership import leases
from lowkiq.testing import drain

expect = pytest.importorskip("playwright.sync_api").expect

#: Where the screenshot of a tracked job's page goes, besides the test artifacts.
SCREENSHOT = Path("/tmp/job_events.png")
#: What Chromium's console says of a page served with a 404.
NOT_FOUND = "Failed to load resource: the server responded with a status of 404 (NOT FOUND)"


@pytest.fixture(autouse=True)
def tracked(workers: list[type[lowkiq.Worker]]) -> None:
    lowkiq.settings.workers = [*workers, TrackedWorker, TrackedMail]
    TrackedWorker.tries = {}


def test_a_tracked_jobs_page_shows_its_events(page, live_server):
    TrackedWorker.perform_async([{"id": "order-42", "payload": "flaky"}])
    drain(TrackedWorker)
    drain(TrackedWorker, future=True)
    TrackedWorker.perform_async([{"id": "order-42", "payload": "again"}])
    page.goto(live_server + "/TrackedWorker/job?id=order-42")
    events = page.locator("section.job-events")
    expect(events).to_be_visible()
    expect(events.locator("h2")).to_have_text("Events")
    rows = events.locator("tr.event")
    expect(rows).to_have_count(6)
    assert [rows.nth(n).get_attribute("data-event") for n in range(6)] == [
        "enqueued",
        "done",
        "popped",
        "failed",
        "popped",
        "enqueued",
    ]
    failed = events.locator("tr.event[data-event=failed]")
    expect(failed.locator(".event-error")).to_have_text("KeyError: '<status>'")
    expect(failed.locator(".retry")).to_have_text("retry 1")
    title = failed.locator("time").first.get_attribute("title")
    assert title is not None and title.endswith(")") and "UTC (unix " in title
    page.screenshot(path=str(SCREENSHOT), full_page=True)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "job-events.png"), full_page=True)
    assert page.console_errors == []

    TrackedWorker.perform_async([{"id": "order-7", "payload": "ok"}])
    drain(TrackedWorker)
    page.goto(live_server + "/TrackedWorker/job?id=order-7")  # done: no longer queued
    expect(page.locator("[data-not-queued]")).to_contain_text("is not busy, queued or dead now")
    expect(page.locator("section.job-events tr.event")).to_have_count(3)
    page.screenshot(path=str(ARTIFACTS / "job-events-done.png"), full_page=True)
    assert page.console_errors == []

    page.goto(live_server + "/TrackedWorker/job?id=nope")
    expect(page.locator("section.job-events .events-hint")).to_contain_text("No events of")
    page.goto(live_server + "/OrderWorker/job?id=nope")
    expect(page.locator("section.job-events .events-hint")).to_contain_text(
        "OrderWorker records no job events"
    )
    # The two pages' own 404 statuses are the only console lines.
    assert page.console_errors == [NOT_FOUND] * 2
    page.console_errors.clear()


def test_a_job_that_waited_for_a_place_in_its_group_reads_as_one_line(page, live_server):
    """Batches popped then put back unrun because their group was at its cap (another
    process's batches held its places) fold into one row that says so and how often."""
    TrackedWorker.perform_async([{"id": "order-9", "payload": "ok"}])
    queue = TrackedWorker.queue()
    shard = queue.shard_of("order-9")
    lease, _, _ = leases.acquire(queue, shard, "a-process", 30.0)
    assert lease is not None
    for _ in range(3):  # each pop's group claim refused: back into the queue unrun
        popped = queue.pop(shard, lease.token, 1)
        assert [job.id for job in popped.jobs] == ["order-9"]
        queue.restore(shard, lease.token, popped.batch, reason="group_full")
    leases.release(queue, [lease])
    drain(TrackedWorker)
    page.goto(live_server + "/TrackedWorker/job?id=order-9")
    rows = page.locator("section.job-events tr.event")
    expect(rows).to_have_count(4)
    assert [rows.nth(n).get_attribute("data-event") for n in range(4)] == [
        "done",
        "popped",
        "restored",
        "enqueued",
    ]
    expect(rows.nth(2).locator(".event-what")).to_contain_text(
        "Back in the queue unrun, 3 times: its group had no free place or token"
    )
    assert page.console_errors == []
