"""``Worker.perform_timeout`` without Redis: the check of the attribute, the watchdog that
interrupts a sync perform or cancels an ``async def`` one, the guard against a raise
landing after the perform ended, and what ``/live`` says of a perform past its limit."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from typing import Any

import pytest

import lowkiq
from lowkiq.health.heartbeats import Heartbeats
from lowkiq.health.verdicts import Limits, ProcessState, live
from lowkiq.perform import timeouts
from lowkiq.perform.timeouts import (
    PerformTimeout,
    Watchdog,
    Watched,
    perform_within_limit,
    stuck_threshold,
)
from lowkiq.runtime.performing import perform_chain

#: Slack for a shared, noisy machine.
SLACK = 0.5


class Spin(lowkiq.Worker):
    perform_timeout = 0.2

    @classmethod
    def perform(cls, payloads_by_id: dict[str, list[Any]]) -> None:
        while True:
            pass


class Forever(lowkiq.Worker):
    perform_timeout = 0.2

    @classmethod
    async def perform(cls, payloads_by_id: dict[str, list[Any]]) -> None:
        await asyncio.Event().wait()


class Swallows(lowkiq.Worker):
    """Catches the exception and returns: the batch fails all the same."""

    perform_timeout = 0.2

    @classmethod
    def perform(cls, payloads_by_id: dict[str, list[Any]]) -> None:
        try:
            while True:
                pass
        except Exception:
            return


class Quick(lowkiq.Worker):
    perform_timeout = 30.0
    seen: list[int] = []

    @classmethod
    def perform(cls, payloads_by_id: dict[str, list[Any]]) -> None:
        cls.seen.append(threading.get_ident())


def watched(job_id: str, timeout: float) -> Watched:
    """A perform of ``Quick`` on this thread under ``timeout``, not watched yet."""
    return Watched(Quick, "Quick:0", {job_id: [1]}, threading.get_ident(), "main", timeout)


def timed(worker: type[lowkiq.Worker], batch: dict[str, list[Any]]) -> tuple[float, Exception]:
    """Seconds until ``perform_within_limit`` raised, and what."""
    started = time.monotonic()
    with pytest.raises(Exception) as raised:
        perform_within_limit(worker, batch)
    return time.monotonic() - started, raised.value


@pytest.mark.parametrize("value", [0, -1, "5", True, float("nan"), float("inf")])
def test_a_bad_perform_timeout_is_a_configuration_error_naming_it(value: Any) -> None:
    with pytest.raises(lowkiq.ConfigurationError, match=r"Bad\.perform_timeout must be None or"):
        type("Bad", (lowkiq.Worker,), {"perform_timeout": value})


def test_perform_timeout_is_none_or_seconds() -> None:
    assert lowkiq.Worker.perform_timeout is None
    assert type("Fine", (lowkiq.Worker,), {"perform_timeout": 1}).perform_timeout == 1
    assert issubclass(PerformTimeout, lowkiq.LowkiqError)
    assert lowkiq.PerformTimeout is PerformTimeout and "PerformTimeout" in lowkiq.__all__


def test_a_sync_perform_past_its_limit_gets_perform_timeout_naming_worker_ids_and_limit() -> None:
    took, error = timed(Spin, {"a": [1], "b": [2]})
    assert isinstance(error, PerformTimeout)
    assert str(error) == "Spin perform of 'a', 'b' ran past Spin.perform_timeout (0.2s)"
    assert Spin.perform_timeout <= took < Spin.perform_timeout + SLACK
    # The traceback shows where the perform was when it was interrupted.
    assert error.__traceback__ is not None and "while True" in "".join(
        __import__("traceback").format_tb(error.__traceback__)
    )


def test_an_async_perform_past_its_limit_is_cancelled_and_fails_with_perform_timeout() -> None:
    took, error = timed(Forever, {"x": [1]})
    assert isinstance(error, PerformTimeout), error
    assert str(error) == "Forever perform of 'x' ran past Forever.perform_timeout (0.2s)"
    assert Forever.perform_timeout <= took < Forever.perform_timeout + SLACK


def test_a_perform_that_swallows_the_exception_fails_all_the_same() -> None:
    _, error = timed(Swallows, {"s": [1]})
    assert isinstance(error, PerformTimeout)


def test_the_thread_performs_normally_after_a_timeout_and_its_loop_is_reusable() -> None:
    timed(Forever, {"x": [1]})
    timed(Spin, {"y": [1]})
    Quick.seen.clear()
    for _ in range(3):
        perform_within_limit(Quick, {"q": [1]})
    assert Quick.seen == [threading.get_ident()] * 3

    class Sleeper(lowkiq.Worker):
        perform_timeout = 5.0

        @classmethod
        async def perform(cls, payloads_by_id: dict[str, list[Any]]) -> None:
            await asyncio.sleep(0.01)

    perform_within_limit(Sleeper, {"z": [1]})
    assert timeouts.performs() == []


def test_the_limit_covers_perform_inside_the_middlewares_of_the_chain() -> None:
    seen: list[str] = []

    def middleware(worker: Any, batch: Any, call_next: Any) -> Any:
        try:
            return call_next(worker, batch)
        except PerformTimeout as exc:
            seen.append(str(exc))
            raise

    with pytest.raises(PerformTimeout):
        perform_chain([middleware])(Spin, {"m": [1]})
    assert seen == ["Spin perform of 'm' ran past Spin.perform_timeout (0.2s)"]


def test_a_raise_fired_as_the_perform_ends_never_lands_after_it() -> None:
    """Performs that end at their deadline, again and again: each either fails with
    PerformTimeout or succeeds, and nothing is ever raised in the code that follows."""

    class Edge(lowkiq.Worker):
        perform_timeout = 0.002

        @classmethod
        def perform(cls, payloads_by_id: dict[str, list[Any]]) -> None:
            end = time.monotonic() + 0.002
            while time.monotonic() < end:
                pass

    outcomes = {"ok": 0, "timeout": 0}
    for _ in range(300):
        try:
            perform_within_limit(Edge, {"e": [1]})
            outcomes["ok"] += 1
        except PerformTimeout:
            outcomes["timeout"] += 1
        # A stray raise would land in this loop, outside any perform.
        end = time.monotonic() + 0.003
        while time.monotonic() < end:
            pass
    # Either outcome is right (how many of each depends on the host's load); a raise
    # landing after a perform ended would have escaped the loop above.
    assert sum(outcomes.values()) == 300, outcomes


def test_the_watchdog_keeps_only_the_running_performs_deadlines() -> None:
    dog = Watchdog()
    for _ in range(1000):
        entry = watched("q", 60.0)
        dog.watch(entry)
        dog.unwatch(entry)
    # Ended performs' deadlines are dropped once they pass 64 + twice the performs
    # running (one here), whether or not the watchdog's thread got to them first.
    assert dog.performs() == [] and len(dog._heap) <= 64 + 2 * 1


def test_a_deadline_earlier_than_those_waiting_wakes_the_watchdog() -> None:
    interrupted: list[int] = []
    dog = Watchdog(interrupt=lambda ident, exc: interrupted.append(ident) or True)
    late, early = watched("late", 60.0), watched("early", 0.05)
    dog.watch(late)
    dog.watch(early)
    time.sleep(0.05 + SLACK)
    assert interrupted == [threading.get_ident()] and early.fired and not late.fired
    assert dog.unwatch(early) and not dog.unwatch(late)


def test_no_watchdog_runs_in_a_process_whose_workers_set_no_perform_timeout() -> None:
    code = """
