"""Schedules changed at run time (lowkiq.periodic.control), on a real Redis server and a
real 3-master Redis Cluster: listed by lowkiq.schedules(), stored over settings.schedules,
refused with a clear error that changes nothing, and fenced in the tick script."""

from __future__ import annotations

from datetime import timedelta

import pytest

import lowkiq
from lowkiq.periodic import control
from lowkiq.periodic.runner import ScheduleRunner
from lowkiq.storage import schedules as store
from tests.both_redis import server_or_cluster_client  # noqa: F401 - the fixture


class Digest(lowkiq.Worker):
    shards_count = 3


class Mailer(lowkiq.Worker):
    shards_count = 2


@pytest.fixture
def app(redis_client):
    lowkiq.settings.workers = [Digest, Mailer]
    lowkiq.settings.schedules = [
        lowkiq.Schedule(Digest, id="digest", cron="0 7 * * *", timezone="Europe/Berlin"),
        lowkiq.Schedule(Mailer, id="mail", every=timedelta(minutes=5), payload={"m": 1}),
    ]
    return redis_client


def by_name() -> dict[str, control.ScheduleInfo]:
    return {info.name: info for info in lowkiq.schedules()}


def test_schedules_lists_the_settings_ones_with_their_source_and_next_run(app):
    listed = by_name()
    assert list(listed) == ["digest", "mail"]
    digest = listed["digest"]
    assert (digest.worker, digest.cron, digest.timezone, digest.every) == (
        "Digest",
        "0 7 * * *",
        "Europe/Berlin",
        None,
    )
    assert digest.source == "settings" and not digest.paused and not digest.changed
    assert digest.next_run is not None and digest.last_run is None
    assert listed["mail"].every == timedelta(minutes=5)


def test_pause_resume_change_add_remove_and_reset_are_stored_over_the_settings(app):
    assert control.pause("digest") is True
    assert control.pause("digest") is False
    assert by_name()["digest"].paused and by_name()["digest"].next_run is None
    assert control.resume("digest") is True
    assert not by_name()["digest"].paused

    control.change("mail", every=timedelta(seconds=30))
    mail = by_name()["mail"]
    assert mail.every == timedelta(seconds=30) and mail.changed and mail.source == "settings"
    control.change("digest", cron="30 6 * * 1-5", timezone="UTC")
    assert (by_name()["digest"].cron, by_name()["digest"].timezone) == ("30 6 * * 1-5", "UTC")

    control.add("report", "Mailer", every=90, payload={"r": [1, 2]}, catch_up="none")
    report = by_name()["report"]
    assert (report.worker, report.every, report.source, report.catch_up) == (
        "Mailer",
        timedelta(seconds=90),
        "added",
        "none",
    )

    control.remove("mail")
    assert by_name()["mail"].removed and by_name()["mail"].next_run is None
    with pytest.raises(control.UnknownSchedule):
        control.pause("mail")  # removed: remembered, not in force
    control.remove("report")
    assert "report" not in by_name()

    assert sorted(control.reset()) == ["digest", "mail", "report"]
    listed = by_name()
    assert list(listed) == ["digest", "mail"]
    assert listed["mail"].every == timedelta(minutes=5) and not listed["mail"].removed
    assert listed["digest"].cron == "0 7 * * *" and not listed["digest"].changed


def test_an_added_schedule_is_paused_and_changed_like_a_settings_one(app):
    control.add("extra", Digest, cron="@hourly", payload=[1])
    assert control.pause("extra") and by_name()["extra"].paused
    control.change("extra", every=timedelta(minutes=2))
    extra = by_name()["extra"]
    assert (extra.every, extra.paused, extra.source) == (timedelta(minutes=2), True, "added")
    assert control.resume("extra") and by_name()["extra"].next_run is not None


