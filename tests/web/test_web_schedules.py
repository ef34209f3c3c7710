"""The Schedules page: each schedule's ticks and last job, its worker paused or not, and
"run now" (confirmed, CSRF-checked, hidden and refused read-only)."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from web_support import MailWorker, OrderWorker, post

import lowkiq
from lowkiq.storage import schedules as store
from lowkiq_web import create_app


@pytest.fixture
def schedules(workers):
    lowkiq.settings.schedules = [
        lowkiq.Schedule(
            OrderWorker, id="digest", cron="0 7 * * *", timezone="Europe/Berlin", payload={"d": 1}
        ),
        lowkiq.Schedule(MailWorker, id="stock", every=timedelta(minutes=5), catch_up="none"),
    ]
    return lowkiq.settings.schedules


def row(html: str, schedule_id: str) -> str:
    return html.split(f'data-schedule="{schedule_id}"')[1].split("</tr>")[0]


def test_the_page_lists_every_schedule_with_its_ticks_and_last_job(client, schedules):
    queue = OrderWorker.queue()
    seconds, _ = queue.client.time()
    tick = (seconds - 120) * 1000
    store.pass_ticks(queue, "digest", None, tick, [(tick, b'{"d":1}')], by="host-a:42")
    html = client.get("/schedules").get_data(as_text=True)
    assert 'href="/schedules" aria-current="page">Schedules</a>' in html
    digest = row(html, "digest")
    assert "cron 0 7 * * * (Europe/Berlin)" in digest and "catch-up: last" in digest
    # (2 minutes ago, and the seconds a loaded host took to render the page)
    assert re.search(r">2m( \d+s)? ago<", digest.split('class="last-tick"')[1])
    assert 'href="/OrderWorker/job?id=digest"' in digest and ">queued<" in digest
    assert '<code class="by">host-a:42</code>' in digest
    stock = row(html, "stock")
    assert "every 5 min" in stock and "catch-up: none (missed ticks: skipped, no job)" in stock
    assert ">never<" in stock and "none yet" in stock and "not queued" in stock
    assert 'data-action="run-now"' in stock and "hx-confirm=" in stock


def test_the_page_shows_a_paused_worker(client, schedules):
    MailWorker.pause()
    html = client.get("/schedules").get_data(as_text=True)
    assert "worker paused" in row(html, "stock") and "worker paused" not in row(html, "digest")


def test_run_now_enqueues_the_job_and_leaves_the_ticks_alone(client, schedules):
    response = post(client, "/schedules/run", {"id": "digest"})
    assert response.status_code == 200
    html = response.get_data(as_text=True)
    assert "digest: job enqueued." in html and 'id="schedules"' in html
    [job] = OrderWorker.queries().fetch(["digest"])
    assert [payload for payload, _ in job["payloads"]] == [{"d": 1}]
    state = store.read_state(OrderWorker.queue(), "digest")
    assert state.last is None and state.run_now_at is not None
    assert [(entry.kind, entry.by) for entry in state.log] == [("now", "dashboard")]
    plain = post(client, "/schedules/run", {"id": "stock"}, htmx=False)
    assert plain.status_code == 303 and plain.headers["Location"].endswith("/schedules")
    assert MailWorker.metrics()["length"] == 1


def test_bad_run_now_requests_are_refused_and_change_nothing(client, schedules):
    assert post(client, "/schedules/run", {"id": "nope"}).status_code == 404
    assert post(client, "/schedules/run", {}).status_code == 400
    assert post(client, "/schedules/run", {"id": "digest"}, token="x" * 43).status_code == 403
    assert post(client, "/schedules/run", {"id": "digest"}, origin="http://evil").status_code == 403
    assert client.get("/schedules?interval=7").status_code == 400
    assert OrderWorker.metrics()["length"] == 0


def test_read_only_hides_and_refuses_run_now(schedules):
    read_only = create_app(read_only=True).test_client()
    html = read_only.get("/schedules").get_data(as_text=True)
    assert 'data-schedule="digest"' in html and "run-now" not in html
    assert post(read_only, "/schedules/run", {"id": "digest"}).status_code == 403
    assert OrderWorker.metrics()["length"] == 0


def test_no_schedules_says_how_to_declare_them(client):
    html = client.get("/schedules").get_data(as_text=True)
    assert "No schedules" in html and "lowkiq.settings.schedules" in html


def test_in_a_browser_run_now_asks_first_then_enqueues(page, live_server, schedules):
    expect = pytest.importorskip("playwright.sync_api").expect
    page.goto(live_server + "/schedules")
    digest = page.locator('tr.schedule[data-schedule="digest"]')
    questions: list[str] = []

    def refuse(dialog) -> None:
        questions.append(dialog.message)
        dialog.dismiss()

    page.once("dialog", refuse)
    digest.locator("button[data-action=run-now]").click()
    page.wait_for_timeout(300)
    assert questions and questions[0].startswith("Run digest now?")
    assert OrderWorker.metrics()["length"] == 0

    page.once("dialog", lambda dialog: dialog.accept())
    digest.locator("button[data-action=run-now]").click()
    expect(page.locator("#schedules .notice")).to_have_text("digest: job enqueued.")
    expect(digest.locator(".enqueued")).to_contain_text("run now")
    assert [job["id"] for job in OrderWorker.queries().fetch(["digest"])] == ["digest"]
