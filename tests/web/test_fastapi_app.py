"""The FastAPI example under a real uvicorn with a real ``lowkiq worker`` beside it: its
async endpoints enqueue with ``aperform_async`` and read with ``aqueries`` and
``ametrics``; the worker runs the jobs (an ``async def perform``); the dashboard, a
Flask app mounted in the ASGI app at ``/lowkiq``, answers with the worker and the live
process listed and every link under its mount."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from lowkiq.clients.embedded_cluster import free_port
from tests.apps.runner import ROOT, WorkerProcess, eventually

WELCOMED = "fastapi-example:welcomed"


def call(url: str, body: Any = None) -> tuple[int, str]:
    """Status and text of a GET (or a POST of ``body`` as JSON)."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


@pytest.fixture
def web(redis_client: redis.Redis, redis_url: str) -> Iterator[str]:
    """The example served by uvicorn on a free port: its base URL."""
    port = free_port()
    log = tempfile.NamedTemporaryFile(prefix="uvicorn-", suffix=".log", delete=False)  # noqa: SIM115
    server = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "examples.fastapi_app.app:app", "--port", str(port)],
        env={**os.environ, "REDIS_URL": redis_url, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"

    def up() -> bool:
        assert server.poll() is None, Path(log.name).read_text()
        try:
            return call(f"{base}/queue")[0] == 200
        except OSError:
            return False

    try:
        eventually(up, timeout=60, interval=0.1)
        yield base
    finally:
        server.terminate()
        server.wait(10)
        log.close()
        os.unlink(log.name)


def test_the_fastapi_example_enqueues_a_worker_runs_the_jobs_and_the_dashboard_lists_them(
    web: str, redis_client: redis.Redis, redis_url: str
) -> None:
    events = [{"account": f"acct-{n % 10}", "email": f"user{n}@example.com"} for n in range(30)]
    assert call(f"{web}/signups", events) == (202, '{"enqueued":30}')
    assert call(f"{web}/signups", [{"account": "x"}])[0] == 422  # no email: refused
    status, text = call(f"{web}/signups/acct-3")
    assert (status, json.loads(text)) == (200, {"account": "acct-3", "events": 3})
    assert json.loads(call(f"{web}/queue")[1])["length"] == 10

    worker = WorkerProcess("-r", "examples.fastapi_app.workers", env={"REDIS_URL": redis_url})
    try:
        worker.wait_started(timeout=60)
        eventually(lambda: len(redis_client.hgetall(WELCOMED)) == 10, timeout=60)
        assert set(redis_client.hgetall(WELCOMED).values()) == {b"3"}
        # A batch's ack rides on its shard's next pop: processed follows a moment later.
        metrics = eventually(
            lambda: (found := json.loads(call(f"{web}/queue")[1]))["processed"] == 10 and found,
            timeout=60,
        )
        assert (metrics["length"], metrics["failed"]) == (0, 0)
        assert call(f"{web}/signups/acct-3")[0] == 404

        status, html = call(f"{web}/lowkiq/")
        assert status == 200
        assert '<tr data-worker="Welcome">' in html
        assert 'href="/lowkiq/processes"' in html
        assert re.search(r'href="/lowkiq/lowkiq-static/lowkiq\.css[^"]*"', html)
        stylesheet = re.search(r'href="(/lowkiq/lowkiq-static/lowkiq\.css[^"]*)"', html)
        assert stylesheet and call(f"{web}{stylesheet.group(1)}")[0] == 200

        status, html = eventually(
            lambda: (
                (answer := call(f"{web}/lowkiq/processes"))[1].count(
                    f">{worker.process.pid}</span>"
                )
                and answer
            ),
            timeout=60,
        )
        assert status == 200
        assert '<tr data-worker="Welcome"' in html

        # An action through the mount: the CSRF cookie is scoped to it, and the POST passes.
        from examples.fastapi_app.workers import Welcome  # (sets lowkiq.settings.workers)

        with urllib.request.urlopen(f"{web}/lowkiq/Welcome/enqueued", timeout=10) as page:
            cookie = page.headers["Set-Cookie"]
        assert "Path=/lowkiq" in cookie
        token = cookie.split(";", 1)[0].split("=", 1)[1]
        pause = urllib.request.Request(
            f"{web}/lowkiq/Welcome/pause",
            data=b"",
            headers={"Cookie": f"lowkiq_csrf={token}", "Origin": web, "X-CSRF-Token": token},
        )
        with urllib.request.urlopen(pause, timeout=10) as answer:
            assert answer.status == 200 and answer.url == f"{web}/lowkiq/Welcome/enqueued"
        assert Welcome.paused()
        Welcome.resume()
    finally:
        worker.close()
