"""The Workflows pages in a real headless Chromium: from the nav to the list, to a
workflow's page, and its cancel, asked first, shown without a reload."""

from __future__ import annotations

import pytest
from web_support import ARTIFACTS
from workflow_pages_support import Steps, pending_workflow, register, succeeded_workflow

import lowkiq

expect = pytest.importorskip("playwright.sync_api").expect


def test_list_a_workflow_and_cancel_it(page, live_server):
    register()
    succeeded_workflow("wf-ok")
    pending_workflow("wf-run", jobs=3)
    page.goto(live_server + "/")
    page.locator("nav.pages a", has_text="Workflows").click()
    rows = page.locator("tr.workflow")
    expect(rows).to_have_count(2)
    expect(rows.nth(0)).to_have_attribute("data-workflow", "wf-run")
    expect(rows.nth(1).locator("[data-workflow-status]")).to_have_text("succeeded")

    rows.nth(0).locator("a").click()
    expect(page).to_have_url(live_server + "/workflow?id=wf-run")
    expect(page.locator("#workflow [data-workflow-status]")).to_have_text("closed")
    expect(page.locator("ul[data-state=pending] li")).to_have_count(3)

    questions: list[str] = []

    def refuse(dialog):
        questions.append(dialog.message)
        dialog.dismiss()

    page.once("dialog", refuse)
    page.locator("button[data-action=cancel-workflow]").click()
    page.wait_for_timeout(300)
    assert questions and questions[0].startswith("Cancel workflow wf-run?")
    assert lowkiq.workflow("wf-run").status().pending == 3

    page.once("dialog", lambda dialog: dialog.accept())
    page.locator("button[data-action=cancel-workflow]").click()
    expect(page.locator("[data-workflow-message]")).to_have_text(
        "Workflow wf-run cancelled: 3 queued member payloads deleted."
    )
    expect(page.locator("#workflow [data-workflow-status]")).to_have_text("cancelled")
    expect(page.locator("button[data-action=cancel-workflow]")).to_have_count(0)
    expect(page.locator("ul[data-state=discarded] li")).to_have_count(3)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "workflow-cancelled.png"), full_page=True)
    assert Steps.metrics()["length"] == 0
    status = lowkiq.workflow("wf-run").status()
    assert status.complete and not status.succeeded
