"""The Retries and Scheduled lists, search by a part of an id, and the actions on checked
rows, on one row, on the job page and on whole lists: effects, fragments, questions with
counts; every new form refuses bad input with a 400 that changes nothing, every POST (Move
included) needs the CSRF token."""

from __future__ import annotations

import re
import time

import pytest
from web_support import LONG_AGO, MailWorker, OrderWorker, bury, enqueue, fail_all, hold, post

from tests.both_redis import server_or_cluster_client  # noqa: F401  (redis_client)


def ids_on(html: str) -> list[str]:
    """The job ids of a list page, in order."""
    return re.findall(r'<tr class="job" data-id="([^"]*)"', html)


@pytest.fixture
def mixed(workers):
    """OrderWorker: retries r0000-r0003 (due in an hour), fresh due jobs n0000-n0002, fresh
    jobs due in an hour j0000-j0004, dead d0000-d0001."""
    enqueue(OrderWorker, 4, prefix="r", perform_in=LONG_AGO)
    fail_all(OrderWorker)
    bury(OrderWorker, 2)
    enqueue(OrderWorker, 3, prefix="n", perform_in=LONG_AGO)
    enqueue(OrderWorker, 5)
    return OrderWorker


def state() -> tuple[int, int, int, int]:
    """OrderWorker's length, retries, dead and scheduled: what an action would change."""
    metrics = OrderWorker.metrics()
    scheduled = OrderWorker.queries().scheduled_count()
    return metrics["length"], metrics["retries"], metrics["morgue_length"], scheduled


def test_retries_list_shows_only_failed_jobs(client, mixed):
    html = client.get("/OrderWorker/retries").get_data(as_text=True)
    assert ids_on(html) == ["r0000", "r0001", "r0002", "r0003"]
    assert "<h1>OrderWorker · Retries</h1>" in html
    by_id = client.get("/OrderWorker/retries?by=id&dir=desc&per=25").get_data(as_text=True)
    assert ids_on(by_id) == ["r0003", "r0002", "r0001", "r0000"]
    below_zero = client.get("/OrderWorker/retries?by=retry_count&from=-1").get_data(as_text=True)
    assert ids_on(below_zero) == ids_on(html)  # a start below 0 starts at the retries


def test_scheduled_list_shows_jobs_not_yet_due_soonest_first(client, mixed):
    enqueue(OrderWorker, 1, prefix="soon", perform_in=time.time() + 60)
    html = client.get("/OrderWorker/scheduled").get_data(as_text=True)
    listed = ids_on(html)
    assert listed[0] == "soon0000"
    assert sorted(listed) == sorted(
        ["soon0000", *(f"j{n:04d}" for n in range(5)), *(f"r{n:04d}" for n in range(4))]
    )
    assert 'data-count="scheduled">10<' in html
    desc = client.get("/OrderWorker/scheduled?dir=desc").get_data(as_text=True)
    assert ids_on(desc)[-1] == "soon0000" and len(ids_on(desc)) == 10
    paged = client.get("/OrderWorker/scheduled?per=25&from=0").get_data(as_text=True)
    assert len(ids_on(paged)) == 10  # a start in the past starts at now


def test_scheduled_list_pages_through_a_tie(client, workers):
    enqueue(OrderWorker, 60)  # all at one perform_in
    first = client.get("/OrderWorker/scheduled").get_data(as_text=True)
    after = re.search(r'rel="next" href="([^"]+)"', first).group(1).replace("&amp;", "&")
    second = client.get(after).get_data(as_text=True)
    assert ids_on(first) + ids_on(second)[:25] == [f"j{n:04d}" for n in range(50)]


def test_counts_link_to_the_new_lists(client, mixed):
    html = client.get("/OrderWorker/enqueued").get_data(as_text=True)
    assert 'href="/OrderWorker/retries"' in html and 'href="/OrderWorker/scheduled"' in html
    job = client.get("/OrderWorker/job?id=r0001").get_data(as_text=True)
    assert 'data-count="scheduled">9<' in job


