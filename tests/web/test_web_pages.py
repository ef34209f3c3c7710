"""The dashboard's pages against a real Redis: content, filters, pagination, escaping."""

from __future__ import annotations

import html as html_module
import json
import re
import time

import redis
from web_support import LONG_AGO, MailWorker, OrderWorker, bury, enqueue, fail_all, hold

import lowkiq
from lowkiq.clients.embedded import EmbeddedServer, project_server_url
from tests.both_redis import server_or_cluster_client  # noqa: F401  (redis_client)


def ids_on(html: str) -> list[str]:
    """The job ids of a list page, in order."""
    return re.findall(r'<tr class="job" data-id="([^"]*)"', html)


def test_dashboard_shows_totals_workers_and_redis(client, redis_url):
    enqueue(OrderWorker, 30)
    enqueue(MailWorker, 4)
    bury(MailWorker, 2)
    html = client.get("/").get_data(as_text=True)
    assert 'id="total-enqueued"><span class="num" title="34">34<' in html
    assert 'id="total-dead"><span class="num" title="2">2<' in html
    assert 'data-worker="OrderWorker"' in html and 'data-worker="MailWorker"' in html
    assert "/OrderWorker/enqueued?by=retry_count&amp;dir=desc&amp;from=-1" in html  # fresh
    assert 'data-count="retries" href="/OrderWorker/retries"' in html
    assert "/MailWorker/dead" in html and "/MailWorker/busy" in html
    assert "<dt>Version</dt><dd>" in html and 'data-rate-chart="live-chart-data"' in html
    assert 'hx-trigger="every 5s"' in html


def test_redis_url_never_shows_the_password(client):
    import lowkiq

    lowkiq.settings.redis = lambda: __import__("redis").Redis(
        host="127.0.0.1", port=1, password="s3cret", username="me"
    )
    from lowkiq.clients.connection import describe_redis

    url = describe_redis(lowkiq.settings.client())
    assert url == "redis://127.0.0.1:1/0" and "s3cret" not in url


def test_live_fragment_keeps_history_and_honours_pause(client):
    first = client.get("/live?interval=2").get_data(as_text=True)
    assert first.startswith('\n<div id="live"') or '<div id="live"' in first[:200]
    assert 'hx-trigger="every 2s"' in first
    history = re.search(r'name="history" value="([^"]*)"', first).group(1)
    assert len(history.split(",")) == 1
    enqueue(OrderWorker, 3, perform_in=LONG_AGO)
    fail_all(OrderWorker)
    second = client.get("/live", query_string={"history": history, "paused": "1"})
    html = second.get_data(as_text=True)
    assert "hx-trigger=" not in html.split(">", 1)[0]
    assert len(re.search(r'name="history" value="([^"]*)"', html).group(1).split(",")) == 2
    found = re.search(r"<div id=\"live-chart-data\" hidden data-series='([^']*)'>", html)
    data = json.loads(html_module.unescape(found.group(1)))
    assert data["unit"] == "jobs/s" and data["failed"][0] > 0 and data["processed"][0] == 0


def test_stats_api_is_the_spec_document(client):
    enqueue(OrderWorker, 5)
    bury(MailWorker, 1)
    body = client.get("/api/v1/stats").get_json()
    assert set(body) == {"total", "by_worker"}
    assert body["total"]["length"] == 5 and body["total"]["morgue_length"] == 1
    assert set(body["by_worker"]) == {"OrderWorker", "MailWorker"}
    assert set(body["by_worker"]["OrderWorker"]) == {"length", "morgue_length", "lag"}


def test_enqueued_by_id_paginates_with_a_cursor(client):
    ids = enqueue(OrderWorker, 60)
    seen, url = [], "/OrderWorker/enqueued?by=id"
    while url:
        html = client.get(url).get_data(as_text=True)
        seen += ids_on(html)
        nxt = re.search(r'<a rel="next" href="([^"]*)"', html)
        url = nxt.group(1).replace("&amp;", "&") if nxt else None
    assert seen == ids


