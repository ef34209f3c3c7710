"""Plain words in the job cells: a retry count as "fresh" or "retry 3", times as "in 59m"
or "3s ago" with the exact UTC time on hover; never a raw epoch or ``-1 [fresh]`` in the
text people read (issue 30)."""

from __future__ import annotations

import html as html_module
import re
import time

import pytest
from web_support import LONG_AGO, OrderWorker, bury, enqueue, fail_all, hold

from lowkiq_web import formatting


def visible_text(html: str) -> str:
    """The text a reader sees: tags (and their attributes, tooltips included) removed, and
    the payloads' scores (the app's own numbers, by default a creation time: shown as given)."""
    html = re.sub(r'<span class="score"[^>]*>[^<]*</span>', " ", html)
    return html_module.unescape(re.sub(r"<[^>]*>", " ", html))


#: A unix timestamp of this century, as a page would print it raw.
EPOCH = re.compile(r"\b1[6-9]\d{8}(\.\d+)?\b")


def test_retry_words_and_their_tooltips():
    assert formatting.retry_label(-1) == "fresh"
    assert formatting.retry_label(0) == "retry 1"
    assert formatting.retry_label(2) == "retry 3"
    assert formatting.retry_title(-1) == "never failed (retry_count -1 [fresh])"
    assert formatting.retry_title(0) == "failed once (retry_count 0 [retry])"
    assert formatting.retry_title(2) == "failed 3 times (retry_count 2 [retry])"
    assert formatting.machine_time(0) == "1970-01-01T00:00:00Z"
    assert formatting.machine_time(1e20) == ""


def fail_times(ids: list[str], times: int) -> None:
    """Fail the jobs ``ids`` (due now) ``times`` times: retry_count ``times - 1``."""
    for _ in range(times):
        OrderWorker.actions().perform_now(ids)
        fail_all(OrderWorker, "boom")


@pytest.fixture
def jobs_everywhere(client):
    """Fresh and scheduled jobs, retries (retry_count 0 and 2), dead jobs and a busy one."""
    enqueue(OrderWorker, 2, prefix="s")  # fresh, due in an hour
    once = enqueue(OrderWorker, 1, prefix="r1-", perform_in=LONG_AGO)
    fail_all(OrderWorker)
    thrice = enqueue(OrderWorker, 1, prefix="r3-", perform_in=LONG_AGO)
    fail_times(thrice, 3)
    bury(OrderWorker, 2)
    OrderWorker.perform_async([{"id": "busy-1", "perform_in": LONG_AGO}])
    assert hold(OrderWorker, OrderWorker.queue().shard_of("busy-1")) == ["busy-1"]
    return {"once": once[0], "thrice": thrice[0]}


@pytest.mark.parametrize("kind", ["enqueued", "retries", "scheduled", "dead", "busy"])
def test_list_pages_show_words_and_relative_times_not_raw_values(client, jobs_everywhere, kind):
    html = client.get(f"/OrderWorker/{kind}").get_data(as_text=True)
    text = visible_text(html)
    assert re.findall(r'<tr class="job"', html), "the list is not empty"
    assert not EPOCH.search(text), f"a raw timestamp shows: {EPOCH.search(text).group(0)}"
    assert "[fresh]" not in text and "[retry]" not in text
    # Every time: a relative text in a <time> with the exact UTC time on hover.
    times = re.findall(
        r'<time class="when" datetime="([^"]+)" title="([^"]+)">([^<]+)</time>', html
    )
    assert times or kind == "busy", "no time shown"  # busy: its start, when a process reports it
    for machine, title, shown in times:
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", machine)
        assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC \(unix [\d.]+\)", title)
        assert re.fullmatch(r"in \S.*|\S.* ago", shown), shown
    if kind == "dead":
        return
    retry_cells = re.findall(r'<span class="retry[^"]*" title="([^"]+)">([^<]+)</span>', html)
    assert retry_cells
    words = {shown for _, shown in retry_cells}
    expected = {
        "enqueued": {"fresh", "retry 1", "retry 3"},
        "retries": {"retry 1", "retry 3"},
        "scheduled": {"fresh", "retry 1", "retry 3"},
        "busy": {"fresh"},
    }[kind]
    assert words == expected
    if kind == "retries":
        assert ("failed 3 times (retry_count 2 [retry])", "retry 3") in retry_cells


def test_the_job_page_shows_words_and_relative_times(client, jobs_everywhere):
    html = client.get("/OrderWorker/job", query_string={"id": jobs_everywhere["thrice"]})
    page = html.get_data(as_text=True)
    text = visible_text(page)
    assert "retry 3" in text and not EPOCH.search(text) and "[retry]" not in text
    shown = re.search(r'<dt>Perform in</dt><dd><time class="when"[^>]*>([^<]+)</time>', page)
    assert shown and re.fullmatch(r"in (59m|1h)( \d+s)?", shown.group(1)), shown
    dead = client.get("/OrderWorker/job", query_string={"id": "d0000"}).get_data(as_text=True)
    died = r'<dt>Died</dt><dd class="died-at"><time class="when"[^>]*>\S+ ago</time>'
    assert re.search(died, dead)
    assert not EPOCH.search(visible_text(dead))


def test_a_time_shows_its_exact_utc_time_on_hover(client):
    at = 1_900_000_000.0  # 2030-03-17 17:46:40 UTC
    OrderWorker.perform_async([{"id": "later", "perform_in": at}])
    html = client.get("/OrderWorker/scheduled").get_data(as_text=True)
    title = "2030-03-17 17:46:40 UTC (unix 1900000000.0)"
    found = re.search(
        rf'<time class="when" datetime="2030-03-17T17:46:40Z" title="{re.escape(title)}">'
        r"in ([^<]+)</time>",
        html,
    )
    assert found, html
    days = (at - time.time()) // 86400
    assert found.group(1).startswith(f"{days:.0f}d")
