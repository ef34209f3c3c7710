"""The job page in words: payload scores that are times read as times (the raw score on
hover), and a dead job says when it died, its retries and when it was first enqueued."""

from __future__ import annotations

import re
import time

import pytest
from test_web_job_events import TrackedWorker, text_of
from web_support import OrderWorker, bury, enqueue

import lowkiq
from lowkiq.testing import drain

EPOCH = re.compile(r"\b1[6-9]\d{8}(\.\d+)?\b")


@pytest.fixture
def tracked(workers):
    lowkiq.settings.workers = [*workers, TrackedWorker]
    TrackedWorker.tries = {}


def test_a_payload_score_that_is_a_time_reads_as_one(client):
    OrderWorker.perform_async(
        [
            {"id": "a", "payload": "x", "score": 1795914253.074608},
            {"id": "b", "payload": "y", "score": 7},
        ]
    )
    page = client.get("/OrderWorker/job?id=a").get_data(as_text=True)
    assert not EPOCH.search(text_of(page)), EPOCH.search(text_of(page))
    score = re.search(r'<span class="score" title="([^"]+)">(.*?)</span>', page, re.S)
    assert score.group(1) == "score 1795914253.074608 = 2026-11-29 01:04:13 UTC"
    assert re.fullmatch(r"added <time [^>]+>\S.*</time>", score.group(2))
    other = client.get("/OrderWorker/job?id=b").get_data(as_text=True)
    assert '<span class="score" title="score">7' in other


def test_a_dead_job_of_an_untracked_worker_says_what_the_morgue_keeps(client):
    before = time.time()
    bury(OrderWorker, 1)
    text = text_of(client.get("/OrderWorker/job?id=d0000").get_data(as_text=True))
    assert re.search(r"Died \S+ ago \(moved to the morgue\)", text), text
    assert "Retries not kept in the morgue (set track = True on OrderWorker" in text
    assert re.search(r"First enqueued \S+ ago \(its oldest payload's score\)", text), text
    assert OrderWorker.queries().morgue_fetch(["d0000"])[0]["payloads"][0][1] >= before - 1


def test_a_dead_job_of_a_tracked_worker_tells_its_retries_from_its_events(client, tracked):
    TrackedWorker.perform_async([{"id": "9", "payload": "bad"}])
    drain(TrackedWorker)
    drain(TrackedWorker, future=True)
    assert TrackedWorker.queries().morgue_fetch(["9"])
    text = text_of(client.get("/TrackedWorker/job?id=9").get_data(as_text=True))
    assert "Retries 1 retry before it died (from its events kept since it was" in text, text
    assert re.search(r"First enqueued \S+ ago \(its oldest event kept\)", text), text


def test_a_queued_jobs_page_shows_no_raw_time(client):
    enqueue(OrderWorker, 1)
    page = client.get("/OrderWorker/job?id=j0000").get_data(as_text=True)
    assert not EPOCH.search(text_of(page))
