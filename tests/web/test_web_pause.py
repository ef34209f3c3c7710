"""Pausing and resuming a worker from the dashboard: the state shown, CSRF, read-only."""

from __future__ import annotations

from web_support import MailWorker, OrderWorker, post

from lowkiq_web import create_app


def test_pause_and_resume_from_the_worker_page(client):
    page = client.get("/OrderWorker/enqueued").get_data(as_text=True)
    assert 'data-action="pause"' in page and "data-worker-paused" not in page

    response = post(client, "/OrderWorker/pause")
    html = response.get_data(as_text=True)
    assert response.status_code == 200
    assert 'id="pause"' in html and "data-worker-paused" in html and 'data-action="resume"' in html
    assert OrderWorker.paused() and not MailWorker.paused()

    dashboard = client.get("/").get_data(as_text=True)
    order_row = dashboard.split('data-worker="OrderWorker"')[1].split("</tr>")[0]
    mail_row = dashboard.split('data-worker="MailWorker"')[1].split("</tr>")[0]
    assert "paused" in order_row and "paused" not in mail_row
    for page_url in ("/OrderWorker/dead", "/OrderWorker/busy", "/OrderWorker/job?id=x"):
        assert "data-worker-paused" in client.get(page_url).get_data(as_text=True)

    OrderWorker.perform_async([{"id": 1}])  # enqueueing goes on
    assert OrderWorker.metrics()["length"] == 1

    response = post(client, "/OrderWorker/resume")
    assert 'data-action="pause"' in response.get_data(as_text=True)
    assert not OrderWorker.paused()
    assert "data-worker-paused" not in client.get("/").get_data(as_text=True)


def test_a_plain_form_post_redirects_to_the_worker_page(client):
    response = post(client, "/MailWorker/pause", htmx=False)
    assert response.status_code == 303
    assert response.headers["Location"].endswith("/MailWorker/enqueued")
    assert MailWorker.paused()


def test_pause_needs_the_csrf_token_and_a_known_worker(client):
    assert post(client, "/OrderWorker/pause", token="").status_code == 403
    assert post(client, "/OrderWorker/pause", token="x" * 43).status_code == 403
    assert not OrderWorker.paused()
    assert post(client, "/Nope/pause").status_code == 404
    assert client.get("/OrderWorker/pause").status_code == 405


def test_read_only_hides_the_button_and_refuses_the_post(workers):
    OrderWorker.pause()
    client = create_app(read_only=True).test_client()
    page = client.get("/OrderWorker/enqueued").get_data(as_text=True)
    assert "data-worker-paused" in page  # the state is still shown
    assert 'data-action="resume"' not in page and 'data-action="pause"' not in page
    response = post(client, "/OrderWorker/resume")
    assert response.status_code == 403 and "read-only" in response.get_data(as_text=True)
    assert OrderWorker.paused()
