"""The server in this process: batches, middlewares, retries, morgue, restore, wake-up, stop."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

import lowkiq
from lowkiq.clients.embedded import start_server
from lowkiq.clients.embedded_cluster import free_port
from lowkiq.ownership.membership import socket_timeout_of
from lowkiq.runtime.server import Server
from lowkiq.serializers import split_error
from tests.apps.runner import eventually
from tests.conftest import lowkiq_on
from tests.leasing import pop


class Seen(lowkiq.Worker):
    shards_count = 3
    batch_size = 2
    max_retry_count = 2
    log: list[Any] = []
    exhausted: list[Any] = []
    fail_ids: set[str] = set()

    @classmethod
    def retry_in(cls, retry_count: int) -> float:
        return 0.05

    @classmethod
    def retries_exhausted(cls, jobs: list[dict[str, Any]]) -> None:
        cls.exhausted.extend(jobs)

    @classmethod
    def perform(cls, payloads_by_id: dict[str, list[Any]]) -> None:
        cls.log.append(("perform", dict(payloads_by_id)))
        failing = cls.fail_ids & set(payloads_by_id)
        if failing:
            raise RuntimeError(f"boom {sorted(failing)}")


@pytest.fixture
def server(redis_client: redis.Redis) -> Iterator[Callable[..., Server]]:
    """Start a server over [Seen] (with settings overrides); stopped after the test."""
    Seen.log, Seen.exhausted, Seen.fail_ids = [], [], set()
    started: list[Server] = []

    def start(**overrides: Any) -> Server:
        lowkiq.settings.workers = [Seen]
        lowkiq.settings.poll_interval = 0.05
        lowkiq.settings.threads_per_node = 2
        for name, value in overrides.items():
            setattr(lowkiq.settings, name, value)
        srv = Server(lowkiq.settings)
        srv.start()
        started.append(srv)
        return srv

    yield start
    for srv in started:
        srv.request_stop()
        srv.stop()


def performed_ids() -> set[str]:
    return {job_id for kind, batch in Seen.log if kind == "perform" for job_id in batch}


def test_jobs_are_performed_merged_and_acked(server: Callable[..., Server]) -> None:
    Seen.perform_async(
        [{"id": 1, "payload": "b", "score": 2}, {"id": 1, "payload": "a", "score": 1}]
        + [{"id": n} for n in range(2, 6)]
    )
    server()
    eventually(lambda: performed_ids() == {"1", "2", "3", "4", "5"})
    assert ("perform", {"1": ["a", "b"]}) in [
        (kind, {k: v for k, v in batch.items() if k == "1"}) for kind, batch in Seen.log
    ]
    metrics = eventually(lambda: (m := Seen.metrics())["processed"] == 5 and m)
    assert metrics["busy"] == 0 and metrics["length"] == 0


def test_server_middlewares_wrap_perform_first_outermost(server: Callable[..., Server]) -> None:
    calls: list[str] = []

    def outer(worker: type, batch: dict, call_next: Callable) -> None:
        calls.append(f"outer {worker.__name__} {sorted(batch)}")
        call_next(worker, batch)
        calls.append("outer after")

    def inner(worker: type, batch: dict, call_next: Callable) -> None:
        calls.append("inner")
        call_next(worker, batch)
        calls.append("inner after")

    Seen.perform_async([{"id": "x"}])
    server(server_middlewares=[outer, inner])
    eventually(lambda: len(calls) == 4)
    assert calls == ["outer Seen ['x']", "inner", "inner after", "outer after"]


def test_a_failing_batch_is_retried_then_buried(server: Callable[..., Server]) -> None:
    Seen.fail_ids = {"bad"}
    Seen.perform_async([{"id": "bad", "payload": {"n": 1}}])
    server()
    dead = eventually(lambda: Seen.queries().morgue_fetch(["bad"]))
    assert split_error(dead[0]["error"]).summary == "RuntimeError: boom ['bad']"
    assert [batch for kind, batch in Seen.log] == [{"bad": [{"n": 1}]}] * 3
    # retries_exhausted runs just after the failure step made the job dead.
    [exhausted] = eventually(lambda: Seen.exhausted)
    assert (exhausted["id"], exhausted["error"]) == ("bad", dead[0]["error"])
    assert [payload for payload, _ in exhausted["payloads"]] == [{"n": 1}]
    assert all(isinstance(score, float) for _, score in exhausted["payloads"])
    assert eventually(lambda: Seen.metrics()["failed"] == 3)


def test_a_middleware_exception_takes_the_failure_path(server: Callable[..., Server]) -> None:
    def refuse(worker: type, batch: dict, call_next: Callable) -> None:
        raise ValueError("refused")

    Seen.perform_async([{"id": "m"}])
    server(server_middlewares=[refuse])
    jobs = eventually(lambda: [j for j in Seen.queries().fetch(["m"]) if j["retry_count"] >= 0])
    assert split_error(jobs[0]["error"]).summary == "ValueError: refused"
    assert Seen.log == []


def test_start_restores_a_batch_left_in_processing(
    server: Callable[..., Server], redis_client: redis.Redis
) -> None:
    Seen.perform_async([{"id": "left", "payload": "p"}])
    queue = Seen.queue(redis_client)
    shard = queue.shard_of("left")
    assert [job.id for job in pop(queue, shard, 1)] == ["left"]
    assert Seen.metrics()["busy"] == 1
    redis_client.delete(queue.keys.lease(shard))  # the crashed owner's lease expired
    server()
    eventually(lambda: ("perform", {"left": ["p"]}) in Seen.log)
    eventually(lambda: Seen.metrics()["busy"] == 0)


def test_an_idle_thread_wakes_on_enqueue_not_on_poll(server: Callable[..., Server]) -> None:
    server(poll_interval=60.0)
    time.sleep(0.2)  # every thread is now blocked waiting
    Seen.perform_async([{"id": "now"}])
    eventually(lambda: performed_ids() == {"now"}, timeout=10)


def test_a_job_scheduled_for_later_runs_on_time_without_an_enqueue(
    server: Callable[..., Server],
) -> None:
    server(poll_interval=60.0)
    time.sleep(0.2)
    due = time.time() + 0.5
    Seen.perform_async([{"id": "later", "perform_in": due}])
    eventually(lambda: performed_ids() == {"later"}, timeout=10)
    assert time.time() >= due


@pytest.mark.parametrize("socket_timeout", [None, 30.0])
def test_an_idle_thread_learns_of_a_job_scheduled_before_its_wait_ends(
    server: Callable[..., Server], redis_url: str, socket_timeout: float | None
) -> None:
    """Whatever the client's socket timeout (none by default before redis-py 6): a job
    scheduled sooner than anything the thread waits for ends its wait."""
    lowkiq.settings.redis = lambda: redis.Redis.from_url(redis_url, socket_timeout=socket_timeout)
    Seen.perform_async([{"id": "far", "perform_in": time.time() + 3600}])
    server(poll_interval=60.0, threads_per_node=1)
    time.sleep(0.3)  # the thread now waits for "far", or for poll_interval
    due = time.time() + 0.5
    Seen.perform_async([{"id": "soon", "perform_in": due}])
    eventually(lambda: performed_ids() == {"soon"}, timeout=20)
    assert time.time() >= due


def test_stop_does_not_wait_for_a_sleeping_thread(server: Callable[..., Server]) -> None:
    srv = server(poll_interval=60.0)
    time.sleep(0.2)
    started = time.monotonic()
    srv.request_stop()
    srv.stop()
    assert time.monotonic() - started < 10
    assert not any(thread.is_alive() for thread in srv.threads)


def test_a_base_exception_stops_the_server_and_keeps_the_batch(
    server: Callable[..., Server],
) -> None:
    class Fatal(BaseException):
        pass

    last_words: list[BaseException] = []

    def explode(worker: type, batch: dict, call_next: Callable) -> None:
        raise Fatal("stop everything")

    Seen.perform_async([{"id": "f"}])
    srv = server(server_middlewares=[explode], last_words=last_words.append)
    done = threading.Thread(target=srv.wait)
    done.start()
    done.join(10)
    assert not done.is_alive()
    assert isinstance(srv.fatal, Fatal) and last_words == [srv.fatal]
    srv.stop()
    assert Seen.metrics()["busy"] == 1
    assert Seen.queries().processing_data()


def test_on_server_init_runs_once_before_the_threads(server: Callable[..., Server]) -> None:
    calls: list[int] = []
    srv = server(on_server_init=lambda: calls.append(len(threading.enumerate())))
    assert len(calls) == 1
    assert srv.threads and calls[0] < len(threading.enumerate())


def test_seq_scheduler_and_a_custom_splitter(server: Callable[..., Server]) -> None:
    srv = server(
        build_scheduler=lowkiq.build_seq_scheduler,
        build_splitter=lambda: lambda shards: [list(shards)],
    )
    assert srv.dispatcher is not None
    assert srv.dispatcher.describe() == "Seen:0-2"
    Seen.perform_async([{"id": n} for n in range(10)])
    eventually(lambda: performed_ids() == {str(n) for n in range(10)})


class OneShard(lowkiq.Worker):
    """One shard and room for the whole test's jobs in one batch."""

    shards_count = 1
    batch_size = 10
    seen: list[dict[str, list[Any]]] = []
    exhausted: list[Any] = []

    @classmethod
    def perform(cls, payloads_by_id: dict[str, list[Any]]) -> None:
        cls.seen.append(dict(payloads_by_id))

    @classmethod
    def retries_exhausted(cls, jobs: list[dict[str, Any]]) -> None:
        cls.exhausted.extend(jobs)


