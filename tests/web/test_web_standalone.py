"""The standalone dashboard's options: HTTP basic auth, a URL prefix (pages, actions and
static files under it), and the app loaded from ``LOWKIQ_APP``; in ``create_app`` and
in a real ``lowkiq web`` process."""

from __future__ import annotations

import base64
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_web_mounting import _free_port, crawl
from web_support import REPO, OrderWorker, bury, enqueue, post

from lowkiq.cli import main
from lowkiq.errors import ConfigurationError
from lowkiq_web import create_app

PASSWORD = "pa:ss w0rd"


def basic(user: str, password: str) -> dict[str, str]:
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


def test_basic_auth_answers_401_without_the_right_credentials(workers):
    client = create_app(basic_auth=f"admin:{PASSWORD}").test_client()
    for headers in ({}, basic("admin", "wrong"), basic("Admin", PASSWORD), basic("admin", "")):
        response = client.get("/", headers=headers)
        assert response.status_code == 401
        assert response.headers["WWW-Authenticate"] == 'Basic realm="lowkiq", charset="UTF-8"'
        assert client.get("/static/lowkiq.css", headers=headers).status_code == 401
        assert client.get("/api/v1/stats", headers=headers).status_code == 401
    assert client.get("/", headers={"Authorization": "Bearer x"}).status_code == 401
    assert client.get("/", headers=basic("admin", PASSWORD)).status_code == 200


def test_with_basic_auth_pages_and_actions_work(workers, monkeypatch):
    monkeypatch.setenv("LOWKIQ_WEB_BASIC_AUTH", f"admin:{PASSWORD}")
    client = create_app().test_client()
    assert client.get("/").status_code == 401
    client.environ_base["HTTP_AUTHORIZATION"] = basic("admin", PASSWORD)["Authorization"]
    bury(OrderWorker, 2)
    assert post(client, "/OrderWorker/dead/delete_all").status_code == 200
    assert OrderWorker.metrics()["morgue_length"] == 0


@pytest.mark.parametrize("value", ["admin", "admin:", ":secret", ""])
def test_a_bad_basic_auth_value_is_refused_without_showing_it(value):
    with pytest.raises(ConfigurationError) as caught:
        create_app(basic_auth=value)
    assert "user:password" in str(caught.value)
    assert "secret" not in str(caught.value)


def test_a_url_prefix_serves_pages_actions_and_static_files_under_it(workers):
    enqueue(OrderWorker, 5)
    bury(OrderWorker, 2)
    client = create_app(url_prefix="/lowkiq/").test_client()
    seen = crawl(client.get, "/lowkiq/", "/lowkiq")
    assert "/lowkiq/lowkiq-static/lowkiq.css" in seen
    assert any("/lowkiq/OrderWorker/enqueued" in url for url in seen)
    css = client.get("/lowkiq/static/lowkiq.css")
    assert css.status_code == 200 and css.data == (REPO / "static/lowkiq/lowkiq.css").read_bytes()
    assert client.get("/lowkiq/api/v1/stats").get_json()["total"]["length"] == 5
    root = client.get("/")
    assert root.status_code == 302 and root.headers["Location"] == "/lowkiq/"
    assert client.get("/OrderWorker/enqueued").status_code == 404
    assert client.get("/static/lowkiq.css").status_code == 404
    assert post(client, "/OrderWorker/dead/delete_all", prefix="/lowkiq").status_code == 200
    assert OrderWorker.metrics()["morgue_length"] == 0


def test_the_url_prefix_may_come_from_the_environment(workers, monkeypatch):
    monkeypatch.setenv("LOWKIQ_WEB_URL_PREFIX", "/admin/jobs")
    client = create_app().test_client()
    assert client.get("/admin/jobs/").status_code == 200
    assert client.get("/admin/jobs/static/lowkiq.css").status_code == 200


@pytest.mark.parametrize("prefix", ["lowkiq", "/a b", "/x?y=1", "//evil.example", "/a#b"])
def test_a_bad_url_prefix_is_refused(prefix):
    with pytest.raises(ConfigurationError, match="must be a path such as /lowkiq"):
        create_app(url_prefix=prefix)


