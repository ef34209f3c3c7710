"""The job actions in a real headless Chromium: checked rows and their count, the question with
the count, a row's delete, the job page's buttons; screenshots in the test artifacts.

Any console error, a CSP violation included, fails the test (see the ``page`` fixture).
"""

from __future__ import annotations

import pytest
from web_support import ARTIFACTS, LONG_AGO, OrderWorker, bury, enqueue, fail_all

expect = pytest.importorskip("playwright.sync_api").expect


def answer(page, accept: bool = True) -> list[str]:
    """Answer the next dialog; returns the list its question is put in."""
    questions: list[str] = []

    def handle(dialog) -> None:
        questions.append(dialog.message)
        if accept:
            dialog.accept()
        else:
            dialog.dismiss()

    page.once("dialog", handle)
    return questions


def shoot(page, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / name), full_page=True)


def test_delete_checked_rows(page, live_server):
    ids = enqueue(OrderWorker, 8)
    enqueue(OrderWorker, 2, prefix="f", perform_in=LONG_AGO)
    fail_all(OrderWorker, error="KeyError: 'status'")
    page.goto(live_server + "/OrderWorker/enqueued?by=id")
    buttons = page.locator("[data-checked-form] button")
    expect(buttons.first).to_be_disabled()
    for job_id in ids[1:4]:
        page.check(f'tr[data-id="{job_id}"] input[form=checked]')
    expect(page.locator("[data-checked-count]")).to_have_text("3")
    expect(page.locator("[data-check-all]")).to_have_js_property("indeterminate", True)
    expect(buttons.first).to_be_enabled()
    shoot(page, "enqueued-checked.png")

    questions = answer(page, accept=False)
    page.click("button[data-action=checked-delete]")
    page.wait_for_timeout(300)
    assert questions == ["Delete the 3 checked job(s) of OrderWorker?"]
    assert OrderWorker.metrics()["length"] == 10

    questions = answer(page)
    page.click("button[data-action=checked-delete]")
    expect(page.locator(".notice")).to_have_text("3 jobs deleted.")
    assert questions == ["Delete the 3 checked job(s) of OrderWorker?"]
    expect(page.locator("tr.job")).to_have_count(7)
    expect(page.locator("#counts b[data-count=length]")).to_have_text("7")
    expect(page.locator("[data-checked-count]")).to_have_text("0")
    expect(buttons.first).to_be_disabled()
    assert OrderWorker.queries().fetch(ids[1:4]) == []
    assert len(OrderWorker.queries().fetch(ids)) == 5
    shoot(page, "enqueued-after-delete.png")

    page.check("[data-check-all]")
    expect(page.locator("[data-checked-count]")).to_have_text("7")
    questions = answer(page)
    page.click("button[data-action=checked-kill]")
    expect(page.locator(".notice")).to_have_text("7 jobs moved to the morgue.")
    assert questions == ["Kill the 7 checked job(s) of OrderWorker?"]
    expect(page.locator("#counts b[data-count=morgue_length]")).to_have_text("7")


def test_delete_one_row_of_the_scheduled_list(page, live_server):
    ids = enqueue(OrderWorker, 3)
    page.goto(live_server + "/OrderWorker/scheduled")
    expect(page.locator("#counts b[data-count=scheduled]")).to_have_text("3")
    questions = answer(page)
    page.locator(f'tr[data-id="{ids[1]}"] button[data-action=delete]').click()
    expect(page.locator("tr.job")).to_have_count(2)
    assert questions == [f"Delete job {ids[1]}?"]
    expect(page.locator("#counts b[data-count=scheduled]")).to_have_text("2")
    assert OrderWorker.queries().fetch([ids[1]]) == []
    page.locator(f'tr[data-id="{ids[0]}"] button[data-action=perform_now]').click()
    expect(page.locator(".notice")).to_have_text("1 job made due now.")
    expect(page.locator("tr.job")).to_have_count(1)
    shoot(page, "scheduled-after-row-actions.png")


def test_whole_list_question_has_the_count(page, live_server):
    bury(OrderWorker, 4)
    page.goto(live_server + "/OrderWorker/dead")
    questions = answer(page)
    page.click("button[data-action=queue_up_all]")
    expect(page.locator(".notice")).to_have_text("4 jobs queued up.")
    assert questions == ["Queue up every dead job of OrderWorker? 4 jobs."]
    page.goto(live_server + "/OrderWorker/enqueued")
    questions = answer(page, accept=False)
    page.click("button[data-action=clear]")
    page.wait_for_timeout(300)
    assert questions and "Delete every queued job of OrderWorker" in questions[0]
    assert "? 4 jobs;" in questions[0]


def test_job_page_buttons(page, live_server):
    [job_id] = enqueue(OrderWorker, 1)
    page.goto(live_server + f"/OrderWorker/job?id={job_id}")
    questions = answer(page)
    page.click("button[data-action=enqueued-kill]")
    expect(page.locator("section.job-view[data-place=dead]")).to_be_visible()
    assert questions == [f"Kill job {job_id}?"]
    page.click("button[data-action=dead-queue_up]")
    expect(page.locator("section.job-view[data-place=enqueued]")).to_be_visible()
    shoot(page, "job-page-actions.png")
    assert OrderWorker.queries().fetch([job_id])[0]["retry_count"] == -1
