"""The Move action in a real headless Chromium: the checked rows moved to the worker chosen,
the question naming it; the job page's Move, then the job in its new worker."""

from __future__ import annotations

import pytest
from web_support import MailWorker, OrderWorker, enqueue

expect = pytest.importorskip("playwright.sync_api").expect


def answer(page) -> list[str]:
    """Accept the next dialog; returns the list its question is put in."""
    questions: list[str] = []

    def handle(dialog) -> None:
        questions.append(dialog.message)
        dialog.accept()

    page.once("dialog", handle)
    return questions


def test_move_checked_rows_and_a_job_from_its_page(page, live_server):
    ids = enqueue(OrderWorker, 5)
    page.goto(live_server + "/OrderWorker/enqueued?by=id")
    move = page.locator("button[data-action=checked-move]")
    expect(move).to_be_disabled()
    for job_id in ids[:2]:
        page.check(f'tr[data-id="{job_id}"] input[form=checked]')
    expect(move).to_be_enabled()
    page.select_option("#checked select[name=to]", "MailWorker")
    questions = answer(page)
    move.click()
    expect(page.locator(".notice")).to_have_text("2 jobs moved to MailWorker.")
    assert questions == [
        "Move the 2 checked job(s) of OrderWorker to MailWorker? They become due now, as "
        "fresh jobs."
    ]
    expect(page.locator("tr.job")).to_have_count(3)
    expect(page.locator("#counts b[data-count=length]")).to_have_text("3")
    assert sorted(job["id"] for job in MailWorker.queries().fetch(ids)) == ids[:2]

    page.goto(live_server + f"/OrderWorker/job?id={ids[4]}")
    # Every other registered worker is a target: choose one, whatever the others are.
    page.select_option("form[data-move-form] select[name=to]", "MailWorker")
    questions = answer(page)
    page.click("button[data-action=enqueued-move]")
    expect(page).to_have_url(live_server + f"/MailWorker/job?id={ids[4]}")
    expect(page.locator("h1")).to_have_text(f"MailWorker · job {ids[4]}")
    assert questions == [f"Move job {ids[4]} to MailWorker? It becomes due now, as a fresh job."]
