"""The schedules' thread inside a server: checked at start-up, enqueueing ticks, stopped
with the server (in-process; tests/test_periodic_processes.py runs real processes)."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest

import lowkiq
from lowkiq.errors import ConfigurationError
from lowkiq.periodic import runner as runner_module
from lowkiq.runtime.server import Server
from lowkiq.storage import schedules as store
from tests.apps.runner import eventually


class Nightly(lowkiq.Worker):
    shards_count = 2

    @classmethod
    def perform(cls, payloads_by_id: dict) -> None:
        pass


class Elsewhere(lowkiq.Worker):
    pass


def test_a_server_refuses_to_start_with_a_schedule_of_a_worker_it_does_not_serve(redis_client):
    lowkiq.settings.workers = [Nightly]
    lowkiq.settings.schedules = [lowkiq.Schedule(Elsewhere, id="x", cron="@daily")]
    with pytest.raises(ConfigurationError, match="its worker Elsewhere is not in settings.workers"):
        Server(lowkiq.settings).start()


@pytest.mark.parametrize("mode", ["automatic", "static"])
def test_a_server_enqueues_each_tick_and_stops_its_schedules_thread(redis_client, mode):
    lowkiq.settings.workers = [Nightly]
    if mode == "static":
        lowkiq.settings.build_splitter = lambda: lowkiq.build_by_node_splitter(2, 1)
    lowkiq.settings.schedules = [
        lowkiq.Schedule(Nightly, id="n", every=timedelta(seconds=1), payload={"a": 1})
    ]
    server = Server(lowkiq.settings)
    server.start()
    try:
        assert server.periodic is not None
        eventually(lambda: store.read_state(Nightly.queue(), "n").runs >= 2, timeout=10)
    finally:
        server.request_stop()
        server.stop()
    assert not any(t.name == "lowkiq-schedules" for t in threading.enumerate())
    state = store.read_state(Nightly.queue(), "n")
    ticks = sorted(entry.tick for entry in state.log)
    assert ticks == list(range(ticks[0], ticks[-1] + 1000, 1000))
    assert all(entry.delay_ms < 1000 for entry in state.log)


class _SkewedClock:
    """The ``time`` module as a host whose clock is ``skew`` seconds off sees it."""

    def __init__(self, skew: float) -> None:
        self.skew = skew

    def time(self) -> float:
        return time.time() + self.skew


@pytest.mark.parametrize("skew", [-30.0, 30.0])
def test_ticks_follow_redis_clock_whatever_the_host_clock(redis_client, monkeypatch, skew):
    monkeypatch.setattr(runner_module, "time", _SkewedClock(skew))
    lowkiq.settings.workers = [Nightly]
    lowkiq.settings.schedules = [lowkiq.Schedule(Nightly, id="s", every=timedelta(seconds=1))]
    seconds, micros = redis_client.time()
    started = seconds * 1000 + micros // 1000
    runner = runner_module.ScheduleRunner(redis_client, lowkiq.settings)
    runner.start()
    try:
        eventually(lambda: store.read_state(Nightly.queue(), "s").runs >= 2, timeout=10)
    finally:
        runner.stop()
    log = store.read_state(Nightly.queue(), "s").log
    # None of the ticks before the schedule was first seen, none before it was due.
    assert all(entry.tick > started for entry in log)
    assert all(0 <= entry.delay_ms < 1000 for entry in log)
