"""Groups on the dashboard (SPEC §11): a worker's pages list its groups with the most queued
jobs, and job rows and the job page show a job's group."""

from __future__ import annotations

import re

from web_support import LONG_AGO, MailWorker, OrderWorker, enqueue, fail_all, hold

from tests.both_redis import server_or_cluster_client  # noqa: F401  (redis_client)

#: ``LONG_AGO`` as the dashboard shows it on hover.
LONG_AGO_TEXT = "2001-09-09 01:46:40 UTC"


def group_rows(html: str) -> list[tuple[str, str, str, str]]:
    """The Groups table of a page: ``(group, length, oldest due on hover, in flight)``."""
    section = re.search(r'<section id="groups".*?</section>', html, re.S)
    assert section, "no Groups table"
    rows = re.findall(
        r'<tr class="group" data-group="([^"]*)">.*?data-count="length"><span class="num" '
        r'title="([^"]*)">.*?<td class="oldest-due">(?:<time title="([^"]*)">)?.*?'
        r'data-count="in_flight"><span class="num" title="([^"]*)">',
        section.group(0),
        re.S,
    )
    return [(name, length, due, flight) for name, length, due, flight in rows]


def group_of_row(html: str, job_id: str) -> str | None:
    """The group label of the row of ``job_id`` in a list, or ``None``."""
    row = re.search(rf'<tr class="job" data-id="{re.escape(job_id)}">.*?</tr>', html, re.S)
    assert row, f"no row for {job_id}"
    label = re.search(r'class="badge badge-group" data-group="([^"]*)"', row.group(0))
    return label.group(1) if label else None


def test_a_workers_pages_list_its_groups_most_queued_first(client):
    enqueue(OrderWorker, 5, prefix="a", group="acme")
    enqueue(OrderWorker, 2, prefix="g", group="globex", perform_in=LONG_AGO)
    enqueue(OrderWorker, 3, prefix="x")
    html = client.get("/OrderWorker/enqueued").get_data(as_text=True)
    rows = group_rows(html)
    assert [(name, length, flight) for name, length, _, flight in rows] == [
        ("acme", "5", "0"),
        ("", "3", "0"),
        ("globex", "2", "0"),
    ]
    assert rows[2][2] == LONG_AGO_TEXT and "(no group)" in html
    for kind in ("retries", "scheduled", "dead", "busy"):  # shown once, on Enqueued
        page = client.get(f"/OrderWorker/{kind}").get_data(as_text=True)
        assert 'id="groups"' not in page and "Pause, rate limit and groups" in page, kind


def test_the_groups_table_counts_jobs_in_flight(client):
    enqueue(MailWorker, 3, prefix="a", group="acme", perform_in=LONG_AGO)
    enqueue(MailWorker, 1, prefix="b", group="beta", perform_in=LONG_AGO)
    hold(MailWorker)
    enqueue(MailWorker, 2, prefix="later-", group="acme")
    html = client.get("/MailWorker/enqueued").get_data(as_text=True)
    assert [(name, length, flight) for name, length, _, flight in group_rows(html)] == [
        ("acme", "2", "3"),
        ("beta", "0", "1"),
    ]
    busy = client.get("/MailWorker/busy").get_data(as_text=True)
    assert group_of_row(busy, "a0000") == "acme" and group_of_row(busy, "b0000") == "beta"


def test_job_rows_show_their_group(client):
    enqueue(OrderWorker, 2, prefix="a", group="acme")
    enqueue(OrderWorker, 1, prefix="x")
    enqueue(MailWorker, 1, prefix="d", group="doomed", perform_in=LONG_AGO)
    enqueue(MailWorker, 1, prefix="n", perform_in=LONG_AGO)
    fail_all(MailWorker, max_retry_count=0)
    html = client.get("/OrderWorker/enqueued").get_data(as_text=True)
    assert group_of_row(html, "a0001") == "acme" and group_of_row(html, "x0000") is None
    scheduled = client.get("/OrderWorker/scheduled").get_data(as_text=True)
    assert group_of_row(scheduled, "a0000") == "acme"
    dead = client.get("/MailWorker/dead").get_data(as_text=True)
    assert group_of_row(dead, "d0000") == "doomed" and group_of_row(dead, "n0000") is None


def test_the_job_page_shows_the_jobs_group(client):
    enqueue(OrderWorker, 1, prefix="a", group="acme")
    enqueue(OrderWorker, 1, prefix="x")
    enqueue(MailWorker, 1, prefix="d", group="doomed", perform_in=LONG_AGO)
    fail_all(MailWorker, max_retry_count=0)
    enqueue(MailWorker, 1, prefix="b", group="busy-group", perform_in=LONG_AGO)
    hold(MailWorker)
    pages = {
        ("OrderWorker", "a0000"): "acme",
        ("MailWorker", "d0000"): "doomed",
        ("MailWorker", "b0000"): "busy-group",
    }
    for (worker, job_id), group in pages.items():
        html = client.get(f"/{worker}/job?id={job_id}").get_data(as_text=True)
        assert "<dt>Group</dt>" in html, job_id
        assert f'data-group="{group}"' in html, job_id
    plain = client.get("/OrderWorker/job?id=x0000").get_data(as_text=True)
    assert 'data-place="enqueued"' in plain and "<dt>Group</dt>" not in plain


def test_a_queue_without_groups_shows_no_groups_table(client):
    enqueue(OrderWorker, 3, perform_in=LONG_AGO)
    hold(OrderWorker, shard=0)
    enqueue(MailWorker, 1, group="acme")  # another worker's groups are not OrderWorker's
    for kind in ("enqueued", "busy"):
        html = client.get(f"/OrderWorker/{kind}").get_data(as_text=True)
        assert 'id="groups"' not in html and "badge-group" not in html, kind
    assert 'id="groups"' in client.get("/MailWorker/enqueued").get_data(as_text=True)


def test_group_names_are_escaped(client):
    evil = '<script>alert("g")</script>'
    enqueue(MailWorker, 1, group=evil)
    for url in ("/MailWorker/enqueued", "/MailWorker/job?id=j0000"):
        html = client.get(url).get_data(as_text=True)
        assert "<script>alert" not in html and "&lt;script&gt;alert" in html, url


def test_a_shard_with_more_groups_than_counted_says_so(client, monkeypatch):
    import lowkiq.storage.group_rows

    enqueue(OrderWorker, 1, prefix="a", group="acme")
    html = client.get("/OrderWorker/enqueued").get_data(as_text=True)
    assert "partial-groups" not in html
    OrderWorker.perform_async(
        [{"id": f"t{n}", "payload": n, "group": f"tenant{n}"} for n in range(40)]
    )
    monkeypatch.setattr(lowkiq.storage.group_rows, "SCANNED_GROUPS", 3)
    html = client.get("/OrderWorker/enqueued").get_data(as_text=True)
    assert 'class="partial-groups"' in html and "some shards hold more groups" in html
    assert "the first 3 groups of each shard" in html
