"""Fixtures of the dashboard tests: worker classes, the Flask app and client, CSRF-aware POSTs,
jobs put into the morgue or the processing area, and (for browser tests) headless Chromium.

Chromium is Debian's ``/usr/bin/chromium``, driven by Playwright for Python with
``executable_path`` (Playwright's own browser download is never used).  When it
is missing the browser tests are skipped, except under ``CI=true`` where they
fail loudly (``.ci/run`` installs it).
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from flask import Flask
from flask.testing import FlaskClient
from web_support import MailWorker, OrderWorker
from werkzeug.serving import BaseWSGIServer, make_server

import lowkiq
from lowkiq_web import create_app, unserved

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(autouse=True)
def fresh_unserved_reading() -> None:
    """Each test's pages read the shards' owners afresh (a web process keeps them for a
    few seconds: :mod:`lowkiq_web.unserved`)."""
    unserved.reset()


@pytest.fixture
def workers(redis_client: redis.Redis) -> list[type[lowkiq.Worker]]:
    """Both test workers, registered in ``lowkiq.settings`` on a flushed Redis."""
    lowkiq.settings.workers = [OrderWorker, MailWorker]
    return [OrderWorker, MailWorker]


@pytest.fixture
def app(workers: list[type[lowkiq.Worker]]) -> Flask:
    """The standalone dashboard app."""
    app = create_app()
    app.testing = True
    return app


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    """A test client of :func:`app`."""
    return app.test_client()


# -- browser ---------------------------------------------------------------


def find_chromium() -> str:
    """Debian's Chromium (``/usr/bin/chromium``, or ``chromium`` on PATH).

    The tests never install it (``.ci/run`` does): without it the browser tests
    are skipped, except under ``CI=true`` where they fail loudly.
    """
    found = CHROMIUM if os.path.exists(CHROMIUM) else shutil.which("chromium")
    if found:
        return found
    reason = (
        f"browser tests need Chromium: neither {CHROMIUM} nor chromium on PATH was found "
        "(Debian: apt-get install chromium)"
    )
    if os.environ.get("CI") == "true":
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    """One headless Chromium for the whole session."""
    executable = find_chromium()
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        if os.environ.get("CI") == "true":
            pytest.fail("browser tests need the playwright package (the test extra)")
        pytest.skip("browser tests need the playwright package (the test extra)")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture(scope="session")
def live_server() -> Iterator[str]:
    """The dashboard served over HTTP on 127.0.0.1 in a thread, mounted at ``/lowkiq``.

    It reads ``lowkiq.settings`` per request, so each test's workers and Redis apply.
    """
    host = Flask("host")
    host.secret_key = "browser-tests"
    from lowkiq_web import lowkiq_web

    host.register_blueprint(lowkiq_web, url_prefix="/lowkiq")
    server: BaseWSGIServer = make_server("127.0.0.1", 0, host, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/lowkiq"
    finally:
        server.shutdown()


@pytest.fixture
def page(browser: Any, live_server: str, workers: list[type[lowkiq.Worker]]) -> Iterator[Any]:
    """A fresh browser page; console errors (CSP violations included) fail the test."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.console_errors = errors  # a test expecting an error clears it
    try:
        yield page
        assert not errors, f"browser console errors: {errors}"
    finally:
        context.close()
