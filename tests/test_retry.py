"""The one retry policy of lowkiq's loops: jittered waits that double up to a cap, a
warning at the first failure and a line at recovery (no Redis)."""

from __future__ import annotations

import logging

import pytest

from lowkiq.clients.retry import Backoff, Retries


def test_the_waits_double_from_the_base_up_to_the_cap_each_jittered_by_half() -> None:
    backoff = Backoff(0.5, 8.0)
    for failures, full in enumerate([0.5, 1.0, 2.0, 4.0, 8.0, 8.0], start=1):
        waits = [backoff.delay(failures) for _ in range(200)]
        assert all(full / 2 <= wait <= full for wait in waits)
        assert max(waits) - min(waits) > full / 10  # jittered, not one value
    assert backoff.delay(10_000) <= 8.0


def test_a_cap_below_the_base_is_the_base() -> None:
    assert Backoff(2.0, 1.0).delay(5) <= 2.0


def test_the_first_failure_is_logged_once_and_the_recovery_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    retries = Retries("dispatcher", logging.getLogger("test.retry"), Backoff(0.1, 1.0))
    with caplog.at_level(logging.INFO, logger="test.retry"):
        retries.succeeded()  # nothing failed: nothing said
        for _ in range(3):
            assert 0.0 < retries.failed(ConnectionError("gone")) <= 1.0
        retries.succeeded()
        retries.succeeded()
    assert [r.getMessage() for r in caplog.records] == [
        "dispatcher: Redis error (ConnectionError: gone); retrying with backoff",
        "dispatcher: works again after 3 failed attempt(s)",
    ]
    assert retries.failures == 0


def test_a_failure_the_caller_logged_is_not_logged_again(caplog: pytest.LogCaptureFixture) -> None:
    retries = Retries("schedule 'x'", logging.getLogger("test.retry"), Backoff(0.1, 1.0))
    with caplog.at_level(logging.INFO, logger="test.retry"):
        retries.failed(ValueError("bad payload"), logged=True)
        retries.failed(ValueError("bad payload"), logged=True)
    assert caplog.records == []
    assert retries.failures == 2


def test_a_loop_that_keeps_failing_is_reminded_every_period_with_the_time_waited(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [100.0]
    retries = Retries(
        "start",
        logging.getLogger("test.retry"),
        Backoff(0.1, 1.0),
        waiting_for="Redis at redis://db:6379/0",
        remind_every=15.0,
        clock=lambda: now[0],
    )
    with caplog.at_level(logging.INFO, logger="test.retry"):
        for _ in range(50):  # a failure each second for 50 s
            retries.failed(ConnectionError("refused"), "Redis is unreachable (refused)")
            now[0] += 1.0
        retries.succeeded()
    still = "start: still waiting for Redis at redis://db:6379/0 ({} s): Redis is unreachable"
    assert [r.getMessage() for r in caplog.records] == [
        "start: Redis is unreachable (refused); retrying with backoff",
        still.format(15) + " (refused)",
        still.format(30) + " (refused)",
        still.format(45) + " (refused)",
        "start: works again after 50 failed attempt(s)",
    ]


def test_a_loop_without_a_target_says_how_long_it_has_failed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [0.0]
    retries = Retries("dispatcher", logging.getLogger("test.retry"), Backoff(0.1, 1.0),
                      clock=lambda: now[0])  # fmt: skip
    with caplog.at_level(logging.INFO, logger="test.retry"):
        retries.failed(ConnectionError("gone"))
        now[0] = 20.0
        retries.failed(ConnectionError("gone"))
        now[0] = 21.0
        retries.failed(ConnectionError("gone"))
    assert [r.getMessage() for r in caplog.records][1:] == [
        "dispatcher: still failing after 20 s: Redis error (ConnectionError: gone)"
    ]
