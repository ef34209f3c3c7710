"""The app configures lowkiq from ``settings.LOWKIQ`` and finds the apps' ``jobs.py``."""

from __future__ import annotations

from datetime import timedelta

import pytest
import redis

import lowkiq
from lowkiq.settings import Settings


def test_the_app_applies_settings_lowkiq_and_discovers_the_jobs_modules(
    django_lowkiq: redis.Redis,
) -> None:
    from lowkiq.contrib.django.connections import close_old_connections
    from tests.contrib_django.project.shop.jobs import Querying, Recorded

    settings = lowkiq.settings
    assert settings.threads_per_node == 2
    assert settings.poll_interval == 0.05
    names = [worker.queue_name for worker in settings.workers]
    # The jobs.py workers in definition order, then one per queue of the tasks backend.
    assert names == [
        Recorded.queue_name,
        Querying.queue_name,
        "tasks.default.default",
        "tasks.default.emails",
    ]
    assert settings.server_middlewares == [close_old_connections]
    # REDIS_URL is the session's server.
    settings.redis().set("written-through-lowkiq-settings", "1")
    assert django_lowkiq.get("written-through-lowkiq-settings") == b"1"


def test_a_workers_list_is_served_with_the_tasks_backend_s_workers(
    django_lowkiq: redis.Redis,
) -> None:
    from django.apps import apps
    from django.test import override_settings

    from tests.contrib_django.project.shop.jobs import Recorded

    with override_settings(LOWKIQ={"WORKERS": ["tests.contrib_django.project.shop.jobs.Recorded"]}):
        apps.get_app_config("lowkiq").ready()
    assert lowkiq.settings.workers[0] is Recorded
    assert [worker.queue_name for worker in lowkiq.settings.workers[1:]] == [
        "tasks.default.default",
        "tasks.default.emails",
    ]


def configured(config: dict) -> Settings:
    from lowkiq.contrib.django.conf import configure

    target = Settings()
    configure(config, [], target)
    return target


def test_every_setting_by_name_any_case_and_dotted_paths(django_lowkiq: redis.Redis) -> None:
    target = configured(
        {
            "threads_per_node": 3,
            "LEASE_TTL": 9.0,
            "workers": ["tests.contrib_django.project.shop.jobs.Recorded"],
            "SCHEDULES": [
                {
                    "worker": "tests.contrib_django.project.shop.jobs.Recorded",
                    "id": "tick",
                    "every": timedelta(minutes=5),
                }
            ],
            "LAST_WORDS": "builtins.print",
            "server_middlewares": ["lowkiq.contrib.django.connections.close_old_connections"],
        }
    )
    from lowkiq.contrib.django.connections import close_old_connections
    from tests.contrib_django.project.shop.jobs import Recorded

    assert (target.threads_per_node, target.lease_ttl) == (3, 9.0)
    assert target.workers == [Recorded]
    assert [(s.worker, s.id) for s in target.schedules] == [(Recorded, "tick")]
    assert target.last_words is print
    assert target.server_middlewares == [close_old_connections]


def test_an_unknown_key_is_improperly_configured_naming_it_and_the_known_keys(
    django_lowkiq: redis.Redis,
) -> None:
    from django.core.exceptions import ImproperlyConfigured

    with pytest.raises(ImproperlyConfigured, match=r"unknown key 'THREADS'.*THREADS_PER_NODE"):
        configured({"THREADS": 3})


def test_a_bad_value_names_the_key_and_changes_nothing(django_lowkiq: redis.Redis) -> None:
    from django.core.exceptions import ImproperlyConfigured

    from lowkiq.contrib.django.conf import configure

    target = Settings()
    with pytest.raises(ImproperlyConfigured, match=r"POLL_INTERVAL.*must be a number > 0"):
        configure({"threads_per_node": 7, "poll_interval": -1}, [], target)
    assert target.threads_per_node != 7
    with pytest.raises(ImproperlyConfigured, match=r"REDIS_URL.*not a Redis URL"):
        configure({"REDIS_URL": "http://example"}, [], target)
    with pytest.raises(ImproperlyConfigured, match=r"WORKERS"):
        configure({"workers": ["tests.contrib_django.project.shop.jobs.Missing"]}, [], target)
    with pytest.raises(ImproperlyConfigured, match="must be a dict"):
        configure(["threads_per_node"], [], target)  # type: ignore[arg-type]
