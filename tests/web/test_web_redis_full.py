"""The dashboard on a full Redis (``maxmemory`` reached under ``noeviction``): every page
still answers, and a banner says Redis is full and what that means, also when lowkiq has
written nothing there yet (its queues' layouts cannot be written)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from web_support import MailWorker, OrderWorker

import lowkiq
from lowkiq.clients.embedded import redis_server_binary, start_server
from lowkiq_web import create_app, overview


@pytest.fixture
def full_redis(tmp_path: Path) -> Iterator[str]:
    """The URL of a Redis of the test's own that is full before lowkiq writes anything."""
    server = start_server(
        tmp_path / "full",
        binary=redis_server_binary(prefer_path=True),
        config=["--maxmemory", "1", "--maxmemory-policy", "noeviction"],
    )
    lowkiq.settings.reset()
    lowkiq.settings.redis = lambda: redis.Redis.from_url(server.url)
    lowkiq.settings.workers = [OrderWorker, MailWorker]
    overview._policy_read["at"] = float("-inf")  # read the memory afresh
    try:
        yield server.url
    finally:
        lowkiq.settings.reset()
        overview._policy_read["at"] = float("-inf")
        server.stop()


@pytest.mark.parametrize(
    "path", ["/", "/OrderWorker/enqueued", "/OrderWorker/dead", "/processes", "/history"]
)
def test_every_page_answers_and_says_redis_is_full(full_redis: str, path: str) -> None:
    app = create_app()
    app.testing = True
    page = app.test_client().get(path)
    assert page.status_code == 200, page.get_data(as_text=True)[:2000]
    text = page.get_data(as_text=True)
    assert "Redis is full (maxmemory 1B" in text
    assert "new jobs are refused" in text
