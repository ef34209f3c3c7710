"""CSRF (same origin AND token), the CSP header, and the signed token with a SECRET_KEY."""

from __future__ import annotations

from flask import Flask
from web_support import MailWorker, OrderWorker, bury, csrf_token, enqueue, post

from lowkiq_web import lowkiq_web


def test_post_without_origin_or_fetch_site_is_refused(client):
    bury(OrderWorker, 1)
    response = post(client, "/OrderWorker/dead/delete_all", origin=None)
    assert response.status_code == 403 and "cross-origin" in response.get_data(as_text=True)
    assert OrderWorker.metrics()["morgue_length"] == 1


def test_cross_origin_post_is_refused(client):
    bury(OrderWorker, 1)
    assert (
        post(client, "/OrderWorker/dead/delete_all", origin="https://evil.example").status_code
        == 403
    )
    token = csrf_token(client)
    cross_site = client.post(
        "/OrderWorker/dead/delete_all",
        data={"csrf_token": token},
        headers={"Sec-Fetch-Site": "cross-site", "Origin": "http://localhost"},
    )
    assert cross_site.status_code == 403
    assert OrderWorker.metrics()["morgue_length"] == 1


def test_same_site_fetch_metadata_passes(client):
    bury(OrderWorker, 1)
    token = csrf_token(client)
    response = client.post(
        "/OrderWorker/dead/delete_all",
        data={"csrf_token": token},
        headers={"Sec-Fetch-Site": "same-origin"},
    )
    assert response.status_code == 303


def test_missing_or_wrong_token_is_refused(client):
    bury(OrderWorker, 1)
    assert post(client, "/OrderWorker/dead/delete_all", token="").status_code == 403
    wrong = post(client, "/OrderWorker/dead/delete_all", token="x" * 43)
    assert wrong.status_code == 403 and "CSRF" in wrong.get_data(as_text=True)
    fresh = client.application.test_client()  # no cookie at all
    response = fresh.post(
        "/OrderWorker/dead/delete_all",
        data={"csrf_token": "a" * 43},
        headers={"Origin": "http://localhost"},
    )
    assert response.status_code == 403
    assert OrderWorker.metrics()["morgue_length"] == 1


def test_move_without_the_token_or_from_another_origin_is_refused(client):
    """Move, from checked rows or the job page, changes two queues: refused, it touches none."""
    ids = enqueue(OrderWorker, 3)
    checked_rows = {"id": ids[:2], "to": "MailWorker"}
    job_page = {"id": ids[2], "to": "MailWorker", "back": "job"}
    for data in (checked_rows, job_page):
        for refused in ({"token": ""}, {"token": "x" * 43}, {"origin": "https://evil.example"}):
            response = post(client, "/OrderWorker/enqueued/selected/move", data, **refused)
            assert response.status_code == 403, refused
        assert OrderWorker.metrics()["length"] == 3 and MailWorker.metrics()["length"] == 0
    assert post(client, "/OrderWorker/enqueued/selected/move", job_page).status_code == 200
    assert MailWorker.metrics()["length"] == 1


def test_token_in_header_is_accepted(client):
    bury(OrderWorker, 1)
    token = csrf_token(client)
    response = client.post(
        "/OrderWorker/dead/delete_all",
        headers={"Origin": "http://localhost", "X-CSRF-Token": token, "HX-Request": "true"},
    )
    assert response.status_code == 200


def test_trusted_origins_setting(workers):
    from lowkiq_web import create_app

    client = create_app(LOWKIQ_WEB_TRUSTED_ORIGINS=["https://ops.example"]).test_client()
    bury(OrderWorker, 1)
    assert (
        post(client, "/OrderWorker/dead/delete_all", origin="https://ops.example").status_code
        == 200
    )


def test_signed_token_when_the_host_has_a_secret_key(workers):
    host = Flask("host")
    host.secret_key = "k" * 32
    host.register_blueprint(lowkiq_web, url_prefix="/lowkiq")
    client = host.test_client()
    token = csrf_token(client, "/lowkiq")
    assert "." in token  # itsdangerous signature
    bury(OrderWorker, 1)
    assert post(client, "/OrderWorker/dead/delete_all", prefix="/lowkiq").status_code == 200
    # A planted, unsigned cookie (e.g. from a sibling sub-domain) is refused.
    client.set_cookie("lowkiq_csrf", "p" * 43, path="/lowkiq/")
    planted = post(client, "/OrderWorker/dead/delete_all", prefix="/lowkiq", token="p" * 43)
    assert planted.status_code == 403


def test_csrf_cookie_is_strict_httponly_and_scoped(workers):
    host = Flask("host")
    host.register_blueprint(lowkiq_web, url_prefix="/lowkiq")
    cookie = host.test_client().get("/lowkiq/").headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/lowkiq/" in cookie


def test_content_security_policy_forbids_inline_script(client):
    response = client.get("/")
    csp = response.headers["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp
    assert response.headers["X-Frame-Options"] == "DENY"
    html = response.get_data(as_text=True)
    assert "<script>" not in html and " on" + "click=" not in html and "style=" not in html
    for src in __import__("re").findall(r"<script ([^>]*)>", html):
        assert "src=" in src


def test_host_app_adds_authentication_with_before_request(workers):
    """The security guide's pattern: a before_request hook that answers 401 without credentials."""
    import hmac

    from flask import Response, request

    from lowkiq_web import create_app

    app = create_app()

    @app.before_request
    def require_login() -> Response | None:
        auth = request.authorization
        if auth and auth.username == "ops" and hmac.compare_digest(auth.password or "", "pw"):
            return None
        return Response("login required", 401, {"WWW-Authenticate": 'Basic realm="lowkiq"'})

    client = app.test_client()
    assert client.get("/").status_code == 401
    assert client.get("/api/v1/stats").status_code == 401
    assert client.get("/", auth=("ops", "pw")).status_code == 200
