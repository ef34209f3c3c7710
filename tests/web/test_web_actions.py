"""Actions: each one's effect and its fragment; plain form POSTs are redirected back."""

from __future__ import annotations

import re

from web_support import LONG_AGO, MailWorker, OrderWorker, bury, enqueue, fail_all, post

from tests.both_redis import server_or_cluster_client  # noqa: F401  (redis_client)


def test_queue_up_one_dead_job_removes_its_row_and_updates_counts(client):
    ids = bury(OrderWorker, 3)
    response = post(client, "/OrderWorker/dead/job/queue_up", {"id": ids[0]})
    assert response.status_code == 200
    html = response.get_data(as_text=True)
    assert "<tr" not in html  # the row is swapped for nothing
    assert 'id="counts" class="counts" hx-swap-oob="true"' in html
    assert 'data-count="morgue_length">2<' in html and 'data-count="length">1<' in html
    assert OrderWorker.queries().fetch([ids[0]])[0]["retry_count"] == -1
    assert OrderWorker.metrics()["morgue_length"] == 2


def test_delete_one_dead_job(client):
    ids = bury(OrderWorker, 2)
    response = post(client, "/OrderWorker/dead/job/delete", {"id": ids[1]})
    assert response.status_code == 200
    assert [job["id"] for job in OrderWorker.queries().morgue_fetch(ids)] == [ids[0]]
    assert OrderWorker.metrics()["length"] == 0


def test_queue_up_all_and_delete_all_dead(client):
    bury(OrderWorker, 4)
    response = post(client, "/OrderWorker/dead/queue_up_all", {"by": "id", "dir": "asc"})
    html = response.get_data(as_text=True)
    assert response.status_code == 200 and "4 jobs queued up." in html
    assert '<section id="jobs"' in html and 'hx-swap-oob="true"' in html
    assert OrderWorker.metrics()["length"] == 4
    bury(MailWorker, 3)
    response = post(client, "/MailWorker/dead/delete_all")
    assert "3 jobs deleted." in response.get_data(as_text=True)
    assert MailWorker.metrics()["morgue_length"] == 0


def test_enqueued_bulk_actions(client):
    enqueue(OrderWorker, 5)
    response = post(client, "/OrderWorker/enqueued/perform_all_now")
    assert "5 jobs made due now." in response.get_data(as_text=True)
    assert OrderWorker.metrics()["lag"] >= 0
    fail_all(OrderWorker)  # all 5 now have retry_count 0
    enqueue(OrderWorker, 2, prefix="n")
    response = post(client, "/OrderWorker/enqueued/kill_all_failed")
    assert "5 jobs moved to the morgue." in response.get_data(as_text=True)
    assert OrderWorker.metrics()["morgue_length"] == 5
    post(client, "/OrderWorker/dead/queue_up_all")
    fail_all(OrderWorker)
    response = post(client, "/OrderWorker/enqueued/delete_all_failed")
    assert re.search(r"\d+ jobs? deleted\.", response.get_data(as_text=True))
    assert OrderWorker.metrics()["retries"] == 0


def test_plain_form_posts_redirect_back_to_the_list(client):
    ids = bury(OrderWorker, 1)
    response = post(client, "/OrderWorker/dead/job/delete", {"id": ids[0], "by": "id"}, htmx=False)
    assert response.status_code == 303
    assert response.headers["Location"].endswith("/OrderWorker/dead?by=id")
    response = post(client, "/OrderWorker/enqueued/perform_all_now", htmx=False)
    assert response.status_code == 303


def test_actions_are_post_only(client):
    assert client.get("/OrderWorker/dead/delete_all").status_code == 405
    assert client.get("/OrderWorker/dead/job/delete?id=x").status_code == 405


def test_unknown_action_is_404(client):
    assert post(client, "/OrderWorker/dead/perform_all_now").status_code == 404
    assert post(client, "/OrderWorker/dead/job/explode", {"id": "1"}).status_code == 404


def test_read_only_refuses_every_action(workers):
    from lowkiq_web import create_app

    ids = bury(OrderWorker, 1)
    client = create_app(read_only=True).test_client()
    for url, data in (
        ("/OrderWorker/dead/job/delete", {"id": ids[0]}),
        ("/OrderWorker/dead/delete_all", {}),
        ("/OrderWorker/enqueued/perform_all_now", {}),
    ):
        response = post(client, url, data)
        assert response.status_code == 403 and "read-only" in response.get_data(as_text=True)
    assert OrderWorker.metrics()["morgue_length"] == 1


def test_orphaned_batches_are_put_back_from_the_busy_page(client):
    from lowkiq.ownership import leases

    enqueue(OrderWorker, 3, perform_in=LONG_AGO)
    queue = OrderWorker.queue()
    busy = 0
    for shard in queue.shards:  # a process took a batch of each shard, then died
        lease, _, _ = leases.acquire(queue, shard, "dead-process", 10)
        busy += len(queue.pop(shard, lease.token, 10).jobs)
        queue.client.delete(queue.keys.lease(shard))
    assert busy == 3 and OrderWorker.metrics()["busy"] == 3
    assert "Put back orphaned batches" in client.get("/OrderWorker/busy").get_data(as_text=True)
    response = post(client, "/OrderWorker/busy/restore_orphaned")
    assert "3 jobs put back into the queue." in response.get_data(as_text=True)
    assert (OrderWorker.metrics()["busy"], OrderWorker.metrics()["length"]) == (0, 3)
