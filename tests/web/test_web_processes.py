"""The Processes page with real ``lowkiq worker`` processes: who is live, which shards each
holds, the shards nobody serves, and the quiet and stop buttons."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable
from typing import Any

import pytest
import redis
from flask import Flask
from flask.testing import FlaskClient
from web_support import ARTIFACTS, REPO, post

import lowkiq
from lowkiq.ownership import leases
from lowkiq_web import create_app
from tests.apps.runner import WorkerProcess, eventually


def owned_by(pid: int) -> list[str]:
    """The shards the live process with ``pid`` says it holds ([] when it is not live)."""
    found = next((p for p in lowkiq.processes().processes if p.pid == pid), None)
    return found.shards if found else []


def row(html: str, pid: int) -> str:
    """The page's table row of the process with ``pid``."""
    match = re.search(
        rf'<tr class="process"[^>]*>(?:(?!</tr>).)*?>{pid}</span>.*?</tr>', html, re.S
    )
    assert match, f"no row for pid {pid}"
    return match.group(0)


@pytest.fixture
def dashboard(recorder: type) -> FlaskClient:
    """A test client of the standalone dashboard over the recorder app's worker."""
    app: Flask = create_app()
    app.testing = True
    return app.test_client()


def test_the_page_lists_every_live_process_and_the_shards_it_holds(
    worker_processes: Callable[..., WorkerProcess], recorder: type, dashboard: FlaskClient
) -> None:
    first, second = worker_processes(), worker_processes()
    pids = (first.process.pid, second.process.pid)
    eventually(lambda: sorted(len(owned_by(pid)) for pid in pids) == [2, 3])
    html = dashboard.get("/processes").get_data(as_text=True)
    for pid in pids:
        text = row(html, pid)
        assert "running" in text and "(automatic)" in text
        assert f'<b class="shard-count">{len(owned_by(pid))}</b>' in text
        assert "Recorder: " in text
        assert re.search(r"\d+(\.\d)? (KiB|MiB|GiB)", text), "memory"
        assert " ago</span>" in text, "last heartbeat"
    assert 'id="total-processes">2<' in html
    assert 'id="total-unowned">0<' in html
    assert '<tr data-worker="Recorder">' in html
    assert 'href="/processes" aria-current="page">Processes</a>' in html


def test_quiet_hands_the_shards_to_the_other_process_and_jobs_keep_flowing(
    worker_processes: Callable[..., WorkerProcess],
    recorder: type,
    dashboard: FlaskClient,
    redis_client: redis.Redis,
) -> None:
    quieted, other = worker_processes(), worker_processes()
    pids = (quieted.process.pid, other.process.pid)
    eventually(lambda: sorted(len(owned_by(pid)) for pid in pids) == [2, 3])
    target = next(p for p in lowkiq.processes().processes if p.pid == quieted.process.pid)

    response = post(dashboard, "/processes/quiet", {"id": target.id})
    assert response.status_code == 200
    assert f"{target.host}:{target.pid} is quiet" in response.get_data(as_text=True)

    eventually(lambda: len(owned_by(other.process.pid)) == 5 and not owned_by(pids[0]))
    assert quieted.process.poll() is None, "a quiet process stays up"
    status = lowkiq.processes()
    assert status.find(target.id) is not None and status.find(target.id).quiet
    assert all(not q.unowned for q in status.queues)
    text = row(dashboard.get("/processes").get_data(as_text=True), quieted.process.pid)
    assert '<span class="badge">quiet</span>' in text
    assert 'data-action="quiet"' not in text and 'data-action="stop"' in text

    recorder.perform_async([{"id": f"q{n}", "payload": {"v": 1}} for n in range(20)])
    eventually(lambda: redis_client.llen("test:started") == 20)
    assert redis_client.llen("test:overlaps") == 0


def test_stop_makes_the_process_exit_0_and_the_other_takes_its_shards(
    worker_processes: Callable[..., WorkerProcess], recorder: type, dashboard: FlaskClient
) -> None:
    stopped, other = worker_processes(), worker_processes()
    eventually(lambda: len(owned_by(stopped.process.pid)) in (2, 3))
    target = next(p for p in lowkiq.processes().processes if p.pid == stopped.process.pid)

    response = post(dashboard, "/processes/stop", {"id": target.id}, htmx=False)
    assert response.status_code == 303 and response.location.endswith("/processes")
    assert stopped.wait(30) == 0
    assert "stop requested from the dashboard" in stopped.output()
    eventually(lambda: len(owned_by(other.process.pid)) == 5)
    assert lowkiq.processes().find(target.id) is None


