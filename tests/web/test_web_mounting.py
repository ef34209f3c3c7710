"""The three ways to mount the dashboard; every link, form and static URL honours the prefix."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
from flask import Flask
from web_support import REPO, OrderWorker, bury, enqueue, post
from werkzeug.middleware.dispatcher import DispatcherMiddleware
from werkzeug.test import Client

from lowkiq_web import create_app, lowkiq_web

URL_ATTRIBUTES = re.compile(r'\s(?:href|src|action|hx-get|hx-post)="([^"]*)"')


def urls_of(html: str) -> list[str]:
    """Every URL a page links, loads or posts to."""
    found = URL_ATTRIBUTES.findall(html)
    return [u.replace("&amp;", "&") for u in found if not u.startswith("data:")]


def crawl(get, start: str, prefix: str) -> set[str]:
    """Fetch the pages reachable from ``start``; assert every URL is under ``prefix`` and works."""
    seen: set[str] = set()
    todo = [start]
    while todo:
        url = todo.pop()
        path = url.split("?")[0]
        form_only = path.endswith("/find") and "?" not in url  # the find-by-id form
        post_only = any(f"/{kind}/" in path for kind in ("dead", "busy", "retries", "scheduled"))
        post_only = post_only or path.endswith(("/pause", "/resume", "/rate-limit", "/add"))
        if url in seen or form_only or post_only:
            continue
        seen.add(url)
        response = get(url)
        assert response.status_code == 200, url
        if "text/html" in response.headers.get("Content-Type", ""):
            for link in urls_of(response.get_data(as_text=True)):
                assert link.startswith(prefix + "/"), f"{url} links outside the mount: {link}"
                if "/enqueued/" not in link and link.count("?") <= 1 and len(seen) < 40:
                    todo.append(link)
    return seen


@pytest.fixture
def jobs(workers):
    """Some jobs everywhere, so every list has rows and links."""
    enqueue(OrderWorker, 30)
    bury(OrderWorker, 3)


def test_register_blueprint_with_url_prefix(workers, jobs):
    host = Flask("host")
    host.register_blueprint(lowkiq_web, url_prefix="/admin/lowkiq")

    @host.get("/")
    def home() -> str:
        return "host home"

    client = host.test_client()
    assert client.get("/").get_data(as_text=True) == "host home"
    seen = crawl(client.get, "/admin/lowkiq/", "/admin/lowkiq")
    assert "/admin/lowkiq/lowkiq-static/htmx-2.0.11.min.js" in seen
    assert any("/OrderWorker/enqueued" in url for url in seen)
    assert any("/OrderWorker/dead" in url for url in seen)
    response = post(client, "/OrderWorker/dead/delete_all", prefix="/admin/lowkiq")
    assert response.status_code == 200


def test_dispatcher_middleware(workers, jobs):
    host = Flask("host")
    host.wsgi_app = DispatcherMiddleware(host.wsgi_app, {"/lowkiq": create_app()})
    client = host.test_client()
    seen = crawl(client.get, "/lowkiq/", "/lowkiq")
    assert "/lowkiq/lowkiq-static/lowkiq.css" in seen
    assert client.get("/lowkiq/api/v1/stats").get_json()["total"]["length"] == 30
    response = post(client, "/OrderWorker/dead/queue_up_all", prefix="/lowkiq")
    assert response.status_code == 200
    fragment = response.get_data(as_text=True)
    assert urls_of(fragment) and all(url.startswith("/lowkiq/") for url in urls_of(fragment))


def test_standalone_create_app_at_the_root(workers, jobs):
    client = Client(create_app())
    seen = crawl(client.get, "/", "")
    assert "/lowkiq-static/htmx-2.0.11.min.js" in seen


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_for(url: str, process: subprocess.Popen, deadline: float = 30.0) -> bytes:
    end = time.monotonic() + deadline
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                return response.read()
        except OSError:
            if process.poll() is not None or time.monotonic() > end:
                raise
            time.sleep(0.1)


def _serve(args: list[str], url: str, redis_url: str) -> bytes:
    env = {"REDIS_URL": redis_url, "PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)}
    process = subprocess.Popen(
        args, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        return _wait_for(url, process)
    finally:
        process.terminate()
        process.wait(10)


def test_gunicorn_serves_create_app(workers, redis_url):
    enqueue(OrderWorker, 2)
    port = _free_port()
    body = _serve(
        [sys.executable, "-m", "gunicorn", "-b", f"127.0.0.1:{port}", "lowkiq_web:create_app()"],
        f"http://127.0.0.1:{port}/api/v1/stats",
        redis_url,
    )
    assert b'"by_worker"' in body


def test_lowkiq_web_command(workers, redis_url, tmp_path):
    app = tmp_path / "app.py"
    app.write_text(
        "import lowkiq\n"
        "class OrderWorker(lowkiq.Worker):\n"
        "    shards_count = 3\n"
        "lowkiq.settings.workers = [OrderWorker]\n"
    )
    enqueue(OrderWorker, 2)
    port = _free_port()
    body = _serve(
        [
            sys.executable,
            "-m",
            "lowkiq",
            "web",
            "-r",
            str(app),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        f"http://127.0.0.1:{port}/api/v1/stats",
        redis_url,
    )
    assert b'"OrderWorker":{"lag"' in body.replace(b" ", b"").replace(b"\n", b"")
