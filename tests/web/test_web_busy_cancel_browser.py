"""The Busy page's Cancel button in a real headless Chromium, against a real ``lowkiq
worker`` process (``tests/apps/cancellable.py``) performing the job: the question, the
message, and the perform told to stop, its job ended as cancelled; a screenshot in the
test artifacts.  Any console error, a CSP violation included, fails the test."""

from __future__ import annotations

import json

import pytest
from web_support import ARTIFACTS

import lowkiq
from tests.apps.runner import WorkerProcess, eventually

expect = pytest.importorskip("playwright.sync_api").expect


def test_cancel_a_busy_job_from_its_row(page, live_server, redis_client, redis_url, monkeypatch):
    monkeypatch.setenv("REDIS_URL", redis_url)
    from tests.apps.cancellable import Long, Steps, Watch

    lowkiq.settings.workers = [Long, Steps, Watch]
    process = WorkerProcess("-r", "tests/apps/cancellable.py", env={"REDIS_URL": redis_url})
    try:
        process.wait_started()
        Long.perform_async([{"id": "order-7", "payload": {"n": 1}}])
        eventually(lambda: redis_client.lrange("test:started", 0, -1) == [b"order-7"])
        page.goto(live_server + "/Long/busy")
        row = page.locator('tr[data-id="order-7"]')
        expect(row.locator("button[data-action=cancel]")).to_have_text("Cancel")

        questions: list[str] = []

        def dismiss(dialog) -> None:
            questions.append(dialog.message)
            dialog.dismiss()

        page.once("dialog", dismiss)
        row.locator("button[data-action=cancel]").click()
        page.wait_for_timeout(300)
        assert questions == [
            "Cancel job order-7? Its perform is told to stop, and what is queued of it is deleted."
        ]
        assert not redis_client.exists("test:stopped")  # dismissed: nothing happened

        page.once("dialog", lambda dialog: dialog.accept())
        row.locator("button[data-action=cancel]").click()
        expect(page.locator("#action-message")).to_have_text(
            "Job order-7 cancelled: its perform was told to stop."
        )
        expect(page.locator('tr[data-id="order-7"]')).to_have_count(0)
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "busy-after-cancel.png"), full_page=True)

        stopped = eventually(lambda: redis_client.lrange("test:stopped", 0, -1))
        assert json.loads(stopped[0])["cancelled"] == ["order-7"]
        eventually(lambda: Long.metrics()["cancelled"] == 1)
        assert (Long.metrics()["busy"], Long.metrics()["failed"]) == (0, 0)
    finally:
        process.close()
