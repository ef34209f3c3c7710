"""The Move action (issue 30): the checked jobs of the Enqueued, Retries or Scheduled list,
or the job page's job, moved to another worker's queue (``Actions.move``); a bad target is
a 400 that changes nothing, an unknown worker a 404."""

from __future__ import annotations

import re

import pytest
from web_support import LONG_AGO, MailWorker, OrderWorker, bury, enqueue, fail_all, post

import lowkiq
from lowkiq_web import create_app
from tests.both_redis import server_or_cluster_client  # noqa: F401  (redis_client)


def ids_on(html: str) -> list[str]:
    return re.findall(r'<tr class="job" data-id="([^"]*)"', html)


class ReportWorker(lowkiq.Worker):
    """A third worker."""


@pytest.fixture
def jobs(workers):
    """OrderWorker: retries r0000-r0001 (due in an hour), fresh jobs j0000-j0003 (due in an
    hour), dead d0000."""
    enqueue(OrderWorker, 2, prefix="r", perform_in=LONG_AGO)
    fail_all(OrderWorker)
    bury(OrderWorker, 1)
    enqueue(OrderWorker, 4)
    return OrderWorker


def queued_ids(worker: type[lowkiq.Worker]) -> list[str]:
    return sorted(job["id"] for job in worker.queries().range_by_id("-", "+", 100))


@pytest.mark.parametrize("kind", ["enqueued", "retries", "scheduled"])
def test_move_checked_jobs_of_a_list_to_another_worker(client, jobs, kind):
    response = post(
        client, f"/OrderWorker/{kind}/selected/move", {"id": ["r0000", "j0001"], "to": "MailWorker"}
    )
    assert response.status_code == 200
    html = response.get_data(as_text=True)
    assert ">2 jobs moved to MailWorker.</p>" in html
    assert "r0000" not in ids_on(html) and "j0001" not in ids_on(html)
    assert queued_ids(MailWorker) == ["j0001", "r0000"]
    assert queued_ids(OrderWorker) == ["j0000", "j0002", "j0003", "r0001"]
    moved = {job["id"]: job for job in MailWorker.queries().fetch(["r0000", "j0001"])}
    assert moved["r0000"]["retry_count"] == -1 and moved["r0000"]["error"]  # the error stays
    assert moved["j0001"]["payloads"][0][0] == {"n": 1}


def test_move_without_htmx_redirects_to_the_list(client, jobs):
    response = post(
        client,
        "/OrderWorker/retries/selected/move",
        {"id": "r0001", "to": "MailWorker", "by": "id", "dir": "desc"},
        htmx=False,
    )
    assert response.status_code == 303
    assert response.headers["Location"] == "/OrderWorker/retries?by=id&dir=desc"
    assert queued_ids(MailWorker) == ["r0001"]


def test_move_from_the_job_page_shows_the_job_in_its_new_worker(client, jobs):
    page = client.get("/OrderWorker/job?id=j0002").get_data(as_text=True)
    form = re.search(
        r'<form method="post" action="/OrderWorker/enqueued/selected/move".*?</form>', page, re.S
    )
    assert form, "the job page has a Move form"
    assert re.findall(r'<option value="([^"]+)">', form.group(0)) == ["MailWorker"]
    assert 'name="back" value="job"' in form.group(0)
    data = {"id": "j0002", "to": "MailWorker", "back": "job"}
    response = post(client, "/OrderWorker/enqueued/selected/move", data)
    assert response.headers["HX-Redirect"] == "/MailWorker/job?id=j0002"
    assert "j0002" not in queued_ids(OrderWorker) and queued_ids(MailWorker) == ["j0002"]
    data["id"] = "j0003"
    plain = post(client, "/OrderWorker/enqueued/selected/move", data, htmx=False)
    assert plain.status_code == 303 and plain.headers["Location"] == "/MailWorker/job?id=j0003"
    shown = client.get("/MailWorker/job?id=j0003").get_data(as_text=True)
    assert 'data-place="enqueued"' in shown
    # A dead job has no Move (Actions.move moves queued jobs).
    dead = client.get("/OrderWorker/job?id=d0000").get_data(as_text=True)
    assert "/selected/move" not in dead


