"""The Schedules page in words: a period as people say it, the catch-up explained, a
schedule that never ran says so, and runs asked with "Run now" are counted."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from test_web_schedules import row
from web_support import MailWorker, OrderWorker, post

import lowkiq
from lowkiq.storage import schedules as store
from lowkiq_web import formatting


@pytest.fixture
def schedules(workers):
    lowkiq.settings.schedules = [
        lowkiq.Schedule(OrderWorker, id="digest", cron="0 7 * * *"),
        lowkiq.Schedule(MailWorker, id="stock", every=timedelta(seconds=30)),
    ]


def text(markup: str) -> str:
    return " ".join(re.sub(r"<[^>]+>", " ", markup).split())


@pytest.mark.parametrize(
    ("every", "words"),
    [
        (timedelta(seconds=30), "30 s"),
        (timedelta(minutes=5), "5 min"),
        (timedelta(minutes=90), "1 h 30 min"),
        (timedelta(days=1), "1 day"),
        (timedelta(days=2, hours=3), "2 days 3 h"),
        (timedelta(milliseconds=1500), "1.5 s"),
    ],
)
def test_a_period_in_words(every, words):
    assert formatting.period(every) == words


def test_a_period_and_the_catch_up_read_as_words(client, schedules):
    html = client.get("/schedules").get_data(as_text=True)
    stock = text(row(html, "stock"))
    assert "every 30 s" in stock and "0:00:30" not in stock
    assert "catch-up: last (missed ticks: one job for them all)" in stock


def test_a_schedule_that_never_ran_says_so(client, schedules):
    queue = OrderWorker.queue()
    seconds, _ = queue.client.time()
    tick = (seconds - 19 * 3600) * 1000
    store.pass_ticks(queue, "digest", None, tick, [], by="host-a:42")  # passed, no job
    digest = row(client.get("/schedules").get_data(as_text=True), "digest")
    last = text(digest.split('class="last-tick">')[1].split("</td>")[0])
    # (A loaded host may render the page a second or more after the tick it reads.)
    words = r"none run yet a tick passed without a job 19h( 0m)?( \d+s)? ago"
    assert re.fullmatch(words, last), last
    assert "none yet" in text(digest)  # no job enqueued


def test_run_now_is_counted(client, schedules):
    for _ in range(2):
        assert post(client, "/schedules/run", {"id": "stock"}).status_code == 200
    stock = row(client.get("/schedules").get_data(as_text=True), "stock")
    runs = text(stock.split('class="runs">')[1].split("</td>")[0])
    assert runs == "0 + 2 run now"
