"""The dashboard in the Django URLconf, behind Django's authentication: staff only by
default, anonymous visitors sent to the login page, actions working through Django."""

from __future__ import annotations

from typing import Any

import pytest
import redis


@pytest.fixture
def users(django_lowkiq: redis.Redis) -> Any:
    """A staff user, a plain user and a superuser (made again for each test)."""
    from django.contrib.auth.models import User

    User.objects.all().delete()
    return {
        "staff": User.objects.create_user("staff", password="x", is_staff=True),
        "plain": User.objects.create_user("plain", password="x"),
        "root": User.objects.create_superuser("root", password="x"),
    }


def client_of(user: Any = None) -> Any:
    from django.test import Client

    client = Client()
    if user is not None:
        client.force_login(user)
    return client


def test_an_anonymous_visitor_is_sent_to_the_login_page(users: Any) -> None:
    response = client_of().get("/lowkiq/")
    assert response.status_code == 302
    assert response["Location"] == "/accounts/login/?next=/lowkiq/"
    assert client_of().get("/lowkiq/lowkiq-static/lowkiq.css").status_code == 302


def test_staff_see_the_dashboard_with_the_project_s_workers(users: Any) -> None:
    from tests.contrib_django.project.shop.jobs import Recorded

    Recorded.perform_async([{"id": "shown", "payload": 1}])
    client = client_of(users["staff"])
    page = client.get("/lowkiq/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "Recorded" in html
    # Links and assets live under the mount point.
    assert 'href="/lowkiq/' in html
    style = client.get("/lowkiq/lowkiq-static/lowkiq.css")
    assert style.status_code == 200 and style["Content-Type"].startswith("text/css")
    queue = client.get("/lowkiq/Recorded/enqueued")
    assert queue.status_code == 200 and "shown" in queue.content.decode()


def test_a_signed_in_user_who_is_not_allowed_gets_403(users: Any) -> None:
    assert client_of(users["plain"]).get("/lowkiq/").status_code == 403
    # A dashboard mounted for superusers only.
    assert client_of(users["staff"]).get("/admin-only/lowkiq/").status_code == 403
    assert client_of(users["root"]).get("/admin-only/lowkiq/").status_code == 200


def test_each_mount_has_its_url_name_and_the_project_passes_its_checks(users: Any) -> None:
    from django.core.management import call_command
    from django.urls import reverse

    assert reverse("lowkiq:dashboard", kwargs={"rest": ""}) == "/lowkiq/"
    assert reverse("lowkiq-admin-only:dashboard", kwargs={"rest": "x"}) == "/admin-only/lowkiq/x"
    call_command("check", fail_level="WARNING")


def test_a_dashboard_action_posts_through_django(users: Any) -> None:
    from tests.contrib_django.project.shop.jobs import Recorded

    client = client_of(users["staff"])
    assert client.get("/lowkiq/").status_code == 200
    token = client.cookies["lowkiq_csrf"]
    assert token["path"] == "/lowkiq/"
    headers = {"X-CSRF-Token": token.value, "Origin": "http://testserver"}
    refused = client.post("/lowkiq/Recorded/pause", headers={"Origin": "http://testserver"})
    assert refused.status_code == 403 and not Recorded.paused()
    done = client.post("/lowkiq/Recorded/pause", headers=headers)
    assert done.status_code == 303, done.content
    assert done["Location"] == "/lowkiq/Recorded/enqueued"
    assert Recorded.paused()
    anonymous = client_of().post("/lowkiq/Recorded/resume", headers=headers)
    assert anonymous.status_code == 302 and Recorded.paused()


def test_the_dashboard_answers_under_asgi_too(users: Any) -> None:
    import asyncio

    from django.test import AsyncClient

    async def fetch() -> tuple[int, str, int]:
        client = AsyncClient()
        await client.aforce_login(users["staff"])
        page = await client.get("/lowkiq/")
        style = await client.get("/lowkiq/lowkiq-static/lowkiq.css")
        return page.status_code, page.content.decode(), style.status_code

    status, html, style = asyncio.run(fetch())
    assert (status, style) == (200, 200)
    assert 'href="/lowkiq/' in html
