"""The job page's Events: a tracked worker's recorded events of the id, newest first, in
words (the error, the retry and its time, the batch's process and fence); the page of a
job no longer queued shows them with a 200; an untracked worker's page says how to
record them."""

from __future__ import annotations

import html
import re
from typing import Any

import pytest
from web_support import MailWorker, OrderWorker

import lowkiq
from lowkiq import JobEvent
from lowkiq.testing import drain
from lowkiq_web import job_events

ROW = re.compile(r'<tr class="event" data-event="(\w+)">(.*?)</tr>', re.S)


class TrackedWorker(lowkiq.Worker):
    """Two shards, two tries, every event recorded; ``flaky`` fails its first try,
    ``bad`` every try."""

    shards_count = 2
    max_retry_count = 1
    track = True
    tries: dict[str, int] = {}

    @classmethod
    def retry_in(cls, retry_count: int) -> float:
        return 600.0

    @classmethod
    def perform(cls, batch: dict[str, list[Any]]) -> None:
        for job_id, payloads in batch.items():
            cls.tries[job_id] = cls.tries.get(job_id, 0) + 1
            if "bad" in payloads or ("flaky" in payloads and cls.tries[job_id] == 1):
                raise KeyError("<status>")


class TrackedMail(lowkiq.Worker):
    """A tracked worker jobs move to."""

    shards_count = 1
    track = True


@pytest.fixture(autouse=True)
def tracked(workers: list[type[lowkiq.Worker]]) -> None:
    lowkiq.settings.workers = [*workers, TrackedWorker, TrackedMail]
    TrackedWorker.tries = {}


