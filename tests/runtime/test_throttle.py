"""A dispatcher under a rate limit: a shard waiting for tokens is not popped before its
time, counts as due no sooner, a dispatcher whose every shard waits sleeps without
calling Redis, and a pop takes the batches its tokens pay for in one round trip when they
run quickly."""

from __future__ import annotations

import time

import redis

import lowkiq
from tests.built_server import built_server
from tests.runtime.serving import process


class Paced(lowkiq.Worker):
    shards_count = 1
    rate_limit = lowkiq.RateLimit(5, burst=1)  # a token every 200 ms

    @classmethod
    def perform(cls, payloads_by_id):
        pass


def commands(client: redis.Redis) -> dict[str, int]:
    """Calls so far of each command Redis has run (those inside scripts included)."""
    stats = client.info("commandstats")
    return {name.removeprefix("cmdstat_"): stat["calls"] for name, stat in stats.items()}


def calls(client: redis.Redis) -> int:
    """Commands Redis has run so far (this call's INFO included)."""
    return sum(commands(client).values())


def test_a_dispatcher_waits_for_its_shards_tokens_without_calling_redis(redis_url, redis_client):
    with built_server(redis_url, Paced) as (_, _, dispatcher):
        (handler,) = dispatcher.handlers
        Paced.perform_async([{"id": n} for n in range(5)])
        assert process(handler)  # the bucket's one token; the next one is reserved
        assert not handler.ready()  # not popped before the reserved token is due
        (delay,) = dispatcher.idler.due_in(dispatcher.handlers)
        # 200 ms of refill, paid on the next step of the 50 ms grid (PACE_SECONDS).
        assert delay is not None and 0.1 < delay <= 0.25
        assert handler.throttle is not None and handler.throttle.waiting()
        handler.ack_now()

        before = calls(redis_client)
        started = time.monotonic()
        dispatcher.turn()
        slept = time.monotonic() - started
        assert calls(redis_client) - before == 1  # the INFO above: nothing from the thread
        assert 0.1 < slept < 0.3
        assert handler.ready() and process(handler)
        assert Paced.metrics()["length"] == 3


class Slow(lowkiq.Worker):
    shards_count = 1
    rate_limit = lowkiq.RateLimit(1, burst=1)  # a token a second

    @classmethod
    def perform(cls, payloads_by_id):
        pass


def test_a_long_wait_for_tokens_is_napped_in_steps_after_acking(redis_url, redis_client):
    with built_server(redis_url, Slow) as (_, _, dispatcher):
        (handler,) = dispatcher.handlers
        Slow.perform_async([{"id": n} for n in range(3)])
        assert process(handler)  # the bucket's token; the next one is due in a second
        assert handler.throttle is not None and handler.throttle.waiting()

        redis_client.script_load(handler.queue.scripts.ack.script)  # as after a first ack
        before = commands(redis_client)
        started = time.monotonic()
        dispatcher.turn()  # the shard waits for tokens: its finished batch is acked, then a nap
        slept = time.monotonic() - started
        after = commands(redis_client)
        # The ack of the finished batch (a DEL inside); no blocking read, no polling for
        # tokens that are not due: a nap of THROTTLE_NAP, then the dispatcher looks again.
        assert after.get("evalsha", 0) - before.get("evalsha", 0) == 1
        assert after.get("blpop", 0) == before.get("blpop", 0)
        assert after.get("del", 0) - before.get("del", 0) <= 1
        assert 0.2 < slept < 0.4
        assert Slow.metrics()["busy"] == 0
        assert not handler.ready()
        for _ in range(5):
            if handler.ready():
                break
            dispatcher.wait()
        assert handler.ready() and process(handler)
        assert Slow.metrics()["length"] == 1


class MultiBatch(lowkiq.Worker):
    """Batches of two; records each batch and calls ``on_perform``; fails those that hold
    an id in ``failing``; sleeps ``seconds`` in each."""

    shards_count = 1
    batch_size = 2
    rate_limit = lowkiq.RateLimit(1000, burst=20)
    performed: list[list[str]] = []
    failing: set[str] = set()
    seconds = 0.0
    on_perform = staticmethod(lambda: None)

    @classmethod
    def perform(cls, payloads_by_id):
        cls.performed.append(sorted(payloads_by_id))
        cls.on_perform()
        time.sleep(cls.seconds)
        if cls.failing & set(payloads_by_id):
            raise RuntimeError("boom")


def multi_batch(failing: set[str] = frozenset(), seconds: float = 0.0) -> type[MultiBatch]:
    MultiBatch.performed, MultiBatch.failing, MultiBatch.seconds = [], set(failing), seconds
    MultiBatch.on_perform = staticmethod(lambda: None)
    return MultiBatch


def test_a_limited_pop_takes_several_quick_batches_in_one_script(redis_url, redis_client):
    worker = multi_batch()
    with built_server(redis_url, worker) as (_, _, dispatcher):
        (handler,) = dispatcher.handlers
        worker.perform_async([{"id": f"{n:02}"} for n in range(15)])
        assert process(handler)  # one batch: the shard has not timed one yet
        before = commands(redis_client)
        assert process(handler)
        after = commands(redis_client)
        # The 13 other jobs (the tokens reserved by the first pop pay for them) in one
        # script that also acked the first batch; performed two at a time, in order.
        assert after["evalsha"] - before["evalsha"] == 1
        ids = [f"{n:02}" for n in range(15)]
        assert worker.performed == [ids[n : n + 2] for n in range(0, 15, 2)]
        handler.ack_now()
        assert worker.metrics()["processed"] == 15


def test_a_failed_batch_of_a_pop_is_retried_alone(redis_url, redis_client):
    worker = multi_batch(failing={"07"})
    with built_server(redis_url, worker) as (_, _, dispatcher):
        (handler,) = dispatcher.handlers
        worker.perform_async([{"id": f"{n:02}"} for n in range(12)])
        assert process(handler) and process(handler)
        assert len(worker.performed) == 6  # the batches after the failed one ran too
        handler.ack_now()
        metrics = worker.metrics()
        assert (metrics["processed"], metrics["failed"], metrics["length"]) == (10, 2, 2)
        retried = worker.queries().fetch(["06", "07"])
        assert [(job["id"], job["retry_count"]) for job in retried] == [("06", 0), ("07", 0)]


def test_slow_batches_are_popped_one_at_a_time(redis_url, redis_client):
    worker = multi_batch(seconds=0.03)  # more than half of POP_SECONDS each
    with built_server(redis_url, worker) as (_, _, dispatcher):
        (handler,) = dispatcher.handlers
        worker.perform_async([{"id": f"{n:02}"} for n in range(6)])
        for done in range(1, 4):
            assert process(handler)
            assert len(worker.performed) == done


def test_the_batches_of_a_pop_run_to_their_end_when_the_process_is_told_to_stop(
    redis_url, redis_client
):
    worker = multi_batch()
    with built_server(redis_url, worker) as (_, _, dispatcher):
        (handler,) = dispatcher.handlers
        worker.perform_async([{"id": f"{n:02}"} for n in range(9)])
        assert process(handler)  # one batch: the shard has not timed one yet
        worker.on_perform = staticmethod(dispatcher.stop.set)  # stop during the next batch
        assert process(handler)
        assert len(worker.performed) == 5  # the four batches of the second pop
        dispatcher.shutdown()
        metrics = worker.metrics()
        assert (metrics["processed"], metrics["length"], metrics["busy"]) == (9, 0, 0)
