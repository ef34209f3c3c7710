"""A list row shows a job's payloads on one line of compact JSON, cut short, in a
``<details>`` that opens on the full list (no script needed); the job page shows them in
full (issue 30)."""

from __future__ import annotations

import html as html_module
import re

from web_support import LONG_AGO, MailWorker, OrderWorker, bury, hold

from lowkiq_web import formatting


def rows_of(html: str) -> dict[str, str]:
    """Each job row of a list page, by id."""
    rows = re.findall(r'<tr class="job" data-id="([^"]*)">(.*?)</tr>', html, re.S)
    return {html_module.unescape(job_id): row for job_id, row in rows}


def summary_of(row: str) -> str:
    found = re.search(
        r'<details class="payloads-line">\s*<summary><code>([^<]*)</code>(.*?)</summary>', row, re.S
    )
    assert found, row
    return html_module.unescape(found.group(1)) + re.sub(r"<[^>]*>", "", found.group(2))


def test_payloads_line_is_compact_json_cut_at_120_characters():
    assert formatting.payloads_line([[{"b": 1, "a": "x"}, 1.0], [[1, 2], 2.0]]) == (
        '{"a":"x","b":1}, [1,2]'
    )
    long = formatting.payloads_line([["é" * 300, 1.0]])
    assert len(long) == 120 and long == '"' + "é" * 118 + "…"
    assert formatting.payloads_line([[{1, 2}, 1.0]]) == "{1, 2}"  # not JSON: its repr


def test_a_list_row_shows_one_line_and_expands_to_the_full_payloads(client):
    big = {"customer": "c" * 200, "lines": list(range(50))}
    OrderWorker.perform_async(
        [
            {"id": "big", "payload": big, "score": 1},
            {"id": "big", "payload": {"second": True}, "score": 2},
            {"id": "small", "payload": {"n": 1}},
        ]
    )
    html = client.get("/OrderWorker/enqueued").get_data(as_text=True)
    rows = rows_of(html)
    line = summary_of(rows["big"])
    assert line.startswith('{"customer":"ccc') and line.endswith("… (2 payloads)")
    assert len(line.removesuffix(" (2 payloads)")) == 120
    # The full payloads, pretty-printed with their scores, inside the details (closed).
    details = re.search(r'<details class="payloads-line">(.*?)</details>', rows["big"], re.S)
    assert details and '<details class="payloads-line" open' not in rows["big"]
    full = html_module.unescape(details.group(1))
    assert '"customer": "' + "c" * 200 + '"' in full and '"second": true' in full
    assert full.count('<span class="score" title="score">') == 2
    assert summary_of(rows["small"]) == '{"n":1}'  # one payload: no count


def test_the_job_page_keeps_the_full_view(client):
    OrderWorker.perform_async([{"id": "big", "payload": {"customer": "c" * 200}}])
    html = client.get("/OrderWorker/job?id=big").get_data(as_text=True)
    assert "payloads-line" not in html
    assert '<ol class="payloads" start="1">' in html and "c" * 200 in html


def test_the_morgue_and_busy_lists_show_one_line_too(client):
    bury(MailWorker, 1)
    dead = rows_of(client.get("/MailWorker/dead").get_data(as_text=True))
    assert summary_of(dead["d0000"]) == '{"n":0}'
    OrderWorker.perform_async([{"id": "run", "payload": [1, 2, 3], "perform_in": LONG_AGO}])

    hold(OrderWorker, OrderWorker.queue().shard_of("run"))
    busy = rows_of(client.get("/OrderWorker/busy").get_data(as_text=True))
    assert summary_of(busy["run"]) == "[1,2,3]"
