"""What a worker's list pages show above the list: its controls once (on Enqueued), only
the buttons that have jobs to act on, a Move that makes the person choose the worker,
and on Busy no column that repeats or stays empty."""

from __future__ import annotations

import re

import pytest
from web_support import LONG_AGO, MailWorker, OrderWorker, enqueue, fail_all, hold

OTHER_LISTS = ("retries", "scheduled", "dead", "busy")


def test_pause_and_rate_limit_forms_are_on_the_enqueued_page_only(client):
    enqueue(OrderWorker, 3)
    enqueued = client.get("/OrderWorker/enqueued").get_data(as_text=True)
    assert 'id="pause"' in enqueued and 'id="rate-limit"' in enqueued
    for kind in OTHER_LISTS:
        html = client.get(f"/OrderWorker/{kind}").get_data(as_text=True)
        assert 'id="pause"' not in html and 'id="rate-limit"' not in html, kind
        assert 'data-action="pause"' not in html and 'name="limit"' not in html, kind
        assert "Rate limit: <strong>none</strong>" in html, kind


@pytest.mark.parametrize("kind", ["enqueued", "retries", "scheduled", "dead", "busy"])
def test_an_empty_list_offers_no_button_to_act_on_its_jobs(client, kind):
    html = client.get(f"/OrderWorker/{kind}").get_data(as_text=True)
    assert "No jobs here." in html
    assert not re.search(r'<button type="submit"[^>]*data-action="(?!pause|set-rate|no-rate)', html)
    assert 'id="checked"' not in html


def test_a_list_offers_the_buttons_whose_jobs_it_has(client):
    enqueue(OrderWorker, 2)  # scheduled (due in an hour), none failed
    html = client.get("/OrderWorker/enqueued").get_data(as_text=True)
    bulk = re.search(r'<div id="bulk".*?</div>', html, re.S).group(0)
    assert re.findall(r'data-action="([^"]+)"', bulk) == ["perform_all_now", "clear"]
    assert 'id="checked"' in html


def test_move_makes_the_person_choose_the_worker(client):
    enqueue(OrderWorker, 1)
    for url in ("/OrderWorker/enqueued", "/OrderWorker/job?id=j0000"):
        html = client.get(url).get_data(as_text=True)
        select = re.search(r'<select name="to" data-move-target>.*?</select>', html, re.S).group(0)
        options = re.findall(r'<option value="([^"]*)"( selected)?>', select)
        assert options == [("", " selected"), ("MailWorker", "")], url


def test_the_busy_page_shows_each_time_once_and_no_empty_error_column(client):
    enqueue(MailWorker, 2, perform_in=LONG_AGO)
    hold(MailWorker)
    html = client.get("/MailWorker/busy").get_data(as_text=True)
    head = re.search(r"<thead>.*?</thead>", html, re.S).group(0)
    headers = re.findall(r"<th>([^<]+)</th>", head)
    assert headers == [
        "Id", "Retry", "Payloads", "Process", "Thread", "Started", "Running for", "Actions"
    ]  # fmt: skip


def test_the_busy_page_shows_a_retried_jobs_last_error(client):
    enqueue(MailWorker, 1, perform_in=LONG_AGO)
    fail_all(MailWorker, error="ValueError: no stock")
    MailWorker.actions().perform_all_jobs_now()
    hold(MailWorker)
    html = client.get("/MailWorker/busy").get_data(as_text=True)
    assert "<th>Last error</th>" in html and "ValueError: no stock" in html


def test_put_back_orphaned_batches_says_when_to_use_it(client):
    enqueue(MailWorker, 1, perform_in=LONG_AGO)
    hold(MailWorker)
    html = client.get("/MailWorker/busy").get_data(as_text=True)
    bulk = re.search(r'<div id="bulk".*?</div>', html, re.S).group(0)
    assert "Put back orphaned batches" in bulk
    explanation = re.search(r'<small class="explanation">([^<]+)</small>', bulk).group(1)
    assert "a process that died while no live process serves this worker" in explanation
    assert "batches of live processes are left alone" in explanation