def test_enqueued_by_perform_in_pages_through_ties(client):
    # 60 jobs with two perform_in values: page boundaries fall inside tie groups.
    OrderWorker.perform_async(
        [{"id": f"a{i:02d}", "perform_in": LONG_AGO + 100} for i in range(37)]
    )
    OrderWorker.perform_async(
        [{"id": f"b{i:02d}", "perform_in": LONG_AGO + 200} for i in range(23)]
    )
    for direction, expected in (
        ("asc", [f"a{i:02d}" for i in range(37)] + [f"b{i:02d}" for i in range(23)]),
        (
            "desc",
            [f"b{i:02d}" for i in reversed(range(23))] + [f"a{i:02d}" for i in reversed(range(37))],
        ),
    ):
        seen, url = [], f"/OrderWorker/enqueued?by=perform_in&dir={direction}"
        while url:
            html = client.get(url).get_data(as_text=True)
            seen += ids_on(html)
            nxt = re.search(r'<a rel="next" href="([^"]*)"', html)
            url = nxt.group(1).replace("&amp;", "&") if nxt else None
        assert seen == expected, direction


def test_enqueued_filters_from_a_value(client):
    enqueue(OrderWorker, 10)
    html = client.get("/OrderWorker/enqueued?by=id&from=j0005").get_data(as_text=True)
    assert ids_on(html) == [f"j{i:04d}" for i in range(5, 10)]
    html = client.get("/OrderWorker/enqueued?by=id&dir=desc&from=j0003").get_data(as_text=True)
    assert ids_on(html) == ["j0003", "j0002", "j0001", "j0000"]
    now = time.time()
    OrderWorker.perform_async([{"id": "later", "perform_in": now + 7200}])
    html = client.get(f"/OrderWorker/enqueued?by=perform_in&from={now + 5000}").get_data(
        as_text=True
    )
    assert ids_on(html) == ["later"]


def test_fresh_and_retries_links_filter_by_retry_count(client):
    enqueue(OrderWorker, 4, perform_in=LONG_AGO)
    fail_all(OrderWorker)  # the 4 jobs now have retry_count 0
    OrderWorker.perform_async([{"id": "new"}])
    fresh = client.get("/OrderWorker/enqueued?by=retry_count&dir=desc&from=-1")
    assert ids_on(fresh.get_data(as_text=True)) == ["new"]
    retries = client.get("/OrderWorker/enqueued?by=retry_count&dir=asc&from=0").get_data(
        as_text=True
    )
    assert sorted(ids_on(retries)) == [f"j{i:04d}" for i in range(4)]
    assert ">retry 1</span>" in retries and "boom" in retries
    assert ">fresh</span>" in fresh.get_data(as_text=True)


def test_per_page_choices(client):
    enqueue(OrderWorker, 120)
    assert len(ids_on(client.get("/OrderWorker/enqueued").get_data(as_text=True))) == 25
    assert len(ids_on(client.get("/OrderWorker/enqueued?per=100").get_data(as_text=True))) == 100
    assert len(ids_on(client.get("/OrderWorker/enqueued?per=500").get_data(as_text=True))) == 120


def test_dead_list_by_updated_at_and_id(client):
    ids = bury(OrderWorker, 30)
    html = client.get("/OrderWorker/dead").get_data(as_text=True)
    assert len(ids_on(html)) == 25 and 'rel="next"' in html
    assert "Queue up all" in html and 'hx-confirm="Delete every dead job of OrderWorker?' in html
    html = client.get("/OrderWorker/dead?by=id&dir=asc&per=100").get_data(as_text=True)
    assert ids_on(html) == ids


def test_busy_lists_the_processing_area(client):
    enqueue(MailWorker, 3, perform_in=LONG_AGO)
    held = hold(MailWorker)
    html = client.get("/MailWorker/busy").get_data(as_text=True)
    assert ids_on(html) == sorted(held) == ["j0000", "j0001", "j0002"]
    assert 'data-count="busy">3<' in html


def test_job_view_finds_a_job_wherever_it_is(client):
    enqueue(OrderWorker, 2)
    bury(MailWorker, 1)
    html = client.get("/OrderWorker/job?id=j0001").get_data(as_text=True)
    assert 'data-place="enqueued"' in html and "&#34;n&#34;: 1" in html
    dead = client.get("/MailWorker/job?id=d0000")
    assert dead.status_code == 200 and 'data-place="dead"' in dead.get_data(as_text=True)
    missing = client.get("/OrderWorker/job?id=nope")
    assert missing.status_code == 404 and "No job with id" in missing.get_data(as_text=True)


