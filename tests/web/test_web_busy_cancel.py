"""The Busy page's Cancel button, through the Flask test client: each busy row has one
(not in read-only mode); its POST cancels the row's id (CSRF-checked like every action),
a bad id is a 400 and an unknown worker a 404, both changing nothing."""

from __future__ import annotations

from web_support import LONG_AGO, OrderWorker, enqueue, post

import lowkiq
from tests.leasing import pop


def popped(count: int) -> list[str]:
    """``count`` jobs of OrderWorker taken into processing areas (a batch running)."""
    ids = enqueue(OrderWorker, count, perform_in=LONG_AGO)
    queue = OrderWorker.queue()
    for shard in queue.shards:
        pop(queue, shard, 10)
    assert OrderWorker.metrics()["busy"] == count
    return ids


def cancels_announced() -> int:
    client = lowkiq.settings.client()
    return int(client.xlen("lowkiq:{lowkiq}:cancels"))


def test_every_busy_row_has_a_cancel_button(client):
    ids = popped(3)
    page = client.get("/OrderWorker/busy").get_data(as_text=True)
    assert page.count('data-action="cancel"') == 3
    for job_id in ids:
        assert f"Cancel job {job_id}?" in page


def test_cancel_asks_the_running_perform_to_stop_and_deletes_what_is_queued(client):
    ids = popped(2)
    enqueue(OrderWorker, 1, prefix=ids[0][:1], perform_in=LONG_AGO)  # queued behind it
    assert OrderWorker.metrics()["length"] == 1
    response = post(client, "/OrderWorker/busy/job/cancel", {"id": ids[0]})
    assert response.status_code == 200
    text = response.get_data(as_text=True)
    assert f"Job {ids[0]} cancelled: its perform was told to stop." in text
    assert OrderWorker.metrics()["length"] == 0
    assert cancels_announced() == 1
    gone = post(client, "/OrderWorker/busy/job/cancel", {"id": "nobody"})
    assert "Job nobody was neither running nor queued any more." in gone.get_data(as_text=True)
    plain = post(client, "/OrderWorker/busy/job/cancel", {"id": ids[1]}, htmx=False)
    assert plain.status_code == 303 and plain.headers["Location"].endswith("/OrderWorker/busy")


def test_bad_parameters_are_a_400_and_an_unknown_worker_a_404(client):
    popped(1)
    for data in ({}, {"id": ""}, {"id": "a\0b"}):
        response = post(client, "/OrderWorker/busy/job/cancel", data)
        assert response.status_code == 400, data
        assert "id is required" in response.get_data(as_text=True)
    assert post(client, "/Nope/busy/job/cancel", {"id": "j0000"}).status_code == 404
    assert cancels_announced() == 0


def test_cancel_without_the_token_or_from_another_origin_is_refused(client):
    ids = popped(1)
    assert post(client, "/OrderWorker/busy/job/cancel", {"id": ids[0]}, token="").status_code == 403
    other = post(client, "/OrderWorker/busy/job/cancel", {"id": ids[0]}, origin="https://x.example")
    assert other.status_code == 403
    assert cancels_announced() == 0


def test_read_only_dashboards_show_no_cancel_and_refuse_it(workers):
    from lowkiq_web import create_app

    ids = popped(1)
    client = create_app(read_only=True).test_client()
    assert 'data-action="cancel"' not in client.get("/OrderWorker/busy").get_data(as_text=True)
    assert post(client, "/OrderWorker/busy/job/cancel", {"id": ids[0]}).status_code == 403
    assert cancels_announced() == 0
