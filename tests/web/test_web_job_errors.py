"""A job's error on the dashboard: ``Class: message`` in the lists (never an empty cell),
the traceback collapsed on the job page, and errors stored as plain text still shown."""

from __future__ import annotations

import html
import re

import pytest
from web_support import ARTIFACTS, LONG_AGO, OrderWorker, enqueue, fail_all

import lowkiq
from lowkiq.testing import drain

SUMMARY = re.compile(r'<pre class="error-summary">(.*?)</pre>', re.S)
TRACEBACK = re.compile(
    r'<details class="traceback"><summary>Traceback</summary><pre>(.*?)</pre>', re.S
)


def summaries(page: str) -> list[str]:
    return [html.unescape(text) for text in SUMMARY.findall(page)]


def fail_with(monkeypatch: pytest.MonkeyPatch, exc: Exception) -> None:
    """Run one batch of OrderWorker's job ``42`` whose perform raises ``exc``."""

    def perform(cls, payloads_by_id):
        for payloads in payloads_by_id.values():
            if isinstance(exc, KeyError):
                payloads[0]["status"]  # the KeyError('status'), raised here
            raise exc

    monkeypatch.setattr(OrderWorker, "perform", classmethod(perform))
    OrderWorker.perform_async([{"id": "42", "payload": {"n": 1}}])
    drain(OrderWorker)


def test_a_key_error_shows_its_class_in_the_list_and_its_traceback_on_the_job_page(
    client, monkeypatch
):
    fail_with(monkeypatch, KeyError("status"))
    listed = client.get("/OrderWorker/enqueued").get_data(as_text=True)
    assert summaries(listed) == ["KeyError: 'status'"]
    assert '<details class="traceback"' not in listed  # lists show the summary only

    page = client.get("/OrderWorker/job?id=42").get_data(as_text=True)
    assert summaries(page) == ["KeyError: 'status'"]
    [traceback] = [html.unescape(text) for text in TRACEBACK.findall(page)]
    assert traceback.startswith("Traceback (most recent call last):\n")
    assert "in perform" in traceback and 'payloads[0]["status"]' in traceback
    assert traceback.endswith("KeyError: 'status'\n")
    assert "<details open" not in page  # collapsed


def test_an_exception_with_no_message_shows_its_class(client, monkeypatch):
    fail_with(monkeypatch, ValueError())
    assert summaries(client.get("/OrderWorker/enqueued").get_data(as_text=True)) == ["ValueError"]


def test_a_killed_job_shows_the_kill_in_the_dead_list_and_its_cause_on_its_page(
    client, monkeypatch
):
    try:
        raise ConnectionRefusedError("crm is down")
    except ConnectionRefusedError as cause:
        kill = lowkiq.Kill("no such customer")
        kill.__cause__ = cause
    fail_with(monkeypatch, kill)
    listed = client.get("/OrderWorker/dead").get_data(as_text=True)
    assert summaries(listed) == ["lowkiq.Kill: no such customer"]
    page = client.get("/OrderWorker/job?id=42").get_data(as_text=True)
    [traceback] = [html.unescape(text) for text in TRACEBACK.findall(page)]
    assert "ConnectionRefusedError: crm is down" in traceback


def test_an_error_stored_as_plain_text_is_shown_as_it_is(client):
    enqueue(OrderWorker, 1, perform_in=LONG_AGO)
    fail_all(OrderWorker, error="'status'")  # as str(exc) stored it before
    assert summaries(client.get("/OrderWorker/enqueued").get_data(as_text=True)) == ["'status'"]
    page = client.get("/OrderWorker/job?id=j0000").get_data(as_text=True)
    assert summaries(page) == ["'status'"] and '<details class="traceback"' not in page


def test_an_empty_error_text_still_fills_the_cell(client):
    enqueue(OrderWorker, 1, perform_in=LONG_AGO)
    fail_all(OrderWorker, error="")
    listed = client.get("/OrderWorker/enqueued").get_data(as_text=True)
    assert summaries(listed) == ["(an error with no text)"]


def test_discarded_jobs_are_an_outcome_of_the_prometheus_counter(client, monkeypatch):
    fail_with(monkeypatch, lowkiq.Discard("stale"))
    text = client.get("/metrics").get_data(as_text=True)
    assert (
        'lowkiq_jobs_processed_total{outcome="discarded",worker="OrderWorker"} 1.0' in text
        or 'lowkiq_jobs_processed_total{worker="OrderWorker",outcome="discarded"} 1.0' in text
    )


def test_the_error_is_escaped(client, monkeypatch):
    fail_with(monkeypatch, ValueError("<script>alert(1)</script>"))
    page = client.get("/OrderWorker/job?id=42").get_data(as_text=True)
    assert "<script>alert" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_the_traceback_opens_in_a_browser(page, live_server, monkeypatch):
    fail_with(monkeypatch, KeyError("status"))
    page.goto(live_server + "/OrderWorker/enqueued")
    assert page.locator("tr.job td.error").inner_text().strip() == "KeyError: 'status'"
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "enqueued-error.png"), full_page=True)
    page.goto(live_server + "/OrderWorker/job?id=42")
    traceback = page.locator("details.traceback pre")
    assert not traceback.is_visible()
    page.locator("details.traceback summary").click()
    assert traceback.is_visible() and "in perform" in traceback.inner_text()
    page.screenshot(path=str(ARTIFACTS / "job-traceback.png"), full_page=True)
