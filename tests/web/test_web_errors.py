"""Error pages: 404 unknown worker, 400 bad parameter, 503 Redis unreachable; never a 500."""

from __future__ import annotations

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry
from web_support import OrderWorker, post

import lowkiq


@pytest.mark.parametrize(
    "url", ["/NoSuchWorker/enqueued", "/NoSuchWorker/dead", "/NoSuchWorker/busy", "/Nope/job?id=1"]
)
def test_unknown_worker_is_a_404_page(client, url):
    response = client.get(url)
    assert response.status_code == 404
    html = response.get_data(as_text=True)
    assert "no worker named" in html and "Traceback" not in html


def test_unknown_worker_action_is_404(client):
    assert post(client, "/NoSuchWorker/dead/delete_all").status_code == 404


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("/OrderWorker/enqueued?by=color", "by must be one of"),
        ("/OrderWorker/enqueued?dir=up", "dir must be asc or desc"),
        ("/OrderWorker/enqueued?per=7", "per must be one of 25, 100, 500"),
        ("/OrderWorker/enqueued?by=perform_in&from=soon", "from must be a number"),
        ("/OrderWorker/enqueued?by=perform_in&from=nan", "from must be a number"),
        ("/OrderWorker/enqueued?by=perform_in&after=x", "after must be a number"),
        ("/OrderWorker/enqueued?by=perform_in&after=1", "after_id is required"),
        ("/OrderWorker/dead?by=perform_in", "by must be one of updated_at, id"),
        ("/OrderWorker/enqueued?by=id&from=%00", "NUL"),
        ("/OrderWorker/job", "id is required"),
        ("/live?interval=3", "interval must be one of 2, 5, 10, 20"),
        ("/live?paused=maybe", "paused must be"),
        ("/live?history=1:2", "history items must be"),
    ],
)
def test_bad_parameter_is_a_400_with_its_message(client, url, message):
    response = client.get(url)
    assert response.status_code == 400, url
    assert message in response.get_data(as_text=True)


def test_bad_action_parameter_is_400(client):
    assert post(client, "/OrderWorker/dead/job/delete", {"id": ""}).status_code == 400


@pytest.fixture
def redis_down(workers):
    """Point the dashboard at a Redis that is not there (a closed unix socket)."""
    lowkiq.settings.redis = lambda: redis.Redis(
        unix_socket_path="/nonexistent/lowkiq.sock",
        socket_connect_timeout=0.2,
        retry=Retry(NoBackoff(), 0),  # fail at once instead of redis-py's default backoff
    )
    lowkiq.settings.pool_timeout = 0.5


@pytest.mark.parametrize(
    "url",
    ["/", "/live", "/api/v1/stats", "/OrderWorker/enqueued", "/OrderWorker/dead",
     "/OrderWorker/busy", "/OrderWorker/job?id=1"],
)  # fmt: skip
def test_redis_unreachable_is_a_503_page(client, redis_down, url):
    response = client.get(url)
    assert response.status_code == 503
    html = response.get_data(as_text=True)
    assert "Redis is unreachable" in html and "Traceback" not in html


def test_redis_unreachable_on_an_action_is_503(client, redis_down):
    response = post(client, "/OrderWorker/dead/delete_all", token="t" * 43)
    assert response.status_code in (403, 503)  # no cookie yet: the dashboard itself is down
    client.set_cookie("lowkiq_csrf", "t" * 43, path="/")
    response = client.post(
        "/OrderWorker/dead/delete_all",
        data={"csrf_token": "t" * 43},
        headers={"Origin": "http://localhost"},
    )
    assert response.status_code == 503


def test_unknown_page_under_the_blueprint_is_404_not_500(client):
    assert client.get("/OrderWorker/nothing").status_code == 404
    assert OrderWorker.metrics()["length"] == 0