@pytest.mark.parametrize(
    ("url", "data", "status", "message"),
    [
        ("/OrderWorker/enqueued/selected/move", {"id": "j0000"}, 400, "to is required"),
        ("/OrderWorker/enqueued/selected/move", {"id": "j0000", "to": ""}, 400, "to is required"),
        (
            "/OrderWorker/enqueued/selected/move",
            {"id": "j0000", "to": "OrderWorker"},
            400,
            "to must be another worker than OrderWorker, got &#39;OrderWorker&#39;",
        ),
        (
            "/OrderWorker/enqueued/selected/move",
            {"id": "j0000", "to": "NoSuchWorker"},
            400,
            "to must be another worker of lowkiq.settings.workers",
        ),
        ("/OrderWorker/retries/selected/move", {"to": "MailWorker"}, 400, "check at least one job"),
        (
            "/OrderWorker/enqueued/selected/move",
            {"id": "a\0b", "to": "MailWorker"},
            400,
            "without NUL",
        ),
        (
            "/OrderWorker/enqueued/selected/move",
            {"id": ["j0000", "j0001"], "to": "MailWorker", "back": "job"},
            400,
            "back=job moves one job",
        ),
        (
            "/OrderWorker/enqueued/selected/move",
            {"id": "j0000", "to": "MailWorker", "by": "nope"},
            400,
            "by must be one of",
        ),
        (
            "/NoSuchWorker/enqueued/selected/move",
            {"id": "j0000", "to": "MailWorker"},
            404,
            "no worker",
        ),
        (
            "/OrderWorker/dead/selected/move",
            {"id": "d0000", "to": "MailWorker"},
            404,
            "no action &#39;move&#39;",
        ),
    ],
)
def test_bad_moves_change_nothing(client, jobs, url, data, status, message):
    before = queued_ids(OrderWorker), queued_ids(MailWorker), OrderWorker.metrics()
    response = post(client, url, data)
    assert response.status_code == status
    assert message in response.get_data(as_text=True)
    assert (queued_ids(OrderWorker), queued_ids(MailWorker), OrderWorker.metrics()) == before


def test_the_lists_offer_move_to_every_other_registered_worker(client, jobs):
    lowkiq.settings.workers = [OrderWorker, MailWorker, ReportWorker]
    for kind in ("enqueued", "retries", "scheduled"):
        html = client.get(f"/OrderWorker/{kind}").get_data(as_text=True)
        form = re.search(r'<form id="checked".*?</form>', html, re.S).group(0)
        assert f'formaction="/OrderWorker/{kind}/selected/move" data-action="checked-move"' in form
        assert re.findall(r'<option value="([^"]+)">', form) == ["MailWorker", "ReportWorker"]
    enqueue(MailWorker, 1, prefix="m")
    mail = client.get("/MailWorker/enqueued").get_data(as_text=True)
    options = re.findall(r'<option value="([^"]+)">', mail.split('id="checked"')[1])
    assert options == ["OrderWorker", "ReportWorker"]
    assert "/selected/move" not in client.get("/OrderWorker/dead").get_data(as_text=True)
    moved = post(
        client, "/OrderWorker/enqueued/selected/move", {"id": "j0000", "to": "ReportWorker"}
    )
    assert moved.status_code == 200 and queued_ids(ReportWorker) == ["j0000"]
    # A worker no longer registered is no target; alone, a worker offers no Move.
    lowkiq.settings.workers = [OrderWorker]
    refused = post(
        client, "/OrderWorker/enqueued/selected/move", {"id": "j0001", "to": "MailWorker"}
    )
    assert refused.status_code == 400 and "j0001" in queued_ids(OrderWorker)
    assert "/selected/move" not in client.get("/OrderWorker/enqueued").get_data(as_text=True)


def test_read_only_hides_and_refuses_move(workers):
    enqueue(OrderWorker, 1)
    app = create_app(read_only=True)
    app.testing = True
    client = app.test_client()
    assert "/selected/move" not in client.get("/OrderWorker/enqueued").get_data(as_text=True)
    assert "/selected/move" not in client.get("/OrderWorker/job?id=j0000").get_data(as_text=True)
    response = post(
        client, "/OrderWorker/enqueued/selected/move", {"id": "j0000", "to": "MailWorker"}
    )
    assert response.status_code == 403 and queued_ids(MailWorker) == []
