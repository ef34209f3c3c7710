"""What a ``perform`` may call, called from the executor threads of a running worker
server under load: ``current_batch()`` and its lease, ``should_stop``, ``yield_rest``,
``perform_async``, ``actions()`` and ``queries()``.  None of them may use the
dispatcher's own connection (one server and the 3-master cluster)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

import lowkiq
from lowkiq.runtime.server import Server
from tests.both_redis import server_or_cluster_client  # noqa: F401  (redis_client)

#: Jobs each test enqueues (ids spread over every shard).
JOBS = 400
#: Lease checks per perform in the first test.
CHECKS = 5


class Checking(lowkiq.Worker):
    """Checks its lease :data:`CHECKS` times a perform."""

    shards_count = 4
    performed: list[str] = []
    errors: list[BaseException] = []

    @classmethod
    def perform(cls, payloads_by_id: dict[str, list[Any]]) -> None:
        batch = lowkiq.current_batch()
        assert batch is not None and batch.lease is not None
        try:
            for _ in range(CHECKS):
                batch.lease.check()
        except Exception as exc:  # recorded, not raised: a retry waits 15 s or more
            cls.errors.append(exc)
        cls.performed.extend(payloads_by_id)


class FollowUp(lowkiq.Worker):
    """The job :class:`Calling` enqueues from its perform."""

    shards_count = 3
    performed: list[str] = []

    @classmethod
    def perform(cls, payloads_by_id: dict[str, list[Any]]) -> None:
        cls.performed.extend(payloads_by_id)


class Calling(lowkiq.Worker):
    """Calls every API a perform may call: job ``"n"`` enqueues follow-up ``"f<n>"``,
    reads and deletes its scheduled neighbour ``"later<n>"``, and yields nothing back."""

    shards_count = 4
    performed: list[str] = []
    errors: list[BaseException] = []
    fences: list[int] = []

    @classmethod
    def perform(cls, payloads_by_id: dict[str, list[Any]]) -> None:
        batch = lowkiq.current_batch()
        assert batch is not None and batch.lease is not None
        try:
            for job_id in payloads_by_id:
                batch.lease.check()
                cls.fences.append(batch.lease.fence)
                assert batch.lease.remaining() >= 0
                assert isinstance(batch.should_stop(), bool)
                FollowUp.perform_async([{"id": f"f{job_id}"}])
                (later,) = cls.queries().fetch([f"later{job_id}"])
                assert later["id"] == f"later{job_id}"
                assert cls.queries().scheduled_count() > 0
                assert FollowUp.metrics()["length"] >= 0
                assert cls.actions().delete([f"later{job_id}"]) == 1
                batch.yield_rest(job_id, [])
                batch.lease.check()
        except Exception as exc:  # recorded, not raised: a retry waits 15 s or more
            cls.errors.append(exc)
        cls.performed.extend(payloads_by_id)


@pytest.fixture
def serving(redis_client: Any) -> Iterator[Server]:
    """A worker server of :class:`Checking`, :class:`Calling` and :class:`FollowUp` with
    4 threads, in this process; stopped after the test."""
    for worker in (Checking, Calling, FollowUp):
        worker.performed = []
    Checking.errors, Calling.errors, Calling.fences = [], [], []
    lowkiq.settings.workers = [Checking, Calling, FollowUp]
    lowkiq.settings.threads_per_node = 4
    server = Server(lowkiq.settings)
    server.start()
    try:
        yield server
    finally:
        server.request_stop()
        server.stop()


def serve_until(
    server: Server, done: Any, errors: list[BaseException], timeout: float = 60.0
) -> None:
    """Wait until ``done()``, or until the server's dispatcher thread ends (fails, saying
    what ended it and what the performs raised)."""
    deadline = time.monotonic() + timeout
    while not done():
        assert all(thread.is_alive() for thread in server.threads), (
            f"the dispatcher thread ended (fatal: {server.fatal!r}); "
            f"{len(errors)} perform(s) raised: {errors[:3]!r}"
        )
        assert time.monotonic() < deadline, "the jobs were not performed in time"
        time.sleep(0.02)


def test_lease_checks_from_every_thread_see_the_lease_held(serving: Server) -> None:
    Checking.perform_async([{"id": n} for n in range(JOBS)])
    serve_until(serving, lambda: len(Checking.performed) >= JOBS, Checking.errors)
    assert Checking.errors == []  # no false LeaseLost (nor a reply read by another thread)
    assert sorted(Checking.performed, key=int) == [str(n) for n in range(JOBS)]
    assert all(thread.is_alive() for thread in serving.threads) and serving.fatal is None
    assert Checking.metrics()["length"] == 0


def test_every_api_a_perform_calls_works_from_every_thread(serving: Server) -> None:
    Calling.perform_async([{"id": f"later{n}", "perform_in": 2e9} for n in range(JOBS)])
    Calling.perform_async([{"id": n} for n in range(JOBS)])
    serve_until(
        serving,
        lambda: len(Calling.performed) >= JOBS and len(FollowUp.performed) >= JOBS,
        Calling.errors,
    )
    assert Calling.errors == []
    assert sorted(Calling.performed, key=int) == [str(n) for n in range(JOBS)]
    assert sorted(FollowUp.performed) == sorted(f"f{n}" for n in range(JOBS))
    assert min(Calling.fences) > 0
    assert all(thread.is_alive() for thread in serving.threads) and serving.fatal is None
    assert Calling.metrics()["length"] == 0  # every "later" id deleted
    assert FollowUp.metrics()["length"] == 0