def test_an_undecodable_payload_buries_its_own_job_and_the_batch_goes_on(
    server: Callable[..., Server],
) -> None:
    OneShard.seen, OneShard.exhausted = [], []
    lowkiq.settings.workers = [OneShard]
    OneShard.perform_async([{"id": "good", "payload": 1, "score": 1, "perform_in": 1e9}])
    OneShard.queue().push([("bad", b"\xff{not json", 2.0, 1e9, None)])
    OneShard.perform_async([{"id": "also-good", "payload": 3, "score": 3, "perform_in": 1e9}])
    srv = server(workers=[OneShard])
    eventually(lambda: OneShard.queries().morgue_fetch(["bad"]))
    eventually(lambda: OneShard.metrics()["length"] == 0 and OneShard.seen)
    assert OneShard.seen == [{"good": [1], "also-good": [3]}]
    [dead] = OneShard.queries().morgue_fetch(["bad"])
    assert dead["error"].startswith("payload 1 of 1 cannot be decoded: UnicodeDecodeError")
    [[payload, score]] = dead["payloads"]
    assert isinstance(payload, lowkiq.Undecodable) and payload.raw == b"\xff{not json"
    assert score == 2.0
    assert OneShard.metrics()["failed"] == 1 and OneShard.exhausted == []
    # The process is alive and serves the next jobs.
    OneShard.perform_async([{"id": "next", "payload": 4}])
    eventually(lambda: {"next": [4]} in OneShard.seen)
    assert srv.fatal is None


