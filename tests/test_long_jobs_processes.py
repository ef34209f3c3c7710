"""Long performs across stops and deploys, with real ``lowkiq worker`` processes on the
app of ``tests/apps/iterating.py``: TERM makes an iterating perform give the rest back
at once, deploys never bury a healthy job, a second TERM exits at once."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

import lowkiq
from tests.apps.runner import WorkerProcess, eventually

APP = "tests/apps/iterating.py"


@pytest.fixture
def app(
    redis_client: redis.Redis, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[type, type, Callable[..., WorkerProcess]]]:
    """The app's two workers (enqueueing into the session's Redis) and ``start(**env)``,
    which starts a worker process on the app; every process is killed after the test."""
    monkeypatch.setenv("REDIS_URL", redis_url)
    from tests.apps.iterating import Slow, Steps, Stuck

    lowkiq.settings.reset()
    lowkiq.settings.redis = lambda: redis.Redis.from_url(redis_url)
    lowkiq.settings.workers = [Steps, Stuck, Slow]
    started: list[WorkerProcess] = []

    def start(wait: bool = True, **env: str) -> WorkerProcess:
        process = WorkerProcess("-r", APP, env={"REDIS_URL": redis_url, **env})
        started.append(process)
        if wait:
            process.wait_started()
        return process

    yield Steps, Stuck, start
    for process in started:
        process.close()


def done(client: redis.Redis, job_id: str) -> list[int]:
    return [int(value) for value in client.lrange(f"test:done:{job_id}", 0, -1)]


def steps(count: int, sleep: float) -> list[dict[str, Any]]:
    return [
        {"id": "sync", "payload": {"v": n, "sleep": sleep}, "score": 1_800_000_000 + n}
        for n in range(count)
    ]


def test_term_during_an_iterating_perform_gives_the_rest_to_another_process(
    app: tuple[type, type, Callable[..., WorkerProcess]], redis_client: redis.Redis
) -> None:
    steps_worker, _, start = app
    first = start()
    steps_worker.perform_async(steps(100, 0.05))
    eventually(lambda: len(done(redis_client, "sync")) >= 10)
    second = start()
    asked = time.monotonic()
    first.signal(signal.SIGTERM)
    assert first.wait(10) == 0
    took = time.monotonic() - asked
    # One payload (0.05 s) + 0.5 s is the target; the rest is slack for a loaded machine
    # (the process's own exit: its threads, its connections).
    assert took < 2.0, first.output()
    eventually(lambda: len(done(redis_client, "sync")) >= 100, timeout=30)
    assert done(redis_client, "sync") == list(range(100))  # each once, in order
    assert second.process.poll() is None
    assert steps_worker.metrics()["morgue_length"] == 0


def test_three_deploys_in_a_row_never_bury_an_iterating_job(
    app: tuple[type, type, Callable[..., WorkerProcess]], redis_client: redis.Redis
) -> None:
    steps_worker, _, start = app
    running = start()
    steps_worker.perform_async(steps(150, 0.05))  # 7.5 s of work
    for _ in range(3):
        time.sleep(1.5)
        replacement = start(wait=False)
        running.signal(signal.SIGTERM)  # a deploy: TERM, 2 s of grace, then KILL
        try:
            running.wait(2)
        except Exception:
            running.kill()
        running = replacement
        running.wait_started()
    eventually(lambda: len(set(done(redis_client, "sync"))) >= 150, timeout=60)
    performed = done(redis_client, "sync")
    assert sorted(set(performed)) == list(range(150))
    assert performed == sorted(performed)  # in order (a KILL may repeat a payload)
    assert steps_worker.metrics()["morgue_length"] == 0


def test_a_perform_stuck_in_a_c_call_a_second_term_exits_and_the_next_owner_runs_it(
    app: tuple[type, type, Callable[..., WorkerProcess]], redis_client: redis.Redis
) -> None:
    _, stuck_worker, start = app
    first = start(TEST_SHUTDOWN_TIMEOUT="60")
    stuck_worker.perform_async([{"id": "c-call", "payload": {"once": "test:once", "sleep": 60}}])
    eventually(lambda: redis_client.llen("test:stuck_started") == 1)
    first.signal(signal.SIGTERM)
    time.sleep(0.5)
    assert first.process.poll() is None  # waiting for the perform (shutdown_timeout)
    asked = time.monotonic()
    first.signal(signal.SIGTERM)
    assert first.wait(5) != 0
    assert time.monotonic() - asked < 2.0
    # The stop was announced: the restore of its batch is no death (max_restores = 1
    # would send the job to the morgue otherwise); the next owner runs it.
    start()
    eventually(lambda: redis_client.lrange("test:stuck_done", 0, -1) == [b"c-call"], timeout=30)
    assert stuck_worker.metrics()["morgue_length"] == 0


def test_an_unannounced_death_still_counts_toward_max_restores(
    app: tuple[type, type, Callable[..., WorkerProcess]], redis_client: redis.Redis
) -> None:
    _, stuck_worker, start = app
    first = start()
    stuck_worker.perform_async([{"id": "killer", "payload": {"once": "test:once", "sleep": 60}}])
    eventually(lambda: redis_client.llen("test:stuck_started") == 1)
    first.kill()  # no TERM: nothing was announced
    start()
    eventually(lambda: stuck_worker.metrics()["morgue_length"] == 1, timeout=30)
    assert redis_client.llen("test:stuck_done") == 0


def test_the_busy_page_names_the_process_thread_and_time_and_says_asked_to_stop(
    app: tuple[type, type, Callable[..., WorkerProcess]], redis_client: redis.Redis
) -> None:
    from lowkiq_web import create_app

    _, stuck_worker, start = app
    worker = start(TEST_SHUTDOWN_TIMEOUT="60")
    stuck_worker.perform_async([{"id": "long-one", "payload": {"once": "test:once", "sleep": 60}}])
    eventually(lambda: redis_client.llen("test:stuck_started") == 1)
    pid = int(redis_client.lindex("test:stuck_started", 0) or 0)
    web = create_app().test_client()

    def row() -> str:
        page = web.get("/Stuck/busy").get_data(as_text=True)
        start_at = page.find('data-id="long-one"')
        return page[start_at : page.find("</tr>", start_at)] if start_at >= 0 else ""

    eventually(lambda: "lowkiq-" in row(), timeout=10)
    shown = row()
    assert f":{pid}" in shown and "asked to stop" not in shown
    worker.signal(signal.SIGTERM)
    eventually(lambda: "asked to stop" in row(), timeout=10)


def test_a_shard_handed_over_mid_perform_waits_for_it_no_overlap_no_death(
    app: tuple[type, type, Callable[..., WorkerProcess]], redis_client: redis.Redis
) -> None:
    from tests.apps.iterating import Slow

    _, _, start = app
    first = start()
    queue = Slow.queue()
    ids = {}
    number = 0
    while len(ids) < 2:  # one id per shard
        ids.setdefault(queue.shard_of(f"slow-{number}"), f"slow-{number}")
        number += 1
    # Each perform runs 3 lease TTLs (the app's lease_ttl is 2 s).
    Slow.perform_async([{"id": job_id, "payload": {"sleep": 6}} for job_id in ids.values()])
    eventually(lambda: redis_client.llen("test:slow_started") == 2)
    second = start()  # the assignment moves a shard to it while its batch runs
    eventually(lambda: Slow.metrics()["length"] == 0 and Slow.metrics()["busy"] == 0, timeout=30)
    time.sleep(1.0)
    assert redis_client.lrange("test:slow_overlaps", 0, -1) == []
    assert redis_client.llen("test:slow_started") == 2  # each once: nothing restored
    assert Slow.metrics()["morgue_length"] == 0
    assert "never reported released" not in first.output()
    assert second.process.poll() is None