import threading, lowkiq
from lowkiq.perform import timeouts
from lowkiq.runtime.performing import perform_chain

class Plain(lowkiq.Worker):
    @classmethod
    def perform(cls, batch):
        pass

perform_chain([])(Plain, {"p": [1]})
assert timeouts._watchdog is None
assert not any(t.name == "lowkiq-watchdog" for t in threading.enumerate())
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_stuck_threshold_follows_perform_timeout() -> None:
    assert stuck_threshold(Quick) == 30.0 + timeouts.STUCK_GRACE
    assert stuck_threshold(lowkiq.Worker) is None


def test_live_uses_the_batch_s_own_threshold_above_or_below_stuck_after() -> None:
    now = [100.0]
    beats = Heartbeats(clock=lambda: now[0])
    limits = Limits(stuck_after=300.0, silent_after=60.0, connected_within=10.0)
    long_job, short_job = beats.thread(0), beats.thread(1)
    with long_job.performing_batch("Long:1", 1205.0), short_job.performing_batch("Short:2", 7.0):
        now[0] += 8
        verdict = live(beats, ProcessState(), limits)
        assert (
            verdict.reason == "thread 1 in perform of Short:2 for 8.0s (perform_timeout + grace 7s)"
        )
        now[0] += 400  # past stuck_after, under the long job's perform_timeout + grace
        assert "Long:1" not in live(beats, ProcessState(), limits).reason


