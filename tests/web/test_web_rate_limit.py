"""A worker's rate limit on the dashboard: shown with its rate-limited count, changed at run
time (CSRF-checked, bad values a 400 that changes nothing, hidden and refused read-only),
and exported to Prometheus."""

from __future__ import annotations

import time

from test_web_prometheus import scrape, value
from web_support import MailWorker, OrderWorker, post

from lowkiq.limits.rate_limit import RateLimit
from lowkiq.storage.group_claims import GroupClaims
from lowkiq.storage.rate_bucket import Throttle
from lowkiq_web import create_app
from tests.leasing import ack, token


def spend(worker, pops: int, per_second: float, capacity: int) -> None:
    """Pop a backlog of ``worker`` ``pops`` times under a rate limit, as a process would."""
    worker.perform_async([{"id": n, "perform_in": time.time() - 1} for n in range(50)])
    queue = worker.queue()
    throttle = Throttle(per_second / 1000, capacity, 1)
    shards = sorted({queue.shard_of(str(n)) for n in range(50)})
    for shard in shards[:pops]:
        queue.pop(shard, token(queue, shard), 1, throttle=throttle)
        ack(queue, shard)


def test_the_worker_page_shows_the_limit_and_changes_it(client):
    page = client.get("/OrderWorker/enqueued").get_data(as_text=True)
    assert 'data-rate-limit="none"' in page and "from the code" in page

    response = post(
        client, "/OrderWorker/rate-limit", {"action": "set", "limit": "50/s", "burst": "5"}
    )
    assert response.status_code == 200
    html = response.get_data(as_text=True)
    assert 'data-rate-limit="50/s (burst 5)"' in html and "set at run time" in html
    assert OrderWorker.current_rate_limit() == RateLimit(50, burst=5)
    assert MailWorker.current_rate_limit() is None

    dashboard = client.get("/").get_data(as_text=True)
    order_row = dashboard.split('data-worker="OrderWorker"')[1].split("</tr>")[0]
    mail_row = dashboard.split('data-worker="MailWorker"')[1].split("</tr>")[0]
    assert "data-worker-rate-limit" in order_row and "50/s (burst 5)" in order_row
    assert "data-worker-rate-limit" not in mail_row

    post(client, "/OrderWorker/rate-limit", {"action": "none"})
    assert OrderWorker.rate_limit_status().overridden and OrderWorker.current_rate_limit() is None
    html = post(client, "/OrderWorker/rate-limit", {"action": "code"}).get_data(as_text=True)
    assert 'data-rate-limit="none"' in html and "from the code" in html
    assert not OrderWorker.rate_limit_status().overridden


def test_the_rate_limited_count_is_shown_and_exported(client):
    OrderWorker.set_rate_limit(RateLimit(1, per=10))
    # The first pop takes the one token and reserves its next (a wait); the second waits.
    spend(OrderWorker, 2, per_second=0.1, capacity=1)
    page = client.get("/OrderWorker/enqueued").get_data(as_text=True)
    assert "data-rate-limited>2<" in page and "s ahead" in page
    samples = scrape(client.get("/metrics").get_data(as_text=True))
    assert value(samples, "lowkiq_rate_limited_total", worker="OrderWorker") == 2
    assert value(samples, "lowkiq_rate_limit_jobs_per_second", worker="OrderWorker") == 0.1
    assert ("lowkiq_rate_limit_jobs_per_second", (("worker", "MailWorker"),)) not in samples


def test_a_per_group_limit_shows_its_groups_refusals_and_dry_groups(client):
    """The counts of a per-group limit are its groups' buckets', not the worker bucket's."""
    limit = RateLimit(1, per=10, per_group=True)
    OrderWorker.set_rate_limit(limit)
    claims = GroupClaims(OrderWorker.queue(), cap=None, ttl=30.0)
    for who in ("0 1", "1 1"):  # the second finds group A out of tokens
        claims.call("claim", who, {"A": 1}, limit)
    page = client.get("/OrderWorker/enqueued").get_data(as_text=True)
    assert 'data-rate-limit="1/10s per group"' in page
    assert "data-rate-limited>1<" in page and "groups out of tokens: 1" in page
    samples = scrape(client.get("/metrics").get_data(as_text=True))
    assert value(samples, "lowkiq_rate_limited_total", worker="OrderWorker") == 1


def test_bad_values_are_a_400_that_changes_nothing(client):
    OrderWorker.set_rate_limit(RateLimit(7))
    for form in (
        {"action": "set", "limit": "lots"},
        {"action": "set", "limit": "0/s"},
        {"action": "set", "limit": "5/s", "burst": "-1"},
        {"action": "set", "limit": "5/s", "burst": "x"},
        {"action": "faster"},
    ):
        response = post(client, "/OrderWorker/rate-limit", form)
        assert response.status_code == 400, form
    assert OrderWorker.current_rate_limit() == RateLimit(7)
    assert post(client, "/Nope/rate-limit", {"action": "none"}).status_code == 404


def test_a_change_needs_the_csrf_token(client):
    response = post(client, "/OrderWorker/rate-limit", {"action": "none"}, token="")
    assert response.status_code == 403
    assert not OrderWorker.rate_limit_status().overridden


def test_a_plain_form_post_redirects_to_the_worker_page(client):
    response = post(
        client, "/MailWorker/rate-limit", {"action": "set", "limit": "9/min"}, htmx=False
    )
    assert response.status_code == 303 and response.headers["Location"].endswith(
        "/MailWorker/enqueued"
    )
    assert MailWorker.current_rate_limit() == RateLimit(9, per=60.0)


def test_read_only_shows_the_limit_but_hides_and_refuses_the_change(workers):
    OrderWorker.set_rate_limit(RateLimit(3))
    client = create_app(read_only=True).test_client()
    page = client.get("/OrderWorker/enqueued").get_data(as_text=True)
    assert 'data-rate-limit="3/s"' in page and 'data-action="set-rate-limit"' not in page
    assert post(client, "/OrderWorker/rate-limit", {"action": "none"}).status_code == 403
    assert OrderWorker.current_rate_limit() == RateLimit(3)
