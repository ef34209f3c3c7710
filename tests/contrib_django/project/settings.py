"""The test Django project's settings: :func:`build` gives them as a dict (the in-process
tests pass it to ``settings.configure``); as a settings module (``manage.py``, worker
processes) it reads the same values from the environment."""

from __future__ import annotations

import os
from typing import Any


def build(
    db_dir: str, redis_url: str, postgres: str | None = None, *, conn_max_age: int = 0
) -> dict[str, Any]:
    """The settings: sqlite in ``db_dir``, PostgreSQL (``host:port``, user ``postgres``)
    as the ``pg`` database when given, lowkiq on ``redis_url``."""
    databases: dict[str, Any] = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": os.path.join(db_dir, "db.sqlite3"),
            "CONN_MAX_AGE": conn_max_age,
        }
    }
    if postgres:
        host, port = postgres.rsplit(":", 1)
        databases["pg"] = {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": "postgres",
            "USER": "postgres",
            "HOST": host,
            "PORT": port,
            "CONN_MAX_AGE": conn_max_age,
            # What the tests count this process's connections by.
            "OPTIONS": {"application_name": os.environ.get("TEST_PG_APPLICATION", "tests")},
        }
    return {
        "SECRET_KEY": "tests-only-secret-key-0123456789-abcdefghijklmnopqrstuvwxyz",
        "DEBUG": False,
        "ALLOWED_HOSTS": ["*"],
        "USE_TZ": True,
        "ROOT_URLCONF": "tests.contrib_django.project.urls",
        "INSTALLED_APPS": [
            "django.contrib.auth",
            "django.contrib.contenttypes",
            "django.contrib.sessions",
            "django_tasks",
            "lowkiq.contrib.django",
            "tests.contrib_django.project.shop",
        ],
        "MIDDLEWARE": [
            "django.contrib.sessions.middleware.SessionMiddleware",
            "django.middleware.csrf.CsrfViewMiddleware",
            "django.contrib.auth.middleware.AuthenticationMiddleware",
        ],
        "DATABASES": databases,
        "DEFAULT_AUTO_FIELD": "django.db.models.AutoField",
        "LOGIN_URL": "/accounts/login/",
        "LOWKIQ": {"REDIS_URL": redis_url, "THREADS_PER_NODE": 2, "POLL_INTERVAL": 0.05},
        "TASKS": {
            "default": {
                "BACKEND": "lowkiq.contrib.django.tasks.LowkiqBackend",
                "QUEUES": ["default", "emails"],
                "OPTIONS": {"SHARDS": 2},
            }
        },
    }


if os.environ.get("DJANGO_SETTINGS_MODULE") == __name__:
    globals().update(
        build(
            os.environ["TEST_DB_DIR"],
            os.environ["REDIS_URL"],
            os.environ.get("TEST_POSTGRES") or None,
            conn_max_age=int(os.environ.get("TEST_CONN_MAX_AGE", "0")),
        )
    )