def test_the_changes_are_read_from_redis_not_kept_in_the_process(app):
    control.add("extra", Digest, cron="@hourly")
    control.pause("mail")
    store.write_override(app, "digest", 0, '{"paused":true}')  # as another process would
    listed = by_name()
    assert listed["extra"].cron == "@hourly" and listed["mail"].paused
    assert listed["digest"].paused


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: control.change("digest", cron="0 0 30 2 *"), "bad cron expression"),
        (lambda: control.change("digest", cron="not cron"), "cron must have 5 fields"),
        (lambda: control.change("mail", every=0), "every must be a positive period"),
        (lambda: control.change("mail", every=-5), "every must be a positive period"),
        (lambda: control.change("mail", every=0.5), "at least 1 second"),
        (lambda: control.change("mail", every=60, timezone="UTC"), "timezone applies to cron"),
        (lambda: control.change("digest", cron="@daily", timezone="Mars/Base"), "unknown timezone"),
        (lambda: control.change("digest"), "exactly one of cron and every"),
        (lambda: control.add("x", "Nobody", cron="@daily"), "unknown worker 'Nobody'"),
        (lambda: control.add("digest", Mailer, cron="@daily"), r"exists already \(settings\)"),
        (lambda: control.add("", Mailer, cron="@daily"), "non-empty string"),
        (lambda: control.add("x", Mailer, cron="@daily", catch_up="some"), "catch_up must be"),
        (lambda: control.add("x", Mailer, cron="@daily", payload={1, 2}), "must be JSON"),
        (lambda: control.add("x", Mailer, every=0, payload=1), "positive period"),
    ],
)
def test_bad_input_is_a_clear_error_and_changes_nothing(app, call, message):
    before = lowkiq.schedules()
    version = store.read_overrides(app)[0]
    with pytest.raises(control.ScheduleError, match=message):
        call()
    assert lowkiq.schedules() == before
    assert store.read_overrides(app)[0] == version


@pytest.mark.parametrize(
    "call",
    [
        lambda: control.pause("nope"),
        lambda: control.resume("nope"),
        lambda: control.change("nope", cron="@daily"),
        lambda: control.remove("nope"),
        lambda: control.reset("nope"),
    ],
)
def test_an_unknown_schedule_is_refused(app, call):
    with pytest.raises(control.UnknownSchedule, match="no schedule named 'nope'"):
        call()
    assert store.read_overrides(app)[0] == 0


def test_a_duplicate_added_name_is_refused(app):
    control.add("extra", Digest, cron="@hourly")
    with pytest.raises(control.ScheduleError, match="'extra' exists already \\(added\\)"):
        control.add("extra", Mailer, every=60)
    assert by_name()["extra"].worker == "Digest"


def test_a_process_following_an_older_definition_passes_no_tick(app):
    """The fence: a runner that has not read a pause yet is refused by the tick script."""
    lowkiq.settings.schedules = [lowkiq.Schedule(Mailer, id="tick", every=timedelta(seconds=1))]
    runner = ScheduleRunner(lowkiq.settings.client(), lowkiq.settings)
    queue = Mailer.queue()
    [entry] = runner.entries
    runner._look(entry)  # the first look: starts at now, rev 0
    control.pause("tick")
    state = store.read_state(queue, "tick")
    assert state.rev > 0
    # The runner has not refreshed: it still follows revision 0 and tries the next tick.
    seconds, micros = queue.client.time()
    now_ms = seconds * 1000 + micros // 1000
    due = (now_ms // 1000) * 1000
    reply = store.pass_ticks(queue, "tick", state.last, due, [(due, b'"x"')], "stale:1", 0)
    assert reply.status == store.STALE
    assert store.read_state(queue, "tick").runs == 0 and Mailer.metrics()["length"] == 0
    runner.refresh()
    assert runner.entries == []  # paused: this process follows it no more


def test_a_newer_definition_starts_at_its_first_tick_after_now(app):
    """A runner that read a change before its revision reached the shard records it
    (last = now) instead of catching up the old definition's ticks."""
    queue = Mailer.queue()
    seconds, _ = queue.client.time()
    old = (seconds - 3600) * 1000
    assert store.pass_ticks(queue, "mail", None, old, []).status == store.DONE
    reply = store.pass_ticks(queue, "mail", old, old + 1000, [(old + 1000, b"1")], "p:1", 7)
    assert reply.status == store.MOVED and reply.last is not None and reply.last > old
    state = store.read_state(queue, "mail")
    assert (state.rev, state.runs) == (7, 0)