def test_search_by_id_prefix(client, mixed):
    enqueue(OrderWorker, 3, prefix="r1")
    html = client.get("/OrderWorker/enqueued?prefix=r1").get_data(as_text=True)
    assert ids_on(html) == ["r10000", "r10001", "r10002"]
    assert 'name="prefix" value="r1"' in html
    desc = client.get("/OrderWorker/enqueued?prefix=r&dir=desc&per=25").get_data(as_text=True)
    assert ids_on(desc)[:2] == ["r10002", "r10001"] and len(ids_on(desc)) == 7
    retries = client.get("/OrderWorker/retries?prefix=r000").get_data(as_text=True)
    assert ids_on(retries) == ["r0000", "r0001", "r0002", "r0003"]
    dead = client.get("/OrderWorker/dead?prefix=d0001").get_data(as_text=True)
    assert ids_on(dead) == ["d0001"]
    hold(OrderWorker, OrderWorker.queue().shard_of("n0001"))
    busy = client.get("/OrderWorker/busy?prefix=n0001").get_data(as_text=True)
    assert ids_on(busy) == ["n0001"]
    nothing = client.get("/OrderWorker/enqueued?prefix=zz").get_data(as_text=True)
    assert ids_on(nothing) == []


def test_search_finds_a_part_of_an_id_on_every_list(client, mixed):
    """Users type part of an order number: the ids containing it are listed, by id."""
    enqueue(OrderWorker, 2, prefix="order-4711-")
    enqueue(OrderWorker, 1, prefix="x-4711")
    enqueue(OrderWorker, 1, prefix="4711-", perform_in=time.time() + 60)
    html = client.get("/OrderWorker/enqueued?prefix=4711").get_data(as_text=True)
    assert ids_on(html) == ["4711-0000", "order-4711-0000", "order-4711-0001", "x-47110000"]
    assert 'name="prefix" value="4711"' in html
    desc = client.get("/OrderWorker/enqueued?prefix=4711&dir=desc").get_data(as_text=True)
    assert ids_on(desc) == ids_on(html)[::-1]
    start = client.get("/OrderWorker/enqueued?prefix=4711&from=o").get_data(as_text=True)
    assert ids_on(start) == ["order-4711-0000", "order-4711-0001", "x-47110000"]
    scheduled = client.get("/OrderWorker/scheduled?prefix=0001").get_data(as_text=True)
    assert ids_on(scheduled) == ["j0001", "order-4711-0001", "r0001"]  # not n0001: it is due
    assert 'name="prefix" value="0001"' in scheduled
    retries = client.get("/OrderWorker/retries?prefix=002").get_data(as_text=True)
    assert ids_on(retries) == ["r0002"]
    dead = client.get("/OrderWorker/dead?prefix=0001").get_data(as_text=True)
    assert ids_on(dead) == ["d0001"]
    hold(OrderWorker, OrderWorker.queue().shard_of("n0002"))
    busy = client.get("/OrderWorker/busy?prefix=002").get_data(as_text=True)
    assert ids_on(busy) == ["n0002"]
    spaced = client.get("/OrderWorker/scheduled?prefix=+4711+").get_data(as_text=True)
    assert ids_on(spaced) == ["4711-0000", "order-4711-0000", "order-4711-0001", "x-47110000"]


def test_search_text_is_literal_not_a_pattern(client, workers):
    OrderWorker.perform_async(
        [{"id": i, "payload": 1, "perform_in": time.time() + 60} for i in ("a*b", "axb", "a?c")]
    )
    assert ids_on(client.get("/OrderWorker/scheduled?prefix=*").get_data(as_text=True)) == ["a*b"]
    assert ids_on(client.get("/OrderWorker/enqueued?prefix=a?").get_data(as_text=True)) == ["a?c"]
    assert ids_on(client.get("/OrderWorker/enqueued?prefix=[").get_data(as_text=True)) == []


def test_search_pages_by_id(client, workers):
    enqueue(OrderWorker, 20, prefix="p-")
    enqueue(OrderWorker, 20, prefix="q-")
    enqueue(OrderWorker, 20, prefix="p+")
    first = client.get("/OrderWorker/scheduled?prefix=-00").get_data(as_text=True)
    after = re.search(r'rel="next" href="([^"]+)"', first).group(1).replace("&amp;", "&")
    assert "prefix=-00" in after and "by=id" in after
    second = client.get(after).get_data(as_text=True)
    expected = [f"{p}-{n:04d}" for p in "pq" for n in range(20)]
    assert ids_on(first) + ids_on(second) == expected and 'rel="next"' not in second


