"""In a real headless Chromium: a fleet-wide rate-limit change asks first, a Move without a
chosen worker asks for one, and the message of an action is replaced by the next one's."""

from __future__ import annotations

import pytest
from web_support import OrderWorker, enqueue

from lowkiq.limits.rate_limit import RateLimit

expect = pytest.importorskip("playwright.sync_api").expect


def answer(page, accept: bool) -> list[str]:
    """Answer the next dialog; returns the list its question is put into."""
    questions: list[str] = []

    def handle(dialog):
        questions.append(dialog.message)
        dialog.accept() if accept else dialog.dismiss()

    page.once("dialog", handle)
    return questions


def test_setting_or_removing_a_rate_limit_asks_first(page, live_server):
    page.goto(live_server + "/OrderWorker/enqueued")
    page.fill("#rate-limit input[name=limit]", "20/s")
    page.fill("#rate-limit input[name=burst]", "40")
    questions = answer(page, accept=False)
    page.click("button[data-action=set-rate-limit]")
    page.wait_for_timeout(300)
    assert questions == [
        "Limit OrderWorker to 20/s (burst 40) on every worker process? Its shards then wait "
        "for tokens at that pace."
    ]
    assert OrderWorker.rate_limit_status().limit is None

    questions = answer(page, accept=True)
    page.click("button[data-action=set-rate-limit]")
    expect(page.locator("#rate-limit")).to_have_attribute("data-rate-limit", "20/s (burst 40)")
    assert OrderWorker.rate_limit_status().limit == RateLimit.parse("20/s", 40)

    questions = answer(page, accept=False)
    page.click("button[data-action=no-rate-limit]")
    page.wait_for_timeout(300)
    assert questions == [
        "Remove the rate limit of OrderWorker on every worker process? Its jobs then run as "
        "fast as its shards take them."
    ]
    assert OrderWorker.rate_limit_status().limit == RateLimit.parse("20/s", 40)
    answer(page, accept=True)
    page.click("button[data-action=no-rate-limit]")
    expect(page.locator("#rate-limit")).to_have_attribute("data-rate-limit", "none")
    assert OrderWorker.rate_limit_status().limit is None


def test_move_without_a_chosen_worker_asks_for_one(page, live_server):
    ids = enqueue(OrderWorker, 2)
    page.goto(live_server + "/OrderWorker/enqueued")
    page.check(f'tr[data-id="{ids[0]}"] input[form=checked]')
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    page.click("button[data-action=checked-move]")
    expect(page.locator("#flash")).to_have_text("Choose the worker to move the jobs to first.")
    page.wait_for_timeout(300)
    assert dialogs == [] and OrderWorker.metrics()["length"] == 2


def test_a_row_actions_message_replaces_the_previous_one(page, live_server):
    ids = enqueue(OrderWorker, 3)
    page.goto(live_server + "/OrderWorker/enqueued?by=id")
    page.click(f'tr[data-id="{ids[0]}"] button[data-action=perform_now]')
    message = page.locator("#jobs [role=status]")
    expect(message).to_have_text("1 job made due now.")
    answer(page, accept=True)
    page.click(f'tr[data-id="{ids[1]}"] button[data-action=delete]')
    expect(page.locator(f'tr[data-id="{ids[1]}"]')).to_have_count(0)
    expect(message).to_have_text(f"Job {ids[1]} deleted.")
    answer(page, accept=True)
    page.click(f'tr[data-id="{ids[2]}"] button[data-action=kill]')
    expect(page.locator(f'tr[data-id="{ids[2]}"]')).to_have_count(0)
    expect(message).to_have_text(f"Job {ids[2]} moved to the morgue.")
    expect(page.locator("#jobs [role=status]")).to_have_count(1)