def test_user_data_is_escaped(client):
    evil = '<script>alert("x")</script>'
    OrderWorker.perform_async([{"id": evil, "payload": {"html": evil}, "perform_in": LONG_AGO}])
    fail_all(OrderWorker, error=evil, max_retry_count=0)
    for url in ("/OrderWorker/dead", "/OrderWorker/job?id=" + evil):
        html = client.get(url, query_string=None).get_data(as_text=True)
        assert "<script>alert" not in html
        assert "&lt;script&gt;alert" in html


def test_numbers_show_human_and_exact_values(client):
    enqueue(OrderWorker, 1234)
    html = client.get("/").get_data(as_text=True)
    assert '<span class="num" title="1,234">1.2K</span>' in html


def test_read_only_hides_actions(workers):
    from lowkiq_web import create_app

    bury(OrderWorker, 2)
    client = create_app(read_only=True).test_client()
    html = client.get("/OrderWorker/dead").get_data(as_text=True)
    assert "read-only" in html
    assert "hx-post" not in html and "Queue up" not in html and "Delete all" not in html
    html = client.get("/OrderWorker/enqueued").get_data(as_text=True)
    assert "Perform all jobs now" not in html


def walk(client, url: str) -> list[str]:
    """Every job id of a list, following its "Next page" links."""
    seen = []
    while url:
        html = client.get(url).get_data(as_text=True)
        seen += ids_on(html)
        nxt = re.search(r'<a rel="next" href="([^"]*)"', html)
        url = nxt.group(1).replace("&amp;", "&") if nxt else None
    return seen


def test_retry_count_order_pages_from_fresh_into_retries(client):
    enqueue(OrderWorker, 30, prefix="r", perform_in=LONG_AGO)
    fail_all(OrderWorker)  # 30 jobs with retry_count 0
    fresh = enqueue(OrderWorker, 30, prefix="f")
    asc = walk(client, "/OrderWorker/enqueued?by=retry_count&dir=asc")
    assert asc[:30] == fresh and sorted(asc[30:]) == [f"r{i:04d}" for i in range(30)]
    desc = walk(client, "/OrderWorker/enqueued?by=retry_count&dir=desc")
    assert desc == list(reversed(asc))


def test_dead_by_updated_at_pages_through_one_big_tie(client):
    ids = bury(MailWorker, 70)  # one shard, one fail call: all 70 share updated_at
    assert len({job["updated_at"] for job in MailWorker.queries().morgue_fetch(ids)}) == 1
    assert walk(client, "/MailWorker/dead") == list(reversed(ids))
    assert walk(client, "/MailWorker/dead?dir=asc") == ids


def test_enqueued_by_perform_in_starts_from_a_date_and_time(client):
    OrderWorker.perform_async(
        [
            {"id": "early", "perform_in": 1_795_323_000.0},  # 2026-11-22 04:50:00 UTC
            {"id": "late", "perform_in": 1_795_323_600.0},  # 2026-11-22 05:00:00 UTC
        ]
    )
    html = client.get("/OrderWorker/enqueued?by=perform_in&from=2026-11-22+04:55").get_data(
        as_text=True
    )
    assert ids_on(html) == ["late"]


def test_a_badge_says_when_the_dashboard_runs_on_the_embedded_development_redis(client, tmp_path):
    badge = "embedded development Redis</span>"
    assert badge not in client.get("/").get_data(as_text=True)
    directory = tmp_path / "dev"
    url = project_server_url(directory)
    try:
        lowkiq.settings.redis = lambda: redis.Redis.from_url(url)
        for page in ("/", "/OrderWorker/dead"):
            assert badge in client.get(page).get_data(as_text=True)
    finally:
        EmbeddedServer(url=url, directory=directory).stop()


def hot_job(worker, job_id: str, count: int) -> None:
    """One job with ``count`` payloads ``{"v": n}`` (scores n), enqueued one by one."""
    for n in range(count):
        worker.perform_async(
            [{"id": job_id, "payload": {"v": n}, "score": n, "perform_in": time.time() + 3600}]
        )


