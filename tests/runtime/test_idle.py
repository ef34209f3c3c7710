"""An idle dispatcher: it reads its shards' due times once a round, sleeps until the
earliest job is due, and wakes at once for a change of shards or a finished batch."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

import lowkiq
from lowkiq.ownership.events import Revoke
from tests.runtime.serving import dispatcher_of, ids_by_shard, turn_until


class Idle(lowkiq.Worker):
    shards_count = 4
    performed: list[tuple[str, float]] = []
    gates: dict[str, threading.Event] = {}

    @classmethod
    def perform(cls, payloads_by_id: dict[str, list[Any]]) -> None:
        for job_id in payloads_by_id:
            gate = cls.gates.get(job_id)
            if gate is not None:
                assert gate.wait(20)
            cls.performed.append((job_id, time.monotonic()))


@pytest.fixture(autouse=True)
def idle_worker(redis_client: redis.Redis) -> Iterator[None]:
    lowkiq.settings.workers = [Idle]
    Idle.performed, Idle.gates = [], {}
    yield
    for gate in Idle.gates.values():
        gate.set()


def script_calls(client: redis.Redis) -> int:
    """Scripts Redis has run so far."""
    return int(client.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0))


def test_an_idle_round_reads_the_due_times_once_and_wakes_when_a_job_is_due(
    redis_client: redis.Redis,
) -> None:
    with dispatcher_of(redis_client, Idle, poll_interval=30.0) as (dispatcher, queue):
        dispatcher.idler.due_in(dispatcher.handlers)  # Redis has the script now
        due = time.time() + 0.4
        Idle.perform_async([{"id": "soon", "perform_in": due}])
        redis_client.delete(*[queue.keys.wake_list(s) for s in queue.shards])
        before = script_calls(redis_client)
        dispatcher.turn()  # nothing due: waits until "soon" is
        assert script_calls(redis_client) - before == Idle.shards_count
        assert time.time() >= due - 0.01
        turn_until(dispatcher, lambda: bool(Idle.performed))
        assert [job_id for job_id, _ in Idle.performed] == ["soon"]


def test_a_job_enqueued_into_an_idle_process_wakes_it_at_once(redis_client: redis.Redis) -> None:
    with dispatcher_of(redis_client, Idle, poll_interval=30.0) as (dispatcher, _):
        waiting = threading.Thread(
            target=turn_until, args=(dispatcher, lambda: bool(Idle.performed), 20.0)
        )
        waiting.start()
        time.sleep(0.3)  # blocked on its shards' wake lists, for up to 30 s
        assert waiting.is_alive()
        Idle.perform_async([{"id": "now"}])
        waiting.join(2)  # (not woken, the wait would end after max_block: about 5 s here)
        assert not waiting.is_alive()  # woken by the enqueue, not left waiting
        assert [job_id for job_id, _ in Idle.performed] == ["now"]


def test_an_idle_dispatcher_asked_to_give_a_shard_up_stops_waiting_at_once(
    redis_client: redis.Redis,
) -> None:
    with dispatcher_of(redis_client, Idle, poll_interval=30.0) as (dispatcher, _):
        waiting = threading.Thread(target=dispatcher.turn)
        waiting.start()
        time.sleep(0.2)  # blocked on its shards' wake lists, for up to 30 s
        assert waiting.is_alive()
        dispatcher.tell(Revoke(("Idle", 2)))
        waiting.join(3)
        assert not waiting.is_alive()  # woken, not left waiting for poll_interval
        dispatcher.apply()
        assert [h.shard for h in dispatcher.handlers] == [0, 1, 3]


def test_a_batch_ending_wakes_a_dispatcher_blocked_on_the_idle_shards(
    redis_client: redis.Redis,
) -> None:
    with dispatcher_of(redis_client, Idle, poll_interval=30.0) as (dispatcher, queue):
        first, second = ids_by_shard(queue, 2)[0]
        Idle.gates[first] = gate = threading.Event()
        Idle.perform_async([{"id": first}, {"id": second}])
        dispatcher.stop.clear()
        runner = threading.Thread(target=dispatcher.run)
        runner.start()
        try:
            time.sleep(0.3)  # shard 0 performs; the others are idle: the dispatcher blocks
            released = time.monotonic()
            gate.set()
            deadline = time.monotonic() + 5
            while len(Idle.performed) < 2 and time.monotonic() < deadline:
                time.sleep(0.005)
            # The second job of shard 0 ran at once, not after poll_interval.
            assert [job_id for job_id, _ in Idle.performed] == [first, second]
            assert Idle.performed[1][1] - released < 1.0
        finally:
            dispatcher.stop.set()
            dispatcher.wake()
            runner.join(10)


def test_with_wait_replicas_every_pop_and_ack_waits_for_the_replicas(
    redis_client: redis.Redis,
) -> None:
    lowkiq.settings.wait_replicas = 1  # the test server has none: each WAIT times out
    lowkiq.settings.wait_timeout = 0.01
    with dispatcher_of(redis_client, Idle) as (dispatcher, _):
        Idle.perform_async([{"id": "replicated"}])
        redis_client.config_resetstat()
        turn_until(dispatcher, lambda: Idle.metrics()["processed"] == 1)
        waits = redis_client.info("commandstats")["cmdstat_wait"]["calls"]
        assert waits >= 2  # the pop's and the ack's, each in its own round trip


def test_a_wake_up_pops_the_woken_shard_alone_when_the_others_left_nothing_due(
    redis_client: redis.Redis,
) -> None:
    # A pop that took fewer jobs than it asked for left none due behind: the next
    # wake-up of another shard does not pop that shard again for nothing.  (A batch runs
    # meanwhile: a process with none in flight sends its idle shards' pops with its
    # wait, test_an_idle_process_pops_the_job_that_wakes_it_in_the_same_round_trip.)
    with dispatcher_of(redis_client, Idle, poll_interval=30.0) as (dispatcher, queue):
        by_shard = ids_by_shard(queue, 2)
        # Shard 0's first pop asks for one job (no batch ran yet), its second for more.
        Idle.perform_async([{"id": job_id} for job_id in by_shard[0]])
        redis_client.delete(*[queue.keys.wake_list(s) for s in queue.shards])
        turn_until(dispatcher, lambda: Idle.metrics()["processed"] == 2)
        Idle.gates[by_shard[3][0]] = threading.Event()
        Idle.perform_async([{"id": by_shard[3][0]}])
        turn_until(dispatcher, lambda: bool(dispatcher.in_flight))
        popped = []
        for handler in dispatcher.handlers:
            pop_command = handler.pop_command

            def spied(packed: bool = True, handler: Any = handler, pop: Any = pop_command) -> Any:
                popped.append(handler.shard)
                return pop(packed)

            handler.pop_command = spied  # type: ignore[method-assign]
        waiting = threading.Thread(target=dispatcher.turn)
        waiting.start()
        time.sleep(0.2)  # blocked on the idle shards' wake lists
        Idle.perform_async([{"id": by_shard[1][0]}])
        waiting.join(5)
        assert not waiting.is_alive()  # woken by shard 1's wake list
        turn_until(dispatcher, lambda: Idle.metrics()["processed"] == 3)
        assert popped == [1]
        Idle.gates[by_shard[3][0]].set()