def test_a_search_stopped_early_still_lists_the_ids_starting_with_the_text(
    client, workers, monkeypatch
):
    from lowkiq_web import listing

    monkeypatch.setattr(listing, "SEARCH_STEP", 10)
    monkeypatch.setattr(listing, "SEARCH_READS", 20)
    enqueue(MailWorker, 300)  # one shard, past Redis's small (listpack) sorted sets
    enqueue(MailWorker, 2, prefix="x-j0")
    html = client.get("/MailWorker/enqueued?prefix=j0").get_data(as_text=True)
    assert "The search stopped after reading about 20 ids: every id starting with" in html
    assert ids_on(html)[:25] == [f"j{n:04d}" for n in range(25)]
    scheduled = client.get("/MailWorker/scheduled?prefix=j0").get_data(as_text=True)
    assert "The search stopped after reading about 20 ids: ids with it further in" in scheduled
    monkeypatch.setattr(listing, "SEARCH_READS", 1_000)
    complete = client.get("/MailWorker/enqueued?prefix=x-").get_data(as_text=True)
    assert ids_on(complete) == ["x-j00000", "x-j00001"] and "data-search-stopped" not in complete


def test_list_rows_have_checkboxes_and_buttons(client, mixed):
    for kind in ("enqueued", "retries", "scheduled"):
        html = client.get(f"/OrderWorker/{kind}").get_data(as_text=True)
        assert 'form="checked"' in html and "data-check-all" in html, kind
        assert f"/OrderWorker/{kind}/selected/delete" in html
        assert f"/OrderWorker/{kind}/job/kill" in html and 'data-action="perform_now"' in html
    dead = client.get("/OrderWorker/dead").get_data(as_text=True)
    assert "/OrderWorker/dead/selected/queue_up" in dead and 'form="checked"' in dead
    busy = client.get("/OrderWorker/busy").get_data(as_text=True)
    assert 'form="checked"' not in busy


def test_bulk_questions_carry_the_counts(client, mixed):
    html = client.get("/OrderWorker/enqueued").get_data(as_text=True)
    assert "Delete every queued job of OrderWorker (fresh, retries, scheduled)? 12 jobs;" in html
    assert "Make every queued job of OrderWorker due now? 9 jobs not due yet." in html
    retries = client.get("/OrderWorker/retries").get_data(as_text=True)
    assert "Move every failed job of OrderWorker to the morgue? 4 jobs." in retries
    dead = client.get("/OrderWorker/dead").get_data(as_text=True)
    assert "Delete every dead job of OrderWorker? 2 jobs; this cannot be undone." in dead


def test_row_delete_and_kill_remove_the_row(client, mixed):
    response = post(client, "/OrderWorker/scheduled/job/delete", {"id": "j0001"})
    html = response.get_data(as_text=True)
    assert response.status_code == 200 and "<tr" not in html
    assert 'data-count="length">11<' in html and 'data-count="scheduled">8<' in html
    assert OrderWorker.queries().fetch(["j0001"]) == []
    response = post(client, "/OrderWorker/retries/job/kill", {"id": "r0002"})
    assert response.status_code == 200
    assert OrderWorker.queries().morgue_fetch(["r0002"])[0]["error"] == "boom"
    assert state() == (10, 3, 3, 7)


def test_row_perform_now_shows_the_list_again(client, mixed):
    response = post(client, "/OrderWorker/scheduled/job/perform_now", {"id": "j0003"})
    html = response.get_data(as_text=True)
    assert "1 job made due now." in html and "j0003" not in ids_on(html)
    assert 'id="bulk" class="bulk" hx-swap-oob="true"' in html  # its counts renewed
    [job] = OrderWorker.queries().fetch(["j0003"])
    assert job["perform_in"] <= time.time() + 1