def test_shards_without_a_live_owner_are_flagged(
    recorder: type, dashboard: FlaskClient, redis_client: redis.Redis
) -> None:
    queue = recorder.queue()
    leases.acquire(queue, 3, "gone-host:1234:deadbeef", ttl=60)
    status = lowkiq.processes()
    assert status.processes == []
    (owners,) = status.queues
    assert owners.worker == "Recorder" and owners.unowned == [0, 1, 2, 3, 4]
    assert owners.owners[3] == "gone-host:1234:deadbeef" and owners.owners[0] is None

    html = dashboard.get("/processes").get_data(as_text=True)
    assert 'id="total-unowned" class="bad">5<' in html
    assert '<tr data-worker="Recorder" class="unowned">' in html
    assert "⚠ 0, 1, 2, 3, 4" in html
    assert "gone-host:1234:deadbeef (lapsed; taken over when its lease expires)" in html
    assert "No live worker process" in html


def test_the_live_fragment_refreshes_and_pause_stops_it(
    recorder: type, dashboard: FlaskClient
) -> None:
    html = dashboard.get("/processes/live?interval=10").get_data(as_text=True).strip()
    assert html.startswith('<div id="processes"') and 'hx-trigger="every 10s"' in html
    paused = dashboard.get("/processes/live?interval=10&paused=1").get_data(as_text=True)
    assert 'data-paused="yes"' in paused and "hx-trigger" not in paused.strip().split(">", 1)[0]


@pytest.mark.parametrize(
    ("url", "data", "status", "message"),
    [
        ("/processes/quiet", {"id": "nobody:1:abc"}, 404, "no live process"),
        ("/processes/quiet", {}, 400, "id is required"),
        ("/processes/restart", {"id": "nobody:1:abc"}, 404, "no action"),
    ],
)
def test_bad_process_actions_are_refused_with_a_message(
    recorder: type, dashboard: FlaskClient, url: str, data: dict, status: int, message: str
) -> None:
    response = post(dashboard, url, data)
    assert response.status_code == status
    assert message in response.get_data(as_text=True)


def test_a_bad_interval_is_a_400(recorder: type, dashboard: FlaskClient) -> None:
    response = dashboard.get("/processes?interval=3")
    assert response.status_code == 400
    assert "interval must be one of" in response.get_data(as_text=True)


def test_process_actions_need_the_csrf_token_and_are_hidden_read_only(
    worker_processes: Callable[..., WorkerProcess], recorder: type, dashboard: FlaskClient
) -> None:
    started = worker_processes()
    eventually(lambda: owned_by(started.process.pid))
    (target,) = lowkiq.processes().processes
    refused = post(dashboard, "/processes/stop", {"id": target.id}, token="forged" * 8)
    assert refused.status_code == 403

    read_only = create_app(read_only=True).test_client()
    html = read_only.get("/processes").get_data(as_text=True)
    assert 'data-action="stop"' not in html and "<th>Actions</th>" not in html
    assert post(read_only, "/processes/stop", {"id": target.id}).status_code == 403
    assert started.process.poll() is None
    assert not lowkiq.processes().find(target.id).quiet


def test_in_a_browser_quiet_asks_first_then_the_shards_move(
    page: Any,
    live_server: str,
    worker_processes: Callable[..., WorkerProcess],
    recorder: type,
) -> None:
    """Also kept as docs/processes.png (when missing, or LOWKIQ_UPDATE_SCREENSHOT=1)."""
    expect = pytest.importorskip("playwright.sync_api").expect
    lowkiq.settings.workers = [recorder]
    first, second = worker_processes(), worker_processes()
    pids = (first.process.pid, second.process.pid)
    eventually(lambda: sorted(len(owned_by(pid)) for pid in pids) == [2, 3])
    page.goto(live_server + "/processes?interval=2")
    rows = page.locator("tr.process")
    expect(rows).to_have_count(2)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "processes.png"
    page.screenshot(path=str(shot), full_page=True)
    docs = REPO / "docs" / "processes.png"
    if not docs.exists() or os.environ.get("LOWKIQ_UPDATE_SCREENSHOT") == "1":
        shutil.copyfile(shot, docs)

    mine = page.locator(f'tr.process:has(.pid:text-is("{first.process.pid}"))')
    questions: list[str] = []

    def refuse(dialog: Any) -> None:
        questions.append(dialog.message)
        dialog.dismiss()

    page.once("dialog", refuse)
    mine.locator("button[data-action=quiet]").click()
    page.wait_for_timeout(300)
    assert questions and questions[0].startswith("Quiet ") and "hands its shards" in questions[0]
    assert not lowkiq.processes().find(_id_of(first.process.pid)).quiet

    page.once("dialog", lambda dialog: dialog.accept())
    mine.locator("button[data-action=quiet]").click()
    expect(page.locator("#processes .notice")).to_contain_text("is quiet")
    expect(mine.locator(".state .badge")).to_have_text("quiet")
    expect(mine.locator(".shard-count")).to_have_text("0", timeout=15000)
    other = page.locator(f'tr.process:has(.pid:text-is("{second.process.pid}"))')
    expect(other.locator(".shard-count")).to_have_text("5", timeout=15000)
    expect(page.locator("#total-unowned")).to_have_text("0")


def _id_of(pid: int) -> str:
    return next(p.id for p in lowkiq.processes().processes if p.pid == pid)
