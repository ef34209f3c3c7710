"""A process with no batch in flight sends its idle shards' pops in the same write as
the BLPOP it waits on: the job that wakes it is popped without a round trip of its own,
and every guarantee of a pop holds (its lease checked, a Redis error leaves nothing
lost, a shard with a batch in flight is never popped)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis

import lowkiq
from lowkiq.ownership import leases
from tests.built_server import built_server
from tests.runtime.faults import Fault, faulty
from tests.runtime.serving import dispatcher_of, handler_of, ids_by_shard, turn_until
from tests.runtime.test_idle import Idle, idle_worker, script_calls  # noqa: F401 (its fixture)


def performed() -> list[str]:
    """The ids performed so far, in order."""
    return [job_id for job_id, _ in Idle.performed]


def wait_for(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.005)


def one_turn_woken_by(
    dispatcher: Any, enqueue: Callable[[], object], may_fail: bool = False
) -> list[BaseException]:
    """Run one turn of ``dispatcher`` that blocks idle, and wake it with ``enqueue()``.
    With ``may_fail``, returns the Redis errors the turn raised (a failed write may end it
    before the enqueue); without, the turn must raise none."""
    failed: list[BaseException] = []

    def turn() -> None:
        try:
            dispatcher.turn()
        except redis.RedisError as exc:
            failed.append(exc)

    waiting = threading.Thread(target=turn, name="waiting")
    waiting.start()
    time.sleep(0.2)  # blocked on the idle shards' wake lists, for up to poll_interval
    assert waiting.is_alive() or (may_fail and failed)
    enqueue()
    waiting.join(5)
    assert not waiting.is_alive()
    assert may_fail or not failed, failed
    return failed


def test_an_idle_process_pops_the_job_that_wakes_it_in_the_same_round_trip(
    redis_client: redis.Redis,
) -> None:
    with dispatcher_of(redis_client, Idle, poll_interval=30.0) as (dispatcher, _):
        one_turn_woken_by(dispatcher, lambda: Idle.perform_async([{"id": "woke"}]))
        # The turn the enqueue woke popped it and handed it over: no other turn needed.
        wait_for(lambda: performed() == ["woke"])


def threads_waiting(dispatcher: Any, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the threads that make the dispatcher's idle waits, as they come."""
    names: list[str] = []
    wait = dispatcher.idler.wait

    def noted(*args: Any) -> Any:
        names.append(threading.current_thread().name)
        return wait(*args)

    monkeypatch.setattr(dispatcher.idler, "wait", noted)
    return names