def text_of(markup: str) -> str:
    """What a reader sees of ``markup``: its text, on one line."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", markup)).split())


def rows(page: str) -> list[tuple[str, str]]:
    """The Events rows of a page, newest first: (event, the row's text)."""
    return [(event, text_of(row)) for event, row in ROW.findall(page)]


def test_a_tracked_jobs_page_shows_its_events_newest_first_with_the_error(client):
    TrackedWorker.perform_async([{"id": "42", "payload": "flaky"}])
    drain(TrackedWorker)
    response = client.get("/TrackedWorker/job?id=42")
    assert response.status_code == 200
    page = response.get_data(as_text=True)
    assert 'data-place="enqueued"' in page  # waiting for its retry
    found = rows(page)
    assert [event for event, _ in found] == ["failed", "popped", "enqueued"]
    failed, popped, enqueued = (row for _, row in found)
    assert "Failed" in failed and "KeyError: '<status>'" in failed
    assert "retry 1 due in 9m" in failed  # retry_in 600 s
    assert "<status>" not in page  # the error is escaped
    assert "Taken into a batch" in popped and "drain-" in popped and "fence " in popped
    assert "Enqueued" in enqueued and "ago" in enqueued and "fence" not in enqueued
    assert "Newest first. 3 events kept." in text_of(page)

    drain(TrackedWorker, future=True)
    page = client.get("/TrackedWorker/job?id=42").get_data(as_text=True)
    assert [event for event, _ in rows(page)] == ["done", "popped", "failed", "popped", "enqueued"]
    assert "Done (its batch succeeded)" in rows(page)[0][1]


def test_a_done_jobs_page_shows_the_timeline_with_200(client):
    TrackedWorker.perform_async([{"id": "7", "payload": "ok"}])
    drain(TrackedWorker)
    assert TrackedWorker.queries().fetch(["7"]) == []
    response = client.get("/TrackedWorker/job?id=7")
    assert response.status_code == 200
    page = response.get_data(as_text=True)
    assert "data-place=" not in page
    notice = text_of(page)
    assert "Job 7 is not busy, queued or dead now. Its last event," in notice
    assert ": Done (its batch succeeded)." in notice
    assert [event for event, _ in rows(page)] == ["done", "popped", "enqueued"]


def test_buried_deleted_and_moved_jobs_keep_their_timeline(client):
    TrackedWorker.perform_async([{"id": "b", "payload": "bad"}])
    drain(TrackedWorker)
    drain(TrackedWorker, future=True)
    dead = client.get("/TrackedWorker/job?id=b").get_data(as_text=True)
    assert 'data-place="dead"' in dead
    event, row = rows(dead)[0]
    assert event == "buried" and "Moved to the morgue" in row and "KeyError: '<status>'" in row
    TrackedWorker.actions().morgue_delete(["b"])
    deleted = client.get("/TrackedWorker/job?id=b")
    assert deleted.status_code == 200
    event, row = rows(deleted.get_data(as_text=True))[0]
    assert event == "deleted" and row.endswith(" ago deleted Deleted from the morgue –")

    TrackedWorker.perform_async([{"id": "m", "payload": "ok"}])
    TrackedWorker.actions().move(["m"], to=TrackedMail)
    moved = client.get("/TrackedWorker/job?id=m").get_data(as_text=True)
    assert rows(moved)[0][1].endswith(" ago moved Moved to TrackedMail its page in TrackedMail –")
    assert 'href="/TrackedMail/job?id=m"' in moved
    there = client.get("/TrackedMail/job?id=m").get_data(as_text=True)
    event, row = rows(there)[0]
    assert row.endswith(" ago enqueued Moved here from TrackedWorker its page in TrackedWorker –")
    assert 'href="/TrackedWorker/job?id=m"' in there


def test_the_rows_shown_are_capped_and_the_page_says_so(client, monkeypatch):
    monkeypatch.setattr(job_events, "EVENTS_SHOWN", 3)
    for n in range(5):
        TrackedWorker.perform_async([{"id": "many", "payload": n}])
    page = client.get("/TrackedWorker/job?id=many").get_data(as_text=True)
    assert len(rows(page)) == 3
    assert "The last 3 of 5 events kept." in page
    assert "Enqueued, merged into the queued job" in rows(page)[0][1]


def test_an_id_with_no_events_is_still_not_found(client):
    response = client.get("/TrackedWorker/job?id=never")
    assert response.status_code == 404
    page = response.get_data(as_text=True)
    assert "No job with id" in page and "No events of" in page
    assert '<table class="event-list"' not in page


def test_an_untracked_workers_page_says_how_to_record_events(client):
    OrderWorker.perform_async([{"id": "o1", "payload": 1}])
    page = client.get("/OrderWorker/job?id=o1").get_data(as_text=True)
    assert "OrderWorker records no job events: set track = True on it" in text_of(page)
    assert '<table class="event-list"' not in page
    missing = client.get("/MailWorker/job?id=nope")
    assert missing.status_code == 404
    assert "MailWorker records no job events" in missing.get_data(as_text=True)


@pytest.mark.parametrize(
    "query", ["", "?id=", "?id=a%00b", "?id=42&payloads_from=-1", "?id=42&payloads_from=x"]
)
def test_a_bad_parameter_stays_a_400(client, query):
    TrackedWorker.perform_async([{"id": "42", "payload": "ok"}])
    assert client.get("/TrackedWorker/job" + query).status_code == 400


def event(name: str, **details: str) -> JobEvent:
    return JobEvent("x", name, 1_700_000_000.0, "Q", 0, details=details)


@pytest.mark.parametrize(
    ("made", "words"),
    [
        (event("enqueued", perform_in="1", merged="0"), "Enqueued"),
        (event("enqueued", merged="1"), "Enqueued, merged into the queued job"),
        (event("enqueued", **{"from": "morgue"}), "Queued up from the morgue"),
        (event("enqueued", **{"from": "schedule"}), "Enqueued by its schedule"),
        (event("enqueued", **{"from": "Other"}), "Moved here from Other"),
        (event("yielded", left="1"), "Gave 1 payload back (yield_rest)"),
        (event("yielded", left="3"), "Gave 3 payloads back (yield_rest)"),
        (event("deleted", **{"from": "queue"}), "Deleted from the queue"),
        (
            event("restored"),
            "Back in the queue (its process died or stopped running it)",
        ),
        (event("moved", to="Other"), "Moved to Other"),
        (event("renamed"), "renamed"),  # an event a later version may add
    ],
)
def test_event_words(made, words):
    assert job_events.event_words(made) == words


def test_due_time_and_other_details():
    assert job_events.due_time(event("enqueued", perform_in="1700000000.5")) is None  # at once
    assert job_events.due_time(event("enqueued", perform_in="1700000060")) == 1_700_000_060
    assert job_events.due_time(event("failed", perform_in="1700000010")) == 1_700_000_010
    assert job_events.due_time(event("failed", perform_in="?")) is None
    assert job_events.other_details(event("enqueued", group="", later="1", merged="0")) == {
        "later": "1"
    }
    assert job_events.retry_number(event("failed", retry_count="2")) == 2
    assert job_events.retry_number(event("popped")) is None
    assert job_events.worker_of_queue("MailWorker") == "MailWorker"
    assert job_events.worker_of_queue("nowhere") is None
    assert MailWorker.track is False


def test_every_reason_a_batch_goes_back_unrun_has_its_words() -> None:
    from lowkiq.storage.processing import RESTORE_REASONS
    from lowkiq_web.job_events import RESTORE_WORDS

    assert set(RESTORE_WORDS) == RESTORE_REASONS
