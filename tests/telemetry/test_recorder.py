"""The metrics history: counted per batch in the process, flushed to Redis in one round trip,
read back by minute, kept across process restarts, expiring after 72 hours."""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis

import lowkiq
from lowkiq.runtime.server import Server
from lowkiq.storage.keys import QueueKeys
from lowkiq.storage.queue import PoppedJob
from lowkiq.telemetry import store
from lowkiq.telemetry.counts import bucket
from lowkiq.telemetry.history import read
from lowkiq.telemetry.recorder import Recorder, WorkerTally
from tests.apps.runner import eventually
from tests.moved_clock import Clock

T0 = 1_800_000_000.0  # a minute boundary: 30,000,000 minutes
MINUTE = int(T0 // 60)


def job(job_id: str, payloads: int, perform_in: float) -> PoppedJob:
    return PoppedJob(job_id, -1, [{"n": n} for n in range(payloads)], perform_in)


def test_a_tally_counts_batches_jobs_payloads_time_and_wait_by_minute():
    clock = Clock(T0 + 10.2)
    tally = WorkerTally(clock)
    tally.performed([job("a", 3, T0 + 5), job("b", 1, T0 + 10)], started=T0 + 10, failed=False)
    clock.now = T0 + 61
    tally.performed([job("c", 1, T0 + 50)], started=T0 + 60.99, failed=True)
    minutes = tally.minutes.unwritten()
    assert sorted(minutes) == [MINUTE, MINUTE + 1]
    first = lowkiq.Counts(tuple(minutes[MINUTE]))
    assert (first.performs, first.failures, first.jobs, first.payloads) == (1, 0, 2, 4)
    assert first.duration_seconds == pytest.approx(0.2, abs=1e-5)
    assert first.duration_buckets[bucket(0.2)] == 1
    # a waited 5 s; b was started the moment it was due
    assert first.wait_seconds == pytest.approx(5.0)
    assert first.wait_buckets[bucket(5.0)] == 1 and first.wait_buckets[0] == 1
    second = lowkiq.Counts(tuple(minutes[MINUTE + 1]))
    assert (second.performs, second.failures, second.jobs, second.failed_jobs) == (1, 1, 1, 1)
    # Once written, only what is counted afterwards is unwritten.
    tally.minutes.written(minutes, clock.now)
    assert tally.minutes.unwritten() == {}
    tally.performed([job("d", 2, T0 + 60)], started=T0 + 60.5, failed=False)
    later = tally.minutes.unwritten()
    assert list(later) == [MINUTE + 1] and later[MINUTE + 1][:7] == [1, 0, 1, 0, 0, 0, 2]
    # Minutes long past are forgotten once a flush found nothing new in them.
    tally.minutes.written(later, T0 + 60 * 5)
    assert tally.minutes.unwritten() == {} and len(tally.minutes) == 1
    tally.minutes.written({}, T0 + 60 * 5)
    assert len(tally.minutes) == 0


def test_a_job_due_after_its_start_by_this_hosts_clock_waited_zero_seconds():
    # Due times are Redis's clock, the start this host's: a host behind Redis sees a job
    # start before it was due.  Its wait counts as 0, in the queue's and its group's.
    clock = Clock(T0 + 10.2)
    tally = WorkerTally(clock, top_groups=5)
    tally.performed([job("early", 1, T0 + 12), job("late", 1, T0 + 7)], started=T0 + 10)
    counts = lowkiq.Counts(tuple(tally.minutes.unwritten()[MINUTE]))
    assert counts.wait_seconds == pytest.approx(3.0)
    assert counts.wait_buckets[0] == 1 and counts.wait_buckets[bucket(3.0)] == 1
    assert tally.groups is not None
    (by_group,) = tally.groups.take(everything=True)
    assert by_group[""][0] == 1 and by_group[""][bucket(3.0)] == 1
    assert by_group[""][-1] == pytest.approx(3.0)


def test_a_flush_adds_every_worker_and_minute_to_redis(redis_client: redis.Redis):
    clock = Clock(T0 + 1)
    recorder = Recorder(redis_client, ["Orders", "Mail"], clock=clock)
    for thread in range(3):  # each processing thread counts in a tally of its own
        recorder.for_queue("Orders", thread).performed([job("a", 2, T0)], T0 + 0.5, False)
    recorder.for_queue("Mail").performed([job("m", 1, T0)], T0 + 0.5, True)
    clock.now = T0 + 70
    recorder.for_queue("Orders", 1).performed([job("b", 1, T0)], T0 + 69, False)
    assert recorder.flush() == 3  # Orders' two minutes and Mail's one
    assert recorder.flush() == 0
    recorder.for_queue("Orders", 2).performed([job("e", 1, T0)], T0 + 69.5, False)
    assert recorder.flush() == 1  # only what grew
    # A second process adds to the same minute.
    other = Recorder(redis_client, ["Orders"], clock=Clock(T0 + 2))
    other.for_queue("Orders").performed([job("c", 1, T0 + 1)], T0 + 1.5, False)
    other.flush()
    history = read(redis_client, {"OrderWorker": "Orders", "MailWorker": "Mail"}, 3, now=T0 + 70)
    orders = history["OrderWorker"]
    assert (orders.first, orders.last) == (MINUTE - 1, MINUTE + 1)
    assert orders.minutes[MINUTE].performs == 4 and orders.minutes[MINUTE].payloads == 7
    assert orders.minutes[MINUTE + 1].jobs == 2 and MINUTE - 1 not in orders.minutes
    assert orders.total.performs == 6
    assert history["MailWorker"].total.failed_jobs == 1
    totals = store.read_totals(redis_client, ["Orders", "Mail"])
    assert totals["Orders"].performs == 6 and totals["Mail"].failures == 1


def test_a_minute_expires_72_hours_after_it_ends_and_the_totals_never(redis_client):
    now = time.time()
    recorder = Recorder(redis_client, ["Orders"], clock=Clock(now))
    recorder.for_queue("Orders").performed([job("a", 1, now)], now, False)
    recorder.flush()
    keys = QueueKeys("Orders")
    minute = int(now // 60)
    ttl = redis_client.ttl(keys.span_hash(1, minute))
    expected = (minute + 1) * 60 + 72 * 3600 - now
    assert expected - 2 <= ttl <= expected + 1
    hour_ttl = redis_client.ttl(keys.span_hash(60, minute // 60))
    expected = (minute // 60 + 1) * 3600 + 72 * 3600 - now
    assert expected - 2 <= hour_ttl <= expected + 1
    assert redis_client.ttl(keys.totals_hash) == -1
    # Only non-zero fields are stored.
    fields = redis_client.hgetall(keys.span_hash(1, minute))
    assert b"f" not in fields and b"fj" not in fields and all(int(v) for v in fields.values())


def test_counts_that_could_not_be_written_are_written_by_the_next_flush(redis_client):
    down = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2)
    clock = Clock(T0 + 1)
    recorder = Recorder(down, ["Orders"], clock=clock)
    recorder.for_queue("Orders").performed([job("a", 1, T0)], T0, False)
    with pytest.raises(redis.ConnectionError):
        recorder.flush()
    recorder.for_queue("Orders").performed([job("b", 1, T0)], T0, False)
    recorder.client = redis_client
    assert recorder.flush() == 1
    stored = read(redis_client, {"W": "Orders"}, 1, now=T0 + 1)["W"]
    assert stored.total.performs == 2


def test_the_history_adds_up_across_server_restarts(redis_client: redis.Redis):
    class Timed(lowkiq.Worker):
        shards_count = 2
        batch_size = 3
        fail_ids: set[str] = set()

        @classmethod
        def perform(cls, payloads_by_id: dict[str, list[Any]]) -> None:
            time.sleep(0.002)
            if cls.fail_ids & set(payloads_by_id):
                raise RuntimeError("boom")

        @classmethod
        def retry_in(cls, retry_count: int) -> float:
            return 3600.0

    lowkiq.settings.workers = [Timed]
    lowkiq.settings.poll_interval = 0.05
    lowkiq.settings.threads_per_node = 2
    Timed.fail_ids = {"bad"}
    for run in range(2):
        Timed.perform_async([{"id": f"{run}-{n}", "payload": n} for n in range(10)])
        Timed.perform_async([{"id": f"{run}-0", "payload": "again"}])
        if run == 0:
            Timed.perform_async([{"id": "bad"}])
        server = Server(lowkiq.settings)
        server.start()
        expected = 10 * (run + 1)
        eventually(lambda e=expected: Timed.metrics()["processed"] == e, timeout=10)
        server.request_stop()
        server.stop()  # the last counts are written on the way out
    total = lowkiq.history(5)["Timed"].total
    assert total.processed_jobs == 20 and total.failed_jobs == 1
    assert total.payloads == 23 and total.payloads_merged == 2
    assert total.failures == 1 and total.performs >= 8  # batches of up to 3
    assert total.duration_seconds >= 0.002 * total.performs
    assert sum(total.duration_buckets) == total.performs
    assert sum(total.wait_buckets) == total.jobs


def test_a_window_longer_than_8_hours_is_read_by_the_hour(redis_client):
    now = time.time()
    for ago, batches in ((5 * 60, 1), (2 * 3600, 3), (70.5 * 3600, 4), (75 * 3600, 50)):
        recorder = Recorder(redis_client, ["Orders"], clock=Clock(now - ago))
        for _ in range(batches):
            recorder.for_queue("Orders").performed([job("a", 1, now - ago)], now - ago, False)
        recorder.flush()
    week = read(redis_client, {"W": "Orders"}, 72 * 60, now=now)["W"]
    assert week.resolution == 60 and week.total.performs == 8  # 75 h ago is out (and expired)
    spans = week.series(60)
    assert len(spans) == 72 and spans[-1].start == (int(now // 3600)) * 3600.0
    assert [s.counts.performs for s in spans if s.counts.performs] == [4, 3, 1]
    day = read(redis_client, {"W": "Orders"}, 8 * 60, now=now)["W"]
    assert day.resolution == 10 and day.total.performs == 4
    assert len(day.series(10)) == 48 and len(day.series(60)) == 8
    hour = read(redis_client, {"W": "Orders"}, 60, now=now)["W"]
    assert hour.resolution == 1 and hour.total.performs == 1 and len(hour.series(1)) == 60
    with pytest.raises(ValueError, match="multiple of 60"):
        week.series(30)


def test_flushing_while_a_thread_counts_into_new_minutes_never_fails():
    """The flush reads and forgets minutes while the counting thread adds new ones."""
    import threading

    clock = Clock(T0)
    tally = WorkerTally(clock)
    stop = threading.Event()

    def count() -> None:
        while not stop.is_set():
            clock.now += 60  # every batch in a minute of its own
            tally.performed([job("a", 1, clock.now)], clock.now, False)

    counter = threading.Thread(target=count)
    counter.start()
    try:
        for _ in range(3000):
            tally.minutes.written(tally.minutes.unwritten(), clock.now)
    finally:
        stop.set()
        counter.join()
