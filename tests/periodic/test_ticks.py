"""The tick calculation of periodic jobs (no Redis): periods, cron in a timezone across
daylight-saving changes, and what each catch-up policy enqueues."""

from __future__ import annotations

from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

import lowkiq
from lowkiq.periodic import ticks
from lowkiq.periodic.ticks import Step

BERLIN = ZoneInfo("Europe/Berlin")


class Digest(lowkiq.Worker):
    pass


def ms(moment: datetime) -> int:
    return round(moment.timestamp() * 1000)


def berlin(*args: int, fold: int = 0) -> int:
    return ms(datetime(*args, tzinfo=BERLIN).replace(fold=fold))  # type: ignore[misc]


def cron(expression: str, zone: str = "Europe/Berlin", **kwargs) -> lowkiq.Schedule:
    return lowkiq.Schedule(Digest, id="digest", cron=expression, timezone=zone, **kwargs)


def every(seconds: float, **kwargs) -> lowkiq.Schedule:
    return lowkiq.Schedule(Digest, id="tick", every=timedelta(seconds=seconds), **kwargs)


def following(schedule: lowkiq.Schedule, start: int, count: int) -> list[int]:
    found = []
    for _ in range(count):
        start = ticks.next_tick(schedule, start)
        found.append(start)
    return found


def test_a_period_ticks_at_its_multiples_since_the_epoch():
    five = every(300)
    assert ticks.next_tick(five, 1_000) == 300_000
    assert ticks.next_tick(five, 300_000) == 600_000  # strictly after
    assert ticks.latest_ticks(five, 0, 1_000_000, 10) == [300_000, 600_000, 900_000]
    assert ticks.latest_ticks(five, 300_000, 1_000_000, 1) == [900_000]


def test_cron_ticks_in_its_timezone():
    schedule = cron("0 7 * * *")
    start = berlin(2026, 5, 1, 12)
    assert following(schedule, start, 2) == [berlin(2026, 5, 2, 7), berlin(2026, 5, 3, 7)]
    utc = cron("0 7 * * *", zone="UTC")
    assert ticks.next_tick(utc, start) - ticks.next_tick(schedule, start) == 2 * 3600 * 1000


def test_clocks_going_forward_move_a_skipped_time_to_the_end_of_the_gap():
    # 2026-03-29 02:00 CET becomes 03:00 CEST in Berlin: 02:30 does not exist.
    daily = cron("30 2 * * *")
    assert following(daily, berlin(2026, 3, 28, 12), 2) == [
        berlin(2026, 3, 29, 3, 0),
        berlin(2026, 3, 30, 2, 30),
    ]
    hourly = cron("0 * * * *")
    assert following(hourly, berlin(2026, 3, 29, 0, 30), 3) == [
        berlin(2026, 3, 29, 1),
        berlin(2026, 3, 29, 3),
        berlin(2026, 3, 29, 4),
    ]


def test_clocks_going_back_tick_a_fixed_hour_once_and_a_wildcard_hour_twice():
    # 2026-10-25 03:00 CEST becomes 02:00 CET in Berlin: 02:00-02:59 happen twice.
    daily = cron("30 2 * * *")
    assert following(daily, berlin(2026, 10, 24, 12), 2) == [
        berlin(2026, 10, 25, 2, 30),
        berlin(2026, 10, 26, 2, 30),
    ]
    assert ticks.latest_ticks(daily, berlin(2026, 10, 24, 12), berlin(2026, 10, 25, 4), 5) == [
        berlin(2026, 10, 25, 2, 30)
    ]
    hourly = cron("0 * * * *")
    assert following(hourly, berlin(2026, 10, 25, 0, 30), 4) == [
        berlin(2026, 10, 25, 1),
        berlin(2026, 10, 25, 2),
        berlin(2026, 10, 25, 2, fold=1),
        berlin(2026, 10, 25, 3),
    ]
    assert berlin(2026, 10, 25, 2, fold=1) - berlin(2026, 10, 25, 2) == 3600 * 1000


def test_a_new_schedule_starts_at_now_and_enqueues_nothing():
    assert ticks.step(every(10), None, 25_000) == Step(20_000, [])


def test_nothing_to_do_before_the_next_tick():
    assert ticks.step(every(10), 20_000, 29_999) is None


def test_on_time_ticks_are_enqueued_one_job_each_whatever_the_policy():
    for policy in ("last", "none", "all"):
        assert ticks.step(every(1, catch_up=policy), 10_000, 12_050) == Step(
            12_000, [11_000, 12_000]
        )


HOUR = 3_600_000


@pytest.mark.parametrize(
    ("policy", "enqueued"),
    [
        ("none", []),
        ("last", [10 * HOUR]),
        ("all", [h * HOUR for h in range(2, 11)]),
    ],
)
def test_missed_ticks_follow_the_catch_up_policy(policy, enqueued):
    hourly = cron("0 * * * *", zone="UTC", catch_up=policy)
    # Last passed at 01:00; the process comes back at 10:30: 02:00 .. 10:00 were missed.
    assert ticks.step(hourly, 1 * HOUR, 10 * HOUR + HOUR // 2) == Step(10 * HOUR, enqueued)


def test_catch_up_all_is_bounded_to_the_latest_ticks():
    step = ticks.step(every(1, catch_up="all"), 0, 1_000_000)
    assert step is not None
    assert len(step.enqueue) == ticks.CATCH_UP_LIMIT
    assert step.enqueue[-1] == step.last == 1_000_000


def test_missed_ticks_with_an_on_time_one_enqueue_the_on_time_ones_only_unless_all():
    now = 10 * HOUR + 30_000  # the 10:00 tick is 30 s old: on time
    assert ticks.step(cron("0 * * * *", zone="UTC"), HOUR, now) == Step(10 * HOUR, [10 * HOUR])
    none = cron("0 * * * *", zone="UTC", catch_up="none")
    assert ticks.step(none, HOUR, now) == Step(10 * HOUR, [10 * HOUR])