def test_live_names_a_perform_that_could_not_be_interrupted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(timeouts, "STUCK_GRACE", 0.2)
    import ctypes

    class CCall(lowkiq.Worker):
        perform_timeout = 0.2

        @classmethod
        def perform(cls, payloads_by_id: dict[str, list[Any]]) -> None:
            ctypes.CDLL(None).usleep(1_500_000)

    beats = Heartbeats()
    limits = Limits(stuck_after=300.0, silent_after=60.0, connected_within=10.0)
    errors: list[BaseException] = []

    def run() -> None:
        with beats.thread(0).performing_batch("CCall", stuck_threshold(CCall)):
            try:
                perform_within_limit(CCall, {"c": [1]})
            except PerformTimeout as exc:
                errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    time.sleep(0.6)
    verdict = live(beats, ProcessState(), limits)
    assert not verdict.ok
    assert verdict.reason.startswith("thread 0 in perform of CCall ('c') for "), verdict.reason
    assert verdict.reason.endswith(
        "past CCall.perform_timeout (0.2s) + 0.2s, it could not be interrupted (a C call?)"
    )
    thread.join()
    assert len(errors) == 1 and live(beats, ProcessState(), limits).ok


def test_max_perform_seconds_raises_the_stuck_threshold_never_lowers_it() -> None:
    class Slow(lowkiq.Worker):
        max_perform_seconds = 600.0

    class Brief(lowkiq.Worker):
        max_perform_seconds = 0.1

    assert timeouts.stuck_floor(Slow) == 600.0 + timeouts.STUCK_GRACE
    assert timeouts.stuck_floor(lowkiq.Worker) is None
    now = [100.0]
    beats = Heartbeats(clock=lambda: now[0])
    limits = Limits(stuck_after=300.0, silent_after=60.0, connected_within=10.0)
    slow, brief = beats.thread(0), beats.thread(1)
    with (
        slow.performing_batch("Slow:0", None, timeouts.stuck_floor(Slow)),
        brief.performing_batch("Brief:0", None, timeouts.stuck_floor(Brief)),
    ):
        now[0] += 400  # past stuck_after: Brief is stuck, Slow (600 s + grace) is not
        reason = live(beats, ProcessState(), limits).reason
        assert "Brief:0 for 400.0s (stuck_after 300s)" in reason
        assert "Slow:0" not in reason
        now[0] += 300
        assert (
            "Slow:0 for 700.0s (max_perform_seconds + grace 605s)"
            in live(beats, ProcessState(), limits).reason
        )


@pytest.mark.parametrize(
    ("soft", "hard", "message"),
    [
        (None, 5.0, r"Bad\.perform_hard_timeout needs Bad\.perform_timeout"),
        (5.0, 5.0, r"Bad\.perform_hard_timeout \(5\.0\) must be above Bad\.perform_timeout"),
        (5.0, 1, r"Bad\.perform_hard_timeout \(1\) must be above"),
        (5.0, "9", r"Bad\.perform_hard_timeout must be None or a finite number"),
        (5.0, float("inf"), r"Bad\.perform_hard_timeout must be None or a finite number"),
    ],
)
def test_a_bad_perform_hard_timeout_is_a_configuration_error_naming_it(
    soft: Any, hard: Any, message: str
) -> None:
    with pytest.raises(lowkiq.ConfigurationError, match=message):
        type("Bad", (lowkiq.Worker,), {"perform_timeout": soft, "perform_hard_timeout": hard})


def test_perform_hard_timeout_is_none_or_seconds_above_perform_timeout() -> None:
    assert lowkiq.Worker.perform_hard_timeout is None
    fine = type("Fine", (lowkiq.Worker,), {"perform_timeout": 1, "perform_hard_timeout": 2})
    assert fine.perform_hard_timeout == 2
    assert lowkiq.PerformHardTimeout is timeouts.PerformHardTimeout
    assert "PerformHardTimeout" in lowkiq.__all__


