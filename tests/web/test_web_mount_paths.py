"""Where the dashboard can be mounted: at the root of a host app that has its own
``/static``, and only under a URL prefix a browser sends back as given."""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest
from flask import Flask
from test_web_mounting import crawl, urls_of
from web_support import REPO, OrderWorker, enqueue, post
from werkzeug.serving import make_server

from lowkiq.errors import ConfigurationError
from lowkiq_web import create_app, lowkiq_web

ASSET_TYPES = {".css": "text/css", ".js": "javascript"}

#: Prefixes a browser would not send back as given (or Flask would read as a variable).
UNREACHABLE = ["/<x>", "/a;b", "/a/../b", "/..", "/.", "/a/./b", "/é", "/a%2Fb", "/a b"]


def host_app() -> Flask:
    """A host app with its own static folder (Flask's default ``/static`` route)."""
    host = Flask("host", static_folder=str(REPO / "docs"), static_url_path="/static")
    host.secret_key = "host"
    return host


def test_at_the_root_of_an_app_with_its_own_static_every_asset_loads(workers):
    enqueue(OrderWorker, 3)
    host = host_app()
    host.register_blueprint(lowkiq_web)
    client = host.test_client()
    page = client.get("/").get_data(as_text=True)
    assets = [u for u in urls_of(page) if u.endswith((".css", ".js"))]
    assert len(assets) >= 3  # the stylesheet, htmx and lowkiq.js
    for url in assets:
        response = client.get(url)
        assert response.status_code == 200, url
        kind = ASSET_TYPES[url[url.rindex(".") :]]
        assert kind in response.headers["Content-Type"], url
    assert client.get("/static/dashboard.png").status_code == 200  # the host's own
    crawl(client.get, "/", "")
    assert post(client, "/OrderWorker/enqueued/clear").status_code == 200


def test_a_host_route_that_answers_the_assets_is_logged(workers, caplog):
    host = Flask("host")

    @host.get("/lowkiq-static/<path:name>")
    def mine(name: str) -> str:
        return name

    with caplog.at_level(logging.ERROR, logger="lowkiq_web"):
        host.register_blueprint(lowkiq_web)
    assert "/lowkiq-static/lowkiq.css is answered by the host app's 'mine'" in caplog.text


@pytest.fixture
def root_server() -> Iterator[str]:
    """The dashboard at the root of :func:`host_app`, served over HTTP in a thread."""
    host = host_app()
    host.register_blueprint(lowkiq_web)
    server = make_server("127.0.0.1", 0, host, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()


def test_at_the_root_a_browser_gets_the_style_htmx_and_the_chart(browser, root_server, workers):
    context = browser.new_context()
    page = context.new_page()
    failed: list[str] = []
    page.on("response", lambda r: failed.append(r.url) if r.status >= 400 else None)
    try:
        page.goto(root_server + "/")
        page.wait_for_function("() => window.htmx !== undefined && window.uPlot !== undefined")
        header = page.locator("header.top")
        assert header.evaluate("e => getComputedStyle(e).display") == "flex"
        assert not failed
    finally:
        context.close()


@pytest.mark.parametrize("prefix", UNREACHABLE)
def test_create_app_refuses_a_prefix_a_browser_cannot_reach(prefix):
    with pytest.raises(ConfigurationError, match="must be a path such as /lowkiq"):
        create_app(url_prefix=prefix)


@pytest.mark.parametrize("prefix", UNREACHABLE)
def test_registering_under_a_prefix_a_browser_cannot_reach_is_an_error(prefix):
    with pytest.raises(ConfigurationError, match="lowkiq_web's url_prefix must be a path"):
        Flask("host").register_blueprint(lowkiq_web, url_prefix=prefix)


@pytest.mark.parametrize("prefix", ["/lowkiq", "/admin/jobs-1.2_x~y/", "/"])
def test_a_plain_prefix_serves_pages_and_actions(prefix, workers):
    enqueue(OrderWorker, 2)
    client = create_app(url_prefix=prefix).test_client()
    base = prefix.rstrip("/")
    assert client.get(base + "/").status_code == 200
    response = post(client, "/OrderWorker/enqueued/clear", prefix=base)
    assert response.status_code == 200
    assert OrderWorker.metrics()["length"] == 0


@pytest.mark.parametrize("prefix", ["/<x>", "/a;b", "/a/../b", "/.."])
def test_lowkiq_web_refuses_an_unreachable_prefix_at_start(prefix, redis_url, tmp_path):
    app = tmp_path / "app.py"
    app.write_text("import lowkiq\nlowkiq.settings.workers = []\n")
    env = {"REDIS_URL": redis_url, "PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-m", "lowkiq", "web", "-r", str(app), "--url-prefix", prefix],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("Error: --url-prefix (LOWKIQ_WEB_URL_PREFIX) must be a path such as")
    assert repr(prefix) in line and not done.stdout