def test_actions_on_checked_jobs(client, mixed):
    response = post(client, "/OrderWorker/enqueued/selected/kill", {"id": ["n0000", "j0000"]})
    html = response.get_data(as_text=True)
    assert "2 jobs moved to the morgue." in html and 'data-count="morgue_length">4<' in html
    response = post(client, "/OrderWorker/retries/selected/perform_now", {"id": ["r0000"]})
    assert "1 job made due now." in response.get_data(as_text=True)
    response = post(
        client, "/OrderWorker/dead/selected/queue_up", {"id": ["d0000", "n0000", "gone"]}
    )
    assert "2 jobs queued up." in response.get_data(as_text=True)
    response = post(client, "/OrderWorker/dead/selected/delete", {"id": ["d0001", "j0000"]})
    assert "2 jobs deleted." in response.get_data(as_text=True)
    assert OrderWorker.metrics()["morgue_length"] == 0
    plain = post(
        client, "/OrderWorker/scheduled/selected/delete", {"id": ["j0004"], "by": "perform_in"},
        htmx=False,
    )  # fmt: skip
    assert plain.status_code == 303
    assert plain.headers["Location"].endswith("/OrderWorker/scheduled?by=perform_in")
    assert OrderWorker.queries().fetch(["j0004"]) == []


def test_bulk_actions_of_the_new_lists(client, mixed):
    response = post(client, "/OrderWorker/retries/retry_all_now")
    assert "4 jobs made due now." in response.get_data(as_text=True)
    assert OrderWorker.queries().scheduled_count() == 5
    response = post(client, "/OrderWorker/scheduled/perform_all_now")
    assert "5 jobs made due now." in response.get_data(as_text=True)
    enqueue(OrderWorker, 2, prefix="later")
    response = post(client, "/OrderWorker/scheduled/delete_all")
    assert "2 jobs deleted." in response.get_data(as_text=True)
    response = post(client, "/OrderWorker/retries/kill_all")
    assert "4 jobs moved to the morgue." in response.get_data(as_text=True)
    response = post(client, "/OrderWorker/enqueued/clear")
    assert "8 jobs deleted." in response.get_data(as_text=True)
    assert state() == (0, 0, 6, 0)


def test_job_page_buttons_act_and_show_the_page_again(client, mixed):
    html = client.get("/OrderWorker/job?id=r0001").get_data(as_text=True)
    assert 'data-action="enqueued-perform_now"' in html and 'name="back" value="job"' in html
    response = post(client, "/OrderWorker/enqueued/job/kill", {"id": "r0001", "back": "job"})
    assert response.headers["HX-Redirect"] == "/OrderWorker/job?id=r0001"
    dead = client.get("/OrderWorker/job?id=r0001").get_data(as_text=True)
    assert 'data-action="dead-queue_up"' in dead and 'data-action="enqueued-kill"' not in dead
    response = post(
        client, "/OrderWorker/dead/job/queue_up", {"id": "r0001", "back": "job"}, htmx=False
    )
    assert response.status_code == 303
    assert response.headers["Location"].endswith("/OrderWorker/job?id=r0001")
    assert OrderWorker.queries().fetch(["r0001"])[0]["retry_count"] == -1


#: Every new form, with input it must refuse: (url, form data).
BAD_INPUT = [
    ("/OrderWorker/enqueued/job/delete", {}),
    ("/OrderWorker/enqueued/job/delete", {"id": ""}),
    ("/OrderWorker/retries/job/kill", {"id": "r0000\0x"}),
    ("/OrderWorker/scheduled/job/perform_now", {"id": "j0000", "back": "elsewhere"}),
    ("/OrderWorker/dead/job/delete", {"id": "d0000", "back": "x"}),
    ("/OrderWorker/enqueued/selected/delete", {}),
    ("/OrderWorker/retries/selected/kill", {"id": ["r0000", ""]}),
    ("/OrderWorker/scheduled/selected/delete", {"id": ["j0000", "j\0"]}),
    ("/OrderWorker/dead/selected/delete", {"id": [f"d{n}" for n in range(1001)]}),
    ("/OrderWorker/enqueued/selected/delete", {"id": ["j0000"], "prefix": "a\0"}),
    ("/OrderWorker/enqueued/clear", {"per": "7"}),
    ("/OrderWorker/scheduled/delete_all", {"prefix": "j" * 201}),
]


