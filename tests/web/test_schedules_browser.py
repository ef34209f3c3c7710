"""The Schedules page's run-time actions in a real headless Chromium: pause and resume,
change the ticks (typed values survive the live refresh), add, remove (asked first),
reset, and a bad value shown as its 400 message with nothing changed."""

from __future__ import annotations

from datetime import timedelta

import pytest
from web_support import ARTIFACTS, MailWorker, OrderWorker

import lowkiq

expect = pytest.importorskip("playwright.sync_api").expect


@pytest.fixture
def schedules(workers):
    lowkiq.settings.schedules = [
        lowkiq.Schedule(OrderWorker, id="digest", cron="0 7 * * *", timezone="Europe/Berlin"),
        lowkiq.Schedule(MailWorker, id="stock", every=timedelta(minutes=5)),
    ]


def listed() -> dict[str, lowkiq.ScheduleInfo]:
    return {info.name: info for info in lowkiq.schedules()}


def answer(page, accept: bool) -> list[str]:
    """Answer the next confirmation; returns the list its question is added to."""
    questions: list[str] = []

    def on_dialog(dialog) -> None:
        questions.append(dialog.message)
        if accept:
            dialog.accept()
        else:
            dialog.dismiss()

    page.once("dialog", on_dialog)
    return questions


def test_pause_change_add_remove_and_reset_in_the_browser(page, live_server, schedules):
    page.goto(live_server + "/schedules")
    stock = page.locator('tr.schedule[data-schedule="stock"]')
    digest = page.locator('tr.schedule[data-schedule="digest"]')
    notice = page.locator("#schedules .notice")

    stock.locator("button[data-action=pause]").click()
    expect(notice).to_have_text("stock: paused on every worker process.")
    expect(stock.locator("[data-state=paused]")).to_be_visible()
    assert listed()["stock"].paused
    stock.locator("button[data-action=resume]").click()
    expect(stock.locator("[data-state=active]")).to_be_visible()
    assert not listed()["stock"].paused

    # A change typed while the list refreshes itself every 2 s keeps what was typed.
    page.select_option("select[name=interval]", "2")
    expect(page.locator("#schedules")).to_have_attribute("hx-trigger", "every 2s")
    stock.locator("summary[data-action=change]").click()
    stock.locator("input[name=every]").fill("30s")
    page.wait_for_timeout(2600)
    assert stock.locator("input[name=every]").input_value() == "30s"
    questions = answer(page, accept=True)
    stock.locator("button[data-action=change-submit]").click()
    expect(notice).to_have_text("stock: ticks changed.")
    assert questions[0].startswith("Change when stock ticks")
    expect(stock.locator(".ticks")).to_contain_text("every 30 s")
    assert listed()["stock"].every == timedelta(seconds=30)

    page.fill("#add-schedule input[name=id]", "nightly")
    page.select_option("#add-schedule select[name=worker]", "OrderWorker")
    page.fill("#add-schedule input[name=cron]", "@daily")
    page.fill("#add-schedule input[name=payload]", '{"kind": "nightly"}')
    page.click("#add-schedule button[data-action=add]")
    nightly = page.locator('tr.schedule[data-schedule="nightly"]')
    expect(nightly.locator("[data-source=added]")).to_be_visible()
    assert listed()["nightly"].source == "added"

    questions = answer(page, accept=False)
    nightly.locator("button[data-action=remove]").click()
    page.wait_for_timeout(300)
    assert questions and questions[0].startswith("Remove nightly on every worker process?")
    assert "nightly" in listed()
    answer(page, accept=True)
    nightly.locator("button[data-action=remove]").click()
    expect(nightly).to_have_count(0)
    assert "nightly" not in listed()

    answer(page, accept=True)
    digest.locator("button[data-action=remove]").click()
    expect(digest.locator("[data-state=removed]")).to_be_visible()
    questions = answer(page, accept=True)
    digest.locator("button[data-action=reset]").click()
    expect(digest.locator("[data-state=active]")).to_be_visible()
    assert questions[0].startswith("Reset digest to settings.schedules?")
    assert not listed()["digest"].removed
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "schedules-actions.png"), full_page=True)


def test_a_bad_cron_is_shown_with_its_message_and_changes_nothing(page, live_server, schedules):
    page.goto(live_server + "/schedules")
    digest = page.locator('tr.schedule[data-schedule="digest"]')
    digest.locator("summary[data-action=change]").click()
    digest.locator("input[name=cron]").fill("0 0 30 2 *")
    answer(page, accept=True)
    digest.locator("button[data-action=change-submit]").click()
    expect(page.locator("#flash")).to_contain_text("400: ")
    expect(page.locator("#flash")).to_contain_text("bad cron expression")
    page.console_errors.clear()  # the browser logs the 400 response
    assert listed()["digest"].cron == "0 7 * * *" and not listed()["digest"].changed