def test_create_app_loads_the_app_named_by_lowkiq_app(redis_client, tmp_path, monkeypatch):
    import lowkiq

    (tmp_path / "standalone_app_7f3.py").write_text(APP)
    monkeypatch.setenv("LOWKIQ_APP", str(tmp_path / "standalone_app_7f3.py"))
    lowkiq.settings.workers = []
    page = create_app().test_client().get("/").get_data(as_text=True)
    assert "InvoiceWorker" in page and [w.__name__ for w in lowkiq.settings.workers] == [
        "InvoiceWorker"
    ]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--url-prefix", "lowkiq"], "Error: --url-prefix (LOWKIQ_WEB_URL_PREFIX) must be a path"),
        (["--basic-auth", "admin"], "Error: --basic-auth (LOWKIQ_WEB_BASIC_AUTH) must be"),
        (["--basic-auth", ":secret"], "Error: --basic-auth (LOWKIQ_WEB_BASIC_AUTH) must be"),
    ],
)
def test_lowkiq_web_refuses_a_bad_option_in_one_line(args, says, redis_url):
    result = CliRunner().invoke(
        main, ["web", "-r", "tests/web/web_support.py", *args], env={"REDIS_URL": redis_url}
    )
    assert result.exit_code == 2
    [line] = result.output.strip().splitlines()
    assert line.startswith(says) and "secret" not in line


def test_lowkiq_web_without_an_app_is_a_one_line_error(redis_url):
    result = CliRunner().invoke(main, ["web"], env={"REDIS_URL": redis_url, "LOWKIQ_APP": ""})
    assert result.exit_code == 2
    assert result.output.strip() == (
        "Error: give the app: -r/--require PATH_OR_MODULE, or set LOWKIQ_APP"
    )


APP = """
import lowkiq

class InvoiceWorker(lowkiq.Worker):
    shards_count = 2

lowkiq.settings.workers = [InvoiceWorker]
"""


def _get(url: str, headers: dict[str, str] | None = None) -> tuple[int, bytes, dict[str, str]]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, response.read(), dict(response.headers)
    except urllib.error.HTTPError as error:
        return error.code, error.read(), dict(error.headers)


def _wait_for_any_answer(url: str, process: subprocess.Popen, deadline: float = 30.0) -> None:
    end = time.monotonic() + deadline
    while True:
        try:
            _get(url)
            return
        except OSError:
            if process.poll() is not None or time.monotonic() > end:
                raise
            time.sleep(0.1)


@pytest.mark.parametrize("command", ["lowkiq web", "gunicorn"])
def test_a_standalone_dashboard_lists_the_workers_of_lowkiq_app(
    command, workers, redis_url, tmp_path: Path
):
    (tmp_path / "billing.py").write_text(APP)
    port = _free_port()
    if command == "gunicorn":
        args = ["-m", "gunicorn", "-b", f"127.0.0.1:{port}", "lowkiq_web:create_app()"]
    else:
        args = ["-m", "lowkiq", "web", "--port", str(port), "--processes", "1"]
    env = {
        "REDIS_URL": redis_url,
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(REPO),
        "LOWKIQ_APP": str(tmp_path / "billing.py"),
        "LOWKIQ_WEB_URL_PREFIX": "/lowkiq",
        "LOWKIQ_WEB_BASIC_AUTH": f"ops:{PASSWORD}",
    }
    log = tmp_path / "web.log"
    with log.open("w") as output:
        process = subprocess.Popen(
            [sys.executable, *args], cwd=tmp_path, env=env, stdout=output, stderr=output
        )
    try:
        base = f"http://127.0.0.1:{port}/lowkiq"
        auth = basic("ops", PASSWORD)
        _wait_for_any_answer(f"{base}/", process)
        status, _, headers = _get(f"{base}/", {})
        assert status == 401 and headers["WWW-Authenticate"].startswith("Basic ")
        status, body, _ = _get(f"{base}/", auth)
        assert status == 200 and b"InvoiceWorker" in body
        status, body, _ = _get(f"{base}/api/v1/stats", auth)
        assert status == 200 and b'"InvoiceWorker"' in body
        status, body, _ = _get(f"{base}/static/lowkiq.css", auth)
        assert status == 200 and body == (REPO / "static/lowkiq/lowkiq.css").read_bytes()
    finally:
        process.terminate()
        process.wait(10)
    assert PASSWORD not in log.read_text()
