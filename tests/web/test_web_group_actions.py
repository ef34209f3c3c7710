"""The groups table's actions on the dashboard: pause, resume, delete a group's queued jobs,
set and clear its own cap and rate (CSRF-checked; a bad value is a 400 with its message
and an unknown group a 404, both changing nothing; hidden and refused read-only)."""

from __future__ import annotations

import pytest
from web_support import OrderWorker, enqueue, post

import lowkiq
from lowkiq.storage.group_limits import limits_key
from lowkiq_web import create_app


@pytest.fixture
def tenants(workers):
    enqueue(OrderWorker, 5, prefix="a", group="acme")
    enqueue(OrderWorker, 2, prefix="g", group="globex")
    enqueue(OrderWorker, 3, prefix="x")
    return OrderWorker


def stored(redis_client):
    return redis_client.hgetall(limits_key(OrderWorker.queue().keys))


def row(html: str, group: str) -> str:
    return html.split(f'<tr class="group" data-group="{group}">')[1].split("</tr>")[0]


def test_the_table_has_each_named_groups_buttons(client, tenants):
    html = client.get("/OrderWorker/enqueued").get_data(as_text=True)
    assert 'data-action="pause-group"' in row(html, "acme")
    assert 'data-action="delete-group"' in row(html, "acme")
    assert 'name="concurrency"' in row(html, "globex")
    assert "data-action" not in row(html, "")  # the default group has none


def test_pause_and_resume_a_group(client, tenants):
    response = post(client, "/OrderWorker/groups/pause", {"group": "acme"})
    assert response.status_code == 200
    html = response.get_data(as_text=True)
    assert "Group acme paused." in html
    assert "data-group-paused" in row(html, "acme")
    assert 'data-action="resume-group"' in row(html, "acme")
    assert "data-group-paused" not in row(html, "globex")
    assert OrderWorker.actions().group_state("acme").paused
    html = post(client, "/OrderWorker/groups/resume", {"group": "acme"}).get_data(as_text=True)
    assert "Group acme resumed." in html and "data-group-paused" not in row(html, "acme")
    assert not OrderWorker.actions().group_state("acme").paused


def test_delete_a_groups_queued_jobs(client, tenants):
    html = post(client, "/OrderWorker/groups/delete", {"group": "acme"}).get_data(as_text=True)
    assert "5 queued jobs of group acme deleted." in html
    assert 'data-group="acme"' not in html
    assert OrderWorker.metrics()["length"] == 5


def test_set_and_clear_a_groups_limits(client, tenants):
    html = post(
        client,
        "/OrderWorker/groups/limits",
        {"group": "acme", "concurrency": "2", "rate": "10/s", "burst": "4"},
    ).get_data(as_text=True)
    assert "≤ 2 at once" in row(html, "acme") and "10/s (burst 4)" in row(html, "acme")
    state = OrderWorker.actions().group_state("acme")
    assert (state.concurrency, state.rate) == (2, lowkiq.RateLimit(10, burst=4))
    html = post(client, "/OrderWorker/groups/limits", {"group": "acme", "rate": "5/min"}).get_data(
        as_text=True
    )
    assert "≤ 2 at once" in row(html, "acme") and "5/min" in row(html, "acme")
    html = post(client, "/OrderWorker/groups/clear", {"group": "acme"}).get_data(as_text=True)
    assert "back to the worker&#39;s limits" in html
    assert OrderWorker.actions().group_settings() == {}


def test_a_plain_form_post_is_redirected_to_the_enqueued_page(client, tenants):
    response = post(client, "/OrderWorker/groups/pause", {"group": "acme"}, htmx=False)
    assert response.status_code == 303
    assert response.headers["Location"].endswith("/OrderWorker/enqueued")


@pytest.mark.parametrize(
    ("form", "message"),
    [
        ({"group": "acme", "concurrency": "0"}, "concurrency must be an integer &gt;= 1"),
        ({"group": "acme", "concurrency": "-3"}, "concurrency must be an integer &gt;= 1"),
        ({"group": "acme", "concurrency": "two"}, "concurrency must be an integer &gt;= 1"),
        ({"group": "acme", "rate": "fast"}, "a rate limit is jobs/period"),
        ({"group": "acme", "rate": "0/s"}, "RateLimit jobs must be a number &gt; 0"),
        ({"group": "acme", "rate": "10/s", "burst": "0"}, "burst must be an integer &gt;= 1"),
        ({"group": "acme", "burst": "3"}, "burst goes with a rate"),
        ({"group": "acme"}, "give a concurrency, a rate, or both"),
        ({"concurrency": "2"}, "group is required"),
    ],
)
def test_bad_limits_are_a_400_that_changes_nothing(client, tenants, redis_client, form, message):
    response = post(client, "/OrderWorker/groups/limits", form)
    assert response.status_code == 400
    assert message in response.get_data(as_text=True)
    assert stored(redis_client) == {}


@pytest.mark.parametrize("action", ["pause", "resume", "delete", "limits", "clear"])
def test_an_unknown_group_is_a_404_that_changes_nothing(client, tenants, redis_client, action):
    response = post(
        client, f"/OrderWorker/groups/{action}", {"group": "nobody", "concurrency": "2"}
    )
    assert response.status_code == 404
    assert "has no group &#39;nobody&#39;" in response.get_data(as_text=True)
    assert stored(redis_client) == {}
    assert OrderWorker.metrics()["length"] == 10


def test_an_unknown_action_is_a_404(client, tenants):
    assert post(client, "/OrderWorker/groups/explode", {"group": "acme"}).status_code == 404


def test_without_the_csrf_token_nothing_changes(client, tenants, redis_client):
    response = post(client, "/OrderWorker/groups/pause", {"group": "acme"}, token="forged")
    assert response.status_code in (400, 403)
    assert stored(redis_client) == {}


def test_read_only_hides_and_refuses_the_group_actions(workers, redis_client):
    enqueue(OrderWorker, 2, prefix="a", group="acme")
    client = create_app(read_only=True).test_client()
    html = client.get("/OrderWorker/enqueued").get_data(as_text=True)
    assert 'data-group="acme"' in html and "pause-group" not in html
    assert post(client, "/OrderWorker/groups/pause", {"group": "acme"}).status_code == 403
    assert stored(redis_client) == {}
