"""The groups table's buttons in a real headless Chromium: each asks first, a refusal
changes nothing, and the table shows the new state without a reload; a bad value shows
its message (a 400), and nothing changes."""

from __future__ import annotations

import pytest
from web_support import OrderWorker, enqueue

import lowkiq

expect = pytest.importorskip("playwright.sync_api").expect


def group_row(page, group: str):
    return page.locator(f'#groups tr.group[data-group="{group}"]')


def answer(page, accept: bool) -> list[str]:
    """Answer the next confirmation; returns the list its question will be added to."""
    questions: list[str] = []

    def handle(dialog):
        questions.append(dialog.message)
        if accept:
            dialog.accept()
        else:
            dialog.dismiss()

    page.once("dialog", handle)
    return questions


def test_pause_resume_limits_and_delete_a_group(page, live_server):
    enqueue(OrderWorker, 4, prefix="a", group="acme")
    enqueue(OrderWorker, 2, prefix="g", group="globex")
    page.goto(live_server + "/OrderWorker/enqueued")
    acme = group_row(page, "acme")

    questions = answer(page, accept=False)
    acme.locator("button[data-action=pause-group]").click()
    page.wait_for_timeout(300)
    assert questions and "Pause group acme of OrderWorker" in questions[0]
    assert not OrderWorker.actions().group_state("acme").paused

    answer(page, accept=True)
    acme.locator("button[data-action=pause-group]").click()
    expect(acme.locator("[data-group-paused]")).to_have_text("paused")
    expect(page.locator("[data-groups-message]")).to_have_text("Group acme paused.")
    assert OrderWorker.actions().group_state("acme").paused
    assert not OrderWorker.actions().group_state("globex").paused

    answer(page, accept=True)
    acme.locator("button[data-action=resume-group]").click()
    expect(acme.locator("button[data-action=pause-group]")).to_be_visible()
    assert not OrderWorker.actions().group_state("acme").paused

    acme.locator("input[name=concurrency]").fill("2")
    acme.locator("input[name=rate]").fill("10/s")
    questions = answer(page, accept=True)
    acme.locator("button[data-action=group-limits]").click()
    expect(acme.locator("[data-group-limits]")).to_contain_text("≤ 2 at once")
    expect(acme.locator("[data-group-limits]")).to_contain_text("10/s")
    assert "Change the limits of group acme" in questions[0]
    state = OrderWorker.actions().group_state("acme")
    assert (state.concurrency, state.rate) == (2, lowkiq.RateLimit(10))

    answer(page, accept=True)
    acme.locator("button[data-action=clear-group-limits]").click()
    expect(acme.locator("button[data-action=clear-group-limits]")).to_have_count(0)
    assert OrderWorker.actions().group_settings() == {}

    questions = answer(page, accept=True)
    acme.locator("button[data-action=delete-group]").click()
    expect(page.locator("[data-groups-message]")).to_have_text(
        "4 queued jobs of group acme deleted."
    )
    expect(acme).to_have_count(0)
    assert "cannot be undone" in questions[0]
    assert OrderWorker.metrics()["length"] == 2


def test_a_bad_cap_shows_its_message_and_changes_nothing(page, live_server):
    enqueue(OrderWorker, 2, prefix="a", group="acme")
    page.goto(live_server + "/OrderWorker/enqueued")
    acme = group_row(page, "acme")
    acme.locator("input[name=concurrency]").fill("0")
    answer(page, accept=True)
    acme.locator("button[data-action=group-limits]").click()
    expect(page.locator("#flash")).to_contain_text("concurrency must be an integer >= 1")
    page.console_errors.clear()  # the 400 response is logged by the browser
    assert OrderWorker.actions().group_settings() == {}