@pytest.fixture(scope="module")
def tcp_redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Redis server of this module's own on TCP (redis-py 5.0 drops a unix socket
    connection's socket_timeout)."""
    server = start_server(tmp_path_factory.mktemp("tcp-redis"), port=free_port())
    try:
        yield server.url
    finally:
        server.stop()


@pytest.mark.parametrize(
    ("app_timeout", "dispatcher", "coordinator"),
    [(None, 2.0, 4.0), (3.0, 2.0, 3.0), (1.5, 1.5, 1.5)],
)
def test_lowkiqs_own_calls_wait_a_bounded_time_on_a_redis_that_hangs(
    tcp_redis_url: str, app_timeout: float | None, dispatcher: float, coordinator: float
) -> None:
    """Whatever the app's client waits (here: forever, 3 s, 1.5 s), the dispatcher's calls
    wait at most a sixth of lease_ttl, and the coordinator's (which carry lease renewals)
    and the metrics' a third; a shorter timeout of the app's own is kept."""
    with lowkiq_on(lambda: redis.Redis.from_url(tcp_redis_url, socket_timeout=app_timeout)):
        lowkiq.settings.workers = [Seen]
        lowkiq.settings.lease_ttl = 12.0
        server = Server(lowkiq.settings)
        server.build()
        assert server.dispatcher is not None and server.coordinator is not None
        assert server.dispatcher.client.socket_timeout == dispatcher
        assert socket_timeout_of(server.coordinator.membership.client) == coordinator
        assert socket_timeout_of(server.recorder.client) == coordinator


class Relay(lowkiq.Worker):
    """Each job of step < 2 enqueues the next step under an id of its own, from perform."""

    shards_count = 4
    performed: list[tuple[str, int, str]] = []
    lock = threading.Lock()

    @classmethod
    def perform(cls, payloads_by_id: dict[str, list[Any]]) -> None:
        for job_id, payloads in payloads_by_id.items():
            step = payloads[-1]
            with cls.lock:
                cls.performed.append((job_id, step, threading.current_thread().name))
            if step < 2:
                root = job_id.split("/")[0]
                cls.perform_async([{"id": f"{root}/{step + 1}", "payload": step + 1}])


def test_jobs_enqueued_from_perform_under_load_are_each_performed_once(
    redis_client: redis.Redis,
) -> None:
    # Every executor thread enqueues through a client of its own while the test's thread
    # enqueues through the shared one: each enqueue lands in the queue it names.
    Relay.performed = []
    lowkiq.settings.workers = [Relay]
    lowkiq.settings.poll_interval = 0.05
    lowkiq.settings.threads_per_node = 3
    srv = Server(lowkiq.settings)
    srv.start()
    try:
        for n in range(150):
            Relay.perform_async([{"id": f"r{n}", "payload": 0}])
        eventually(lambda: len(Relay.performed) >= 450, timeout=60)
        time.sleep(0.2)  # nothing more comes
    finally:
        srv.request_stop()
        srv.stop()
    ids = [job_id for job_id, _, _ in Relay.performed]
    assert sorted(ids) == sorted(f"r{n}" + s for n in range(150) for s in ("", "/1", "/2"))
    assert {step for _, step, _ in Relay.performed} == {0, 1, 2}
    assert len({thread for _, _, thread in Relay.performed}) > 1  # under load: several threads
    assert Relay.metrics()["length"] == 0
