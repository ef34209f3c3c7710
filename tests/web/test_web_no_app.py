"""A dashboard whose web process has not imported the app (``flask run`` without it) while
real ``lowkiq worker`` processes serve queues: it says so and names those queues."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

import lowkiq
from lowkiq_web import create_app
from tests.apps.runner import WorkerProcess

PAGES = ("/", "/live", "/processes", "/history")


def test_without_the_app_every_page_names_the_queues_the_live_processes_serve(
    worker_processes: Callable[..., WorkerProcess], recorder: type
) -> None:
    worker_processes()
    lowkiq.settings.workers = []  # a web process that did not import the app
    client = create_app().test_client()
    for url in PAGES:
        html = " ".join(client.get(url).get_data(as_text=True).split())
        assert "This web process has not imported the app" in html, url
        assert "while 1 live worker process serves 1 queue:" in html, url
        assert re.search(r"<span data-served-queues>Recorder</span>", html), url
        assert "lowkiq web -r APP" in html, url


@pytest.mark.parametrize("url", PAGES)
def test_without_the_app_or_live_processes_it_says_no_workers(redis_client, url):
    lowkiq.settings.workers = []
    html = " ".join(create_app().test_client().get(url).get_data(as_text=True).split())
    assert "No workers: this web process knows none" in html
    assert "has not imported the app" not in html