def test_a_perform_past_its_limit_is_interrupted_again_until_it_ends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(timeouts, "REPEAT_EVERY", 0.1)
    interrupted: list[float] = []
    dog = Watchdog(interrupt=lambda ident, exc: exc is None or interrupted.append(1.0) or True)
    entry = watched("r", 0.05)
    dog.watch(entry)
    time.sleep(0.05 + 0.1 * 4 + 0.05)
    assert dog.unwatch(entry)
    count = len(interrupted)
    assert 3 <= count <= 6, count  # the first raise, then one every 0.1 s
    time.sleep(0.3)
    assert len(interrupted) == count  # none once it ended


class Swallower(lowkiq.Worker):
    """A retry loop that swallows every Exception for 3 s: attempts of ``REPEAT`` seconds
    of Python, each followed by a back-off half as long again, the first attempt across
    the limit (the first raise lands in it), the back-off after it across the next
    raise."""

    perform_timeout = 0.2
    REPEAT = 0.1

    @classmethod
    def perform(cls, payloads_by_id: dict[str, list[Any]]) -> None:
        end = time.monotonic() + 3
        time.sleep(cls.perform_timeout - cls.REPEAT / 2)
        while time.monotonic() < end:
            try:
                attempt = time.monotonic() + cls.REPEAT
                while time.monotonic() < attempt:
                    pass
            except Exception:  # noqa: BLE001, S110 - what it is about
                pass
            time.sleep(cls.REPEAT * 1.5)


def test_a_loop_swallowing_the_exception_meets_a_repeated_raise(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(timeouts, "REPEAT_EVERY", Swallower.REPEAT)
    took, error = timed(Swallower, {"w": [1]})
    assert isinstance(error, PerformTimeout), error
    assert took < 1.5, took  # not its 3 s


class Sleepy(lowkiq.Worker):
    perform_timeout = 0.1
    perform_hard_timeout = 0.3

    @classmethod
    def perform(cls, payloads_by_id: dict[str, list[Any]]) -> None:
        time.sleep(1.0)


def test_a_perform_past_its_hard_limit_is_given_to_its_thread_s_handler_once() -> None:
    given: list[tuple[Watched, str]] = []
    done = threading.Event()

    def handler(entry: Watched) -> None:
        given.append((entry, threading.current_thread().name))
        done.set()

    with timeouts.hard_limit_handler(handler), pytest.raises(PerformTimeout):
        perform_within_limit(Sleepy, {"h": [1]})
    assert done.wait(1)
    [(entry, thread)] = given
    assert thread == "lowkiq-hard-timeout" and entry.ids == ["h"] and entry.cut
    assert str(entry.hard_error()) == (
        "Sleepy perform of 'h' ran past Sleepy.perform_hard_timeout (0.3s): its thread was "
        "given up and its process stopped"
    )
    assert isinstance(entry.hard_error(), lowkiq.PerformHardTimeout)


def test_past_the_hard_limit_outside_an_executor_thread_nothing_stops_it_and_that_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with pytest.raises(PerformTimeout):
        perform_within_limit(Sleepy, {"o": [1]})
    assert "ran past Sleepy.perform_hard_timeout (0.3s): nothing stops it here" in caplog.text


class BlockingCoroutine(lowkiq.Worker):
    """An ``async def perform`` blocked in a C call: its loop cannot cancel it."""

    perform_timeout = 0.1
    perform_hard_timeout = 0.3

    @classmethod
    async def perform(cls, payloads_by_id: dict[str, list[Any]]) -> None:
        time.sleep(1.0)


def test_an_async_perform_blocked_past_its_hard_limit_is_given_up_too() -> None:
    given: list[tuple[Watched, float]] = []
    done = threading.Event()

    def handler(entry: Watched) -> None:
        given.append((entry, time.monotonic()))
        done.set()

    with timeouts.hard_limit_handler(handler), pytest.raises(PerformTimeout):
        perform_within_limit(BlockingCoroutine, {"a": [1]})
    returned = time.monotonic()
    assert done.wait(1)
    [(entry, at)] = given
    assert entry.ids == ["a"] and entry.cut
    assert at < returned  # given up while its loop was still blocked
