"""Declaring periodic jobs: a bad schedule is an error naming it, at construction or at
start-up, and changes nothing."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

import lowkiq
from lowkiq.errors import ConfigurationError
from lowkiq.periodic.schedule import check_schedules
from lowkiq.serializers import dump_json


class Digest(lowkiq.Worker):
    pass


class Other(lowkiq.Worker):
    pass


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"cron": "0 7 * * *", "every": timedelta(minutes=5)}, "exactly one of cron= and every="),
        ({}, "exactly one of cron= and every="),
        ({"cron": "61 7 * * *"}, "bad cron expression '61 7 * * *'"),
        ({"cron": "0 7 * *"}, "must have 5 fields"),
        ({"cron": "0 7 * * * *"}, "must have 5 fields"),
        ({"cron": "0 0 30 2 *"}, "bad cron expression"),
        ({"cron": "0 7 * * *", "timezone": "Europe/Bielefeld"}, "unknown timezone"),
        ({"every": timedelta(minutes=5), "timezone": "UTC"}, "timezone applies to cron= only"),
        ({"every": timedelta(milliseconds=500)}, "at least 1 second"),
        ({"every": 300}, "must be a datetime.timedelta"),
        ({"cron": "@daily", "catch_up": "some"}, "catch_up must be one of"),
    ],
)
def test_a_bad_schedule_is_refused_with_a_message_naming_it(kwargs, message):
    with pytest.raises(ConfigurationError, match="Schedule 'digest'") as raised:
        lowkiq.Schedule(Digest, id="digest", **kwargs)
    assert message in str(raised.value)


def test_the_worker_and_the_id_are_checked():
    with pytest.raises(ConfigurationError, match="not a lowkiq.Worker subclass"):
        lowkiq.Schedule(object, id="x", cron="@daily")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="non-empty string"):
        lowkiq.Schedule(Digest, id="", cron="@daily")


def test_a_good_schedule_describes_itself():
    daily = lowkiq.Schedule(
        Digest, id="digest", cron="0 7 * * *", timezone="Europe/Berlin", payload={"a": 1}
    )
    assert daily.describe() == "cron 0 7 * * * (Europe/Berlin)"
    assert daily.catch_up == "last"
    assert daily.payload_at(datetime.now(timezone.utc)) == {"a": 1}
    five = lowkiq.Schedule(Digest, id="five", every=timedelta(minutes=5), payload=lambda t: t.hour)
    assert five.describe() == "every 0:05:00"
    assert five.payload_at(datetime(2026, 1, 1, 3, tzinfo=timezone.utc)) == 3


def test_settings_schedules_takes_a_list_of_schedules_with_distinct_ids(redis_client):
    one = lowkiq.Schedule(Digest, id="one", cron="@daily")
    lowkiq.settings.schedules = [one]
    assert lowkiq.settings.schedules == [one]
    with pytest.raises(ConfigurationError, match="two schedules have the id 'one'"):
        lowkiq.settings.schedules = [one, lowkiq.Schedule(Other, id="one", cron="@hourly")]
    with pytest.raises(ConfigurationError, match="is not a lowkiq.Schedule"):
        lowkiq.settings.schedules = ["@daily"]
    assert lowkiq.settings.schedules == [one]


def test_start_up_checks_the_worker_is_served_and_the_payload_serializable():
    one = lowkiq.Schedule(Digest, id="one", cron="@daily", payload={"a": 1})
    check_schedules([one], [Digest], dump_json)
    with pytest.raises(ConfigurationError, match="its worker Digest is not in settings.workers"):
        check_schedules([one], [Other], dump_json)
    bad = lowkiq.Schedule(Digest, id="bad", cron="@daily", payload={"a": object()})
    with pytest.raises(ConfigurationError, match="'bad': its payload cannot be serialized"):
        check_schedules([bad], [Digest], dump_json)
