"""The Schedules page's run-time actions: pause, resume, change, add, remove, reset (POST,
CSRF-checked, refused read-only; the destructive ones confirmed); a bad value is a 400 with
its message and an unknown schedule a 404, and neither changes anything."""

from __future__ import annotations

from datetime import timedelta

import pytest
from web_support import MailWorker, OrderWorker, post

import lowkiq
from lowkiq.storage import schedules as store
from lowkiq_web import create_app


@pytest.fixture
def schedules(workers):
    lowkiq.settings.schedules = [
        lowkiq.Schedule(OrderWorker, id="digest", cron="0 7 * * *", timezone="Europe/Berlin"),
        lowkiq.Schedule(MailWorker, id="stock", every=timedelta(minutes=5)),
    ]
    return lowkiq.settings.schedules


#: The fields of an add of a one-minute schedule of MailWorker.
MAIL_60 = {"worker": "MailWorker", "every": "60"}


def row(html: str, name: str) -> str:
    return html.split(f'data-schedule="{name}"')[1].split("</tr>")[0]


def listed() -> dict[str, lowkiq.ScheduleInfo]:
    return {info.name: info for info in lowkiq.schedules()}


def version(client) -> int:
    return store.read_overrides(lowkiq.settings.client())[0]


def test_each_row_offers_its_actions_and_the_page_an_add_form(client, schedules):
    html = client.get("/schedules").get_data(as_text=True)
    digest = row(html, "digest")
    for action in ("run-now", "pause", "change", "remove"):
        assert f'data-action="{action}"' in digest
    assert 'data-action="reset"' not in digest  # nothing changed yet
    assert 'hx-confirm="Remove digest on every worker process?' in digest
    assert 'id="add-schedule"' in html and '<option value="MailWorker">' in html


def test_pause_and_resume(client, schedules):
    response = post(client, "/schedules/pause", {"id": "stock"})
    assert response.status_code == 200
    html = response.get_data(as_text=True)
    assert "stock: paused on every worker process." in html
    stock = row(html, "stock")
    assert 'data-state="paused"' in stock and "none: paused" in stock
    assert 'data-action="resume"' in stock and 'data-action="reset"' in stock
    assert listed()["stock"].paused
    response = post(client, "/schedules/resume", {"id": "stock"})
    assert 'data-state="active"' in row(response.get_data(as_text=True), "stock")
    assert not listed()["stock"].paused


def test_change_the_ticks(client, schedules):
    response = post(client, "/schedules/change", {"id": "stock", "every": "30s"})
    assert response.status_code == 200
    stock = row(response.get_data(as_text=True), "stock")
    assert "every 30 s" in stock and "data-changed" in stock
    assert '<td class="last-tick">never' in stock  # no tick of the new timing passed yet
    response = post(
        client, "/schedules/change", {"id": "digest", "cron": "15 6 * * *", "timezone": "UTC"}
    )
    assert "cron 15 6 * * * (UTC)" in row(response.get_data(as_text=True), "digest")
    assert listed()["stock"].every == timedelta(seconds=30)


def test_add_remove_and_reset(client, schedules):
    form = {"id": "nightly", "worker": "OrderWorker", "cron": "@daily", "payload": '{"n": 1}'}
    response = post(client, "/schedules/add", form)
    assert response.status_code == 200
    html = response.get_data(as_text=True)
    assert "nightly: added on OrderWorker." in html and 'data-source="added"' in row(
        html, "nightly"
    )
    assert listed()["nightly"].source == "added"

    response = post(client, "/schedules/remove", {"id": "nightly"})
    assert 'data-schedule="nightly"' not in response.get_data(as_text=True)
    response = post(client, "/schedules/remove", {"id": "digest"})
    digest = row(response.get_data(as_text=True), "digest")
    assert 'data-state="removed"' in digest and 'data-action="reset"' in digest
    assert 'data-action="run-now"' not in digest
    response = post(client, "/schedules/reset", {"id": "digest"})
    assert 'data-state="active"' in row(response.get_data(as_text=True), "digest")
    assert not listed()["digest"].removed

    plain = post(client, "/schedules/pause", {"id": "digest"}, htmx=False)
    assert plain.status_code == 303 and plain.headers["Location"].endswith("/schedules")


@pytest.mark.parametrize(
    ("url", "form", "message"),
    [
        ("/schedules/change", {"id": "digest", "cron": "0 0 30 2 *"}, "bad cron expression"),
        ("/schedules/change", {"id": "stock", "every": "0"}, "every must be a positive period"),
        ("/schedules/change", {"id": "stock", "every": "-1"}, "a period is a number"),
        ("/schedules/change", {"id": "stock"}, "give either a cron expression or a period"),
        ("/schedules/change", {"id": "stock", "cron": "@daily", "every": "60"}, "not both"),
        ("/schedules/add", {"id": "x", "worker": "Nobody", "every": "60"}, "unknown worker"),
        ("/schedules/add", {"id": "digest", **MAIL_60}, "exists already"),
        ("/schedules/add", {"id": "x", **MAIL_60, "payload": "{"}, "payload is not JSON"),
        ("/schedules/add", {"id": "x", "every": "60"}, "worker is required"),
        ("/schedules/add", {"id": "x", **MAIL_60, "catch_up": "x"}, "catch_up must be"),
        ("/schedules/pause", {}, "id is required"),
    ],
)  # fmt: skip
def test_a_bad_value_is_a_400_with_its_message_and_changes_nothing(
    client, schedules, url, form, message
):
    before = lowkiq.schedules()
    response = post(client, url, form)
    assert response.status_code == 400
    assert message in response.get_data(as_text=True)
    assert lowkiq.schedules() == before and version(client) == 0


@pytest.mark.parametrize(
    "url", ["/schedules/pause", "/schedules/resume", "/schedules/change", "/schedules/remove",
            "/schedules/reset", "/schedules/run"],
)  # fmt: skip
def test_an_unknown_schedule_is_a_404(client, schedules, url):
    response = post(client, url, {"id": "nope", "every": "60"})
    assert response.status_code == 404
    assert "no schedule named" in response.get_data(as_text=True)
    assert version(client) == 0


def test_csrf_and_read_only_refuse_every_action(client, schedules):
    for url in ("/schedules/pause", "/schedules/remove", "/schedules/add"):
        assert post(client, url, {"id": "digest"}, token="x" * 43).status_code == 403
        assert post(client, url, {"id": "digest"}, origin="http://evil").status_code == 403
    read_only = create_app(read_only=True).test_client()
    html = read_only.get("/schedules").get_data(as_text=True)
    assert 'data-action="pause"' not in html and 'id="add-schedule"' not in html
    assert post(read_only, "/schedules/pause", {"id": "digest"}).status_code == 403
    assert version(client) == 0 and not listed()["digest"].paused
