"""Find searches every worker for a job id; a path the dashboard does not have is its own
styled 404 page (under a prefix, and in the standalone app)."""

from __future__ import annotations

import re
from html import unescape

import pytest
from flask import Flask
from web_support import MailWorker, OrderWorker, bury, enqueue, hold

from lowkiq_web import create_app, lowkiq_web


def test_find_goes_to_the_job_in_whichever_worker_has_it(client):
    enqueue(MailWorker, 1, prefix="mail-")
    bury(OrderWorker, 1)
    response = client.get("/find", query_string={"id": "mail-0000"})
    assert response.status_code == 302
    assert response.headers["Location"] == "/MailWorker/job?id=mail-0000"
    dead = client.get("/find", query_string={"id": "d0000"})
    assert dead.headers["Location"] == "/OrderWorker/job?id=d0000"


def test_find_a_busy_job(client):
    enqueue(MailWorker, 1, prefix="b", perform_in=1_000_000_000.0)
    hold(MailWorker)
    response = client.get("/find", query_string={"id": "b0000"})
    assert response.headers["Location"] == "/MailWorker/job?id=b0000"


def test_find_lists_every_worker_with_the_id(client):
    enqueue(MailWorker, 1)
    enqueue(OrderWorker, 1)
    html = client.get("/find", query_string={"id": "j0000"}).get_data(as_text=True)
    assert re.findall(r'<li><a href="/(\w+)/job\?id=j0000">', html) == [
        "OrderWorker",
        "MailWorker",
    ]


def test_find_says_which_workers_it_searched(client):
    response = client.get("/find", query_string={"id": "nope"})
    assert response.status_code == 404
    text = " ".join(response.get_data(as_text=True).split())
    assert "No worker has a job <code>nope</code>" in text
    assert "Searched 2 workers: OrderWorker, MailWorker." in text


def test_find_without_an_id_is_a_400(client):
    assert client.get("/find").status_code == 400


def test_every_page_has_the_find_form(client):
    for url in ("/", "/processes", "/OrderWorker/dead"):
        html = client.get(url).get_data(as_text=True)
        assert '<form class="find" method="get" action="/find">' in html, url


def _is_dashboard_404(response) -> bool:
    html = response.get_data(as_text=True)
    return (
        response.status_code == 404
        and "lowkiq.css" in html
        and "404 · Not Found" in html
        and "Back to the dashboard" in html
    )


@pytest.mark.parametrize("path", ["/OrderWorker", "/nope/a/b/c", "/OrderWorker/nope"])
def test_an_unknown_path_of_the_standalone_app_is_a_styled_404(client, path):
    assert _is_dashboard_404(client.get(path))


def test_a_path_naming_a_worker_points_to_its_lists(client):
    html = unescape(client.get("/OrderWorker").get_data(as_text=True))
    assert "The dashboard has no page at /OrderWorker. OrderWorker's jobs: " in html
    assert "/OrderWorker/enqueued." in html


def test_an_unknown_path_under_a_prefix_is_a_styled_404(workers):
    host = Flask("host")
    host.register_blueprint(lowkiq_web, url_prefix="/lowkiq")
    client = host.test_client()
    assert _is_dashboard_404(client.get("/lowkiq/OrderWorker"))
    assert client.get("/lowkiq/OrderWorker/enqueued").status_code == 200
    assert client.get("/elsewhere").status_code == 404  # the host's own 404, untouched
    assert not _is_dashboard_404(client.get("/elsewhere"))


def test_at_the_root_of_a_host_app_its_own_404_is_left_alone(workers):
    host = Flask("host")
    host.register_blueprint(lowkiq_web)
    response = host.test_client().get("/elsewhere")
    assert response.status_code == 404 and not _is_dashboard_404(response)


def test_a_prefixed_standalone_app_routes_and_404s(workers):
    client = create_app(url_prefix="/lowkiq").test_client()
    assert _is_dashboard_404(client.get("/lowkiq/OrderWorker"))
    assert client.get("/lowkiq/find", query_string={"id": "x"}).status_code == 404


def test_a_get_of_an_action_stays_a_405(client):
    assert client.get("/OrderWorker/pause").status_code == 405
    assert client.get("/OrderWorker/dead/delete_all").status_code == 405