def test_the_thread_whose_wait_an_enqueue_ends_performs_that_job(
    redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    with dispatcher_of(redis_client, Idle, threads=3, poll_interval=30.0) as (dispatcher, _):
        waited_on = threads_waiting(dispatcher, monkeypatch)
        Idle.gates["woke"] = gate = threading.Event()
        one_turn_woken_by(dispatcher, lambda: Idle.perform_async([{"id": "woke"}]))
        wait_for(lambda: bool(dispatcher.executor.performing))
        performed_on = [t["thread"] for t in dispatcher.running_batches()]
        gate.set()
        wait_for(lambda: performed() == ["woke"])
        # The wait ran on an executor thread (not the dispatcher's, this test's), and the
        # same thread performs the job that ended it.
        assert waited_on[0].startswith("lowkiq-")
        assert performed_on == [waited_on[0]]


def test_a_wait_no_free_thread_takes_runs_on_the_dispatchers_thread(
    redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    with dispatcher_of(redis_client, Idle, threads=2, poll_interval=30.0) as (dispatcher, _):
        busy = threading.Event()
        for _ in range(2):  # each thread in a call of the user's code
            dispatcher.executor.call(lambda: busy.wait(20))
        waited_on = threads_waiting(dispatcher, monkeypatch)
        one_turn_woken_by(dispatcher, lambda: Idle.perform_async([{"id": "woke"}]))
        assert waited_on == ["waiting"]  # the turn's thread: the loan was taken back
        busy.set()
        wait_for(lambda: performed() == ["woke"])  # once the thread is free


def test_an_idle_process_asks_no_due_time_of_shards_its_last_pops_found_empty(
    redis_client: redis.Redis,
) -> None:
    with dispatcher_of(redis_client, Idle, poll_interval=0.2) as (dispatcher, queue):
        dispatcher.turn()  # nothing queued: the pops sent with the wait find every shard empty
        assert all(h.empty_since is not None for h in dispatcher.handlers)
        before = script_calls(redis_client)
        # The reading of a wait, or of an idle round (a wait on the wake lists comes next).
        idle_reading = dispatcher.idler.due_in(dispatcher.handlers, trust_empty=True)
        assert idle_reading == [None] * Idle.shards_count
        assert script_calls(redis_client) == before  # no due time asked
        # A job written into such a shard wakes its wait: it runs when due all the same.
        due = time.time() + 0.3
        Idle.perform_async([{"id": "later", "perform_in": due}])
        turn_until(dispatcher, lambda: bool(Idle.performed))
        assert performed() == ["later"]
        assert time.time() >= due - 0.01


def test_after_a_failed_wait_an_idle_process_asks_every_due_time_again(
    redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    with dispatcher_of(redis_client, Idle, poll_interval=0.2) as (dispatcher, _):
        dispatcher.turn()  # its pops find every shard empty
        assert all(h.empty_since is not None for h in dispatcher.handlers)

        def lost(*args: Any) -> Any:
            raise redis.ConnectionError("the wait's reply was lost")

        # The BLPOP may have taken the wake-up of a job written meanwhile.
        monkeypatch.setattr(dispatcher.idler, "block", lost)
        with pytest.raises(redis.ConnectionError):
            dispatcher.wait()
        monkeypatch.undo()
        before = script_calls(redis_client)
        dispatcher.idler.due_in(dispatcher.handlers, trust_empty=True)
        assert script_calls(redis_client) - before == Idle.shards_count


def test_a_busy_process_pops_a_job_written_into_a_shard_its_pops_found_empty(
    redis_client: redis.Redis,
) -> None:
    with dispatcher_of(redis_client, Idle, poll_interval=30.0) as (dispatcher, queue):
        ids = ids_by_shard(queue, 1)
        Idle.gates[ids[0][0]] = threading.Event()  # its perform runs until the test ends
        # The wait's pops take shard 0's job and find the other shards empty.
        one_turn_woken_by(dispatcher, lambda: Idle.perform_async([{"id": ids[0][0]}]))
        wait_for(lambda: dispatcher.in_flight and handler_of(dispatcher, 1).empty_since)
        # While shard 0's batch runs, no wait reads the wake lists: the round asks the
        # due times, that of shard 1 too, and pops the job written into it.
        Idle.perform_async([{"id": ids[1][0]}])
        redis_client.delete(queue.keys.wake_list(1))
        assert dispatcher.round() == 1
        wait_for(lambda: performed() == [ids[1][0]])


def test_a_pop_sent_with_the_wait_checks_the_lease(redis_client: redis.Redis) -> None:
    with dispatcher_of(redis_client, Idle, poll_interval=30.0) as (dispatcher, queue):
        job_id = ids_by_shard(queue, 1)[2][0]
        lost: list[Any] = []
        handler_of(dispatcher, 2).on_lost = lost.append

        def take_over_and_enqueue() -> None:
            redis_client.delete(queue.keys.lease(2))  # another process holds it now
            other, _, _ = leases.acquire(Idle.queue(redis_client), 2, "another", 60.0)
            assert other is not None
            Idle.perform_async([{"id": job_id}])

        one_turn_woken_by(dispatcher, take_over_and_enqueue)
        assert [h.shard for h in lost] == [2]
        assert not dispatcher.in_flight
        assert redis_client.zcard(queue.keys.perform_in_zset(2)) == 1  # left to its owner
        assert performed() == []


@pytest.mark.parametrize("kind", ["refused", "lost", "timeout", "cut"])
def test_a_wait_whose_pops_failed_loses_no_job_and_runs_none_twice(
    redis_client: redis.Redis, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The wait's write fails: before anything ran (refused), after the BLPOP returned and
    # the pops ran with their replies lost (lost, timeout), or with half of them run (cut).
    queue = Idle.queue(redis_client)
    fault = Fault(1, kind, armed=True, sha=queue.scripts.pop.sha)
    own = faulty(redis_client, fault)
    with dispatcher_of(redis_client, Idle, own=own, poll_interval=30.0) as (dispatcher, _):
        waited_on = threads_waiting(dispatcher, monkeypatch)
        failed = one_turn_woken_by(
            dispatcher, lambda: Idle.perform_async([{"id": "kept"}]), may_fail=True
        )
        assert fault.fired and len(failed) == 1
        # The wait failed on the executor thread it was lent to; its turn raised.
        assert waited_on[0].startswith("lowkiq-")
        turn_until(dispatcher, lambda: performed() == ["kept"])
        turn_until(dispatcher, lambda: Idle.metrics()["processed"] == 1)
        assert performed() == ["kept"]  # once
        assert Idle.metrics()["length"] == 0


def test_an_empty_pop_landed_after_the_woken_job_may_fail_and_loses_nothing(
    redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The pops that took nothing are landed by the dispatcher after the woken job started:
    # a Redis error there is raised in its turn, the job runs once, the shard goes on.
    from lowkiq.storage.processing import EMPTY_SHARD, Processing

    read = Processing.read_popped
    failures: list[int] = []

    def read_failing_once(self: Processing, reply: list[Any] | int) -> Any:
        if not failures and reply == EMPTY_SHARD:  # an empty shard's pop
            failures.append(1)
            raise redis.ConnectionError("injected: reading an empty pop")
        return read(self, reply)

    with dispatcher_of(redis_client, Idle, poll_interval=30.0) as (dispatcher, queue):
        waited_on = threads_waiting(dispatcher, monkeypatch)
        monkeypatch.setattr(Processing, "read_popped", read_failing_once)
        failed = one_turn_woken_by(
            dispatcher, lambda: Idle.perform_async([{"id": "woke"}]), may_fail=True
        )
        assert failures and [str(exc) for exc in failed] == ["injected: reading an empty pop"]
        assert waited_on[0].startswith("lowkiq-")  # the job's own thread made the wait
        turn_until(dispatcher, lambda: performed() == ["woke"])
        # Every shard is served again, the one whose landing failed too.
        later = [ids[0] for ids in ids_by_shard(queue, 1).values()]
        Idle.perform_async([{"id": job_id} for job_id in later])
        turn_until(dispatcher, lambda: sorted(performed()) == sorted(["woke", *later]))
        turn_until(dispatcher, lambda: Idle.metrics()["processed"] == 1 + len(later))
        assert performed().count("woke") == 1
        assert Idle.metrics()["length"] == 0


def test_a_shard_with_a_batch_in_flight_is_not_popped_while_it_runs(
    redis_client: redis.Redis,
) -> None:
    with dispatcher_of(redis_client, Idle, poll_interval=30.0) as (dispatcher, queue):
        by_shard = ids_by_shard(queue, 2)
        first, second = by_shard[1]
        other = by_shard[2][0]
        Idle.gates[first] = gate = threading.Event()
        Idle.perform_async([{"id": first}])
        turn_until(dispatcher, lambda: bool(dispatcher.in_flight))
        # Its next job comes while its batch runs; another shard's job wakes the wait.
        Idle.perform_async([{"id": second}])
        one_turn_woken_by(dispatcher, lambda: Idle.perform_async([{"id": other}]))
        turn_until(dispatcher, lambda: performed() == [other])
        assert redis_client.zcard(queue.keys.perform_in_zset(1)) == 1  # still queued
        gate.set()
        turn_until(dispatcher, lambda: performed() == [other, first, second])


class Paced(lowkiq.Worker):
    shards_count = 2
    rate_limit = lowkiq.RateLimit(2, burst=1)  # a token every 500 ms
    started: list[float] = []

    @classmethod
    def perform(cls, payloads_by_id: dict[str, list[Any]]) -> None:
        cls.started.append(time.monotonic())


def test_a_rate_limited_worker_waking_an_idle_process_keeps_to_its_rate(
    redis_url: str, redis_client: redis.Redis
) -> None:
    Paced.started = []
    with built_server(redis_url, Paced) as (_, _, dispatcher):
        dispatcher.executor.start()
        try:
            # The process is idle: the job that wakes it is popped behind its wait, under
            # the limit as any pop (the next one waits for the next token).
            one_turn_woken_by(dispatcher, lambda: Paced.perform_async([{"id": "first"}]))
            turn_until(dispatcher, lambda: len(Paced.started) == 1)
            Paced.perform_async([{"id": "second"}])
            turn_until(dispatcher, lambda: len(Paced.started) == 2)
            assert Paced.started[1] - Paced.started[0] > 0.4
        finally:
            dispatcher.executor.stop()
            dispatcher.executor.join(5)