def test_a_list_shows_the_first_payloads_of_a_hot_job_and_links_to_the_rest(client):
    hot_job(MailWorker, "hot", 150)
    html = client.get("/MailWorker/enqueued").get_data(as_text=True)
    assert html.count('<span class="score" title="score">') == 10
    assert "… 140 more payloads" in html and "/MailWorker/job?id=hot" in html


def test_the_job_page_pages_through_a_hot_jobs_payloads(client):
    hot_job(MailWorker, "hot", 150)
    first = client.get("/MailWorker/job?id=hot").get_data(as_text=True)
    assert "1–100 of 150" in first and "&#34;v&#34;: 99" in first
    assert "&#34;v&#34;: 100" not in first
    assert "payloads_from=100" in first
    second = client.get("/MailWorker/job?id=hot&payloads_from=100").get_data(as_text=True)
    assert "101–150 of 150" in second and "&#34;v&#34;: 149" in second
    assert "&#34;v&#34;: 99\n" not in second and 'start="101"' in second
    assert "payloads_from=0" in second and "Next payloads" not in second
    bad = client.get("/MailWorker/job?id=hot&payloads_from=-1")
    assert bad.status_code == 400 and "payloads_from" in bad.get_data(as_text=True)


def test_a_dead_job_queued_up_again_shows_its_last_error(client):
    bury(MailWorker, 1, error="the last straw")
    MailWorker.actions().morgue_queue_up(["d0000"])
    html = client.get("/MailWorker/enqueued").get_data(as_text=True)
    assert ids_on(html) == ["d0000"] and "the last straw" in html
    assert "the last straw" in client.get("/MailWorker/job?id=d0000").get_data(as_text=True)


def test_undecodable_payloads_and_errors_show_marked_and_escaped_never_a_500(client):
    raw = b"\xff<script>alert(1)</script>"
    MailWorker.queue().push([("bad", raw, 1.0, time.time() + 3600, None)])
    bury(MailWorker, 1, error="boom")

    def refuse(data: bytes) -> str:
        raise ValueError("not ours")

    lowkiq.settings.load_error = refuse
    for url in ("/MailWorker/enqueued", "/MailWorker/job?id=bad"):
        page = client.get(url)
        html = page.get_data(as_text=True)
        assert page.status_code == 200, url
        assert '<li class="undecodable">' in html and "⚠ undecodable payload" in html
        assert "raw bytes: b&#39;\\xff&lt;script&gt;alert(1)&lt;/script&gt;&#39;" in html
        assert "<script>alert(1)" not in html
    dead = client.get("/MailWorker/dead")
    assert dead.status_code == 200
    assert "[this error cannot be decoded: ValueError: not ours] raw bytes: b&#39;boom&#39;" in (
        dead.get_data(as_text=True)
    )


def test_dashboard_retries_link_to_the_retries_list_and_discarded_is_counted(client):
    """Issue 30: a worker's Retries count opens its Retries list; Discarded (jobs dropped by
    lowkiq.Discard, the per-shard ``discarded`` counter) shows beside Processed and Failed."""
    queue = OrderWorker.queue()
    queue.client.incrby(queue.keys.discarded_counter(0), 3)
    queue.client.incrby(queue.keys.discarded_counter(2), 4)
    html = client.get("/").get_data(as_text=True)
    row = re.search(r'<tr data-worker="OrderWorker">(.*?)</tr>', html, re.S).group(1)
    assert '<a data-count="retries" href="/OrderWorker/retries">' in row
    assert '<td data-count="discarded"><span class="num" title="7">7</span></td>' in row
    heads = re.findall(r"<th[^>]*>([^<]+)</th>", html.split('<table class="workers">')[1])[:4]
    assert heads == ["Worker", "Processed", "Failed", "Discarded"]
    assert '<span id="total-discarded"><span class="num" title="7">7</span></span>' in html
    mail = re.search(r'<tr data-worker="MailWorker">(.*?)</tr>', html, re.S).group(1)
    assert '<td data-count="discarded"><span class="num" title="0">0</span></td>' in mail