@pytest.mark.parametrize(("url", "data"), BAD_INPUT)
def test_bad_input_is_a_400_that_changes_nothing(client, mixed, url, data):
    before = state()
    response = post(client, url, data)
    assert response.status_code == 400, response.get_data(as_text=True)
    assert state() == before


def test_lists_refuse_bad_parameters(client, mixed):
    for kind in ("enqueued", "retries", "scheduled", "dead", "busy"):
        for search in ("j%00", "j" * 201, "j%F4%8F%BF%BF"):
            response = client.get(f"/OrderWorker/{kind}?prefix={search}")
            assert response.status_code == 400, (kind, search)
            assert "prefix (the id search) must" in response.get_data(as_text=True)
    assert client.get("/OrderWorker/scheduled?by=id").status_code == 400
    assert client.get("/OrderWorker/retries?by=perform_in").status_code == 400
    assert client.get("/OrderWorker/retries?prefix=%00").status_code == 400
    assert client.get("/OrderWorker/scheduled?from=soon").status_code == 400


def test_unknown_worker_or_action_is_a_404(client, mixed):
    before = state()
    assert post(client, "/Nobody/enqueued/job/delete", {"id": "j0000"}).status_code == 404
    assert post(client, "/Nobody/retries/selected/kill", {"id": ["r0000"]}).status_code == 404
    assert post(client, "/Nobody/enqueued/clear").status_code == 404
    assert post(client, "/OrderWorker/enqueued/job/explode", {"id": "j0000"}).status_code == 404
    assert post(client, "/OrderWorker/dead/selected/kill", {"id": ["d0000"]}).status_code == 404
    assert post(client, "/OrderWorker/busy/selected/delete", {"id": ["x"]}).status_code == 404
    assert client.get("/Nobody/retries").status_code == 404
    assert client.get("/Nobody/scheduled").status_code == 404
    assert state() == before


#: Every new POST, with input it would accept.
NEW_POSTS = [
    ("/OrderWorker/enqueued/job/delete", {"id": "j0000"}),
    ("/OrderWorker/retries/job/kill", {"id": "r0000"}),
    ("/OrderWorker/scheduled/job/perform_now", {"id": "j0001"}),
    ("/OrderWorker/enqueued/selected/delete", {"id": ["j0000", "n0000"]}),
    ("/OrderWorker/dead/selected/queue_up", {"id": ["d0000"]}),
    ("/OrderWorker/enqueued/clear", {}),
    ("/OrderWorker/retries/retry_all_now", {}),
    ("/OrderWorker/retries/kill_all", {}),
    ("/OrderWorker/retries/delete_all", {}),
    ("/OrderWorker/scheduled/perform_all_now", {}),
    ("/OrderWorker/scheduled/delete_all", {}),
    ("/OrderWorker/retries/selected/move", {"id": ["r0000", "j0000"], "to": "MailWorker"}),
    ("/OrderWorker/enqueued/selected/move", {"id": "j0001", "to": "MailWorker", "back": "job"}),
]


@pytest.mark.parametrize(("url", "data"), NEW_POSTS)
def test_every_new_post_needs_same_origin_and_the_csrf_token(client, mixed, url, data):
    before = state()
    assert post(client, url, data, token="").status_code == 403
    assert post(client, url, data, token="x" * 43).status_code == 403
    assert post(client, url, data, origin=None).status_code == 403
    assert post(client, url, data, origin="https://evil.example").status_code == 403
    assert state() == before
    assert post(client, url, data).status_code == 200
    assert state() != before


def test_read_only_hides_and_refuses_the_new_actions(mixed):
    from lowkiq_web import create_app

    client = create_app(read_only=True).test_client()
    before = state()
    for url, data in NEW_POSTS:
        response = post(client, url, data)
        assert response.status_code == 403 and "read-only" in response.get_data(as_text=True)
    html = client.get("/OrderWorker/retries").get_data(as_text=True)
    assert 'form="checked"' not in html and "/selected/" not in html and "/job/kill" not in html
    job = client.get("/OrderWorker/job?id=j0000").get_data(as_text=True)
    assert 'name="back"' not in job
    assert state() == before


def test_other_workers_are_untouched(client, mixed):
    enqueue(MailWorker, 3)
    post(client, "/OrderWorker/enqueued/clear")
    assert MailWorker.metrics()["length"] == 3
