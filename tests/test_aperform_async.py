"""``await Worker.aperform_async(jobs)`` on ``redis.asyncio``: what it stores is what
``perform_async`` stores, with the same checks, middlewares, rounds and errors; each
event loop (and each forked process) has a client of its own; ``ametrics()`` and
``aqueries()`` read the queue from a loop.  On the single server and on the 3-master
Redis Cluster (``redis_client`` is both, see tests/both_redis.py)."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading
from collections.abc import Callable, Coroutine, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pytest
import redis

import lowkiq
from lowkiq.aio.client import async_client, close_async_client
from lowkiq.aio.off_loop import OFF_LOOP_JOBS
from lowkiq.clients.connection import Client
from lowkiq.clients.embedded import EmbeddedServer, redis_server_binary, start_server
from lowkiq.clients.embedded_cluster import free_port
from lowkiq.errors import ConfigurationError, InvalidJob, RedisFull, RedisUnavailable
from lowkiq.ownership.resharding import reshard
from lowkiq.serializers import dump_json
from lowkiq.storage.layout import Layout
from lowkiq.storage.push_plan import ROUND_JOBS
from lowkiq.testing import drain
from tests.both_redis import server_or_cluster_client  # noqa: F401  (redis_client: both)
from tests.conftest import lowkiq_on

T = TypeVar("T")


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run ``coroutine`` on a new event loop, its lowkiq client closed at the end."""

    async def main() -> T:
        try:
            return await coroutine
        finally:
            await close_async_client()

    return asyncio.run(main())


class SyncSide(lowkiq.Worker):
    shards_count = 6


class AsyncSide(lowkiq.Worker):
    shards_count = 6


def sample_jobs() -> list[dict[str, Any]]:
    """Jobs of every kind a call takes: scores, perform_in, groups, an id given twice."""
    jobs: list[dict[str, Any]] = []
    for n in range(40):
        job: dict[str, Any] = {
            "id": n,
            "payload": {"n": n},
            "score": 1000.0 + n,
            "perform_in": 1_800_000_000.0 + n % 3,
        }
        if n % 4 == 1:
            job["group"] = f"tenant-{n % 3}"
        jobs.append(job)
    jobs.append({"id": 7, "payload": {"n": "again"}, "score": 999.0})
    return jobs


def test_aperform_async_stores_what_perform_async_stores(redis_client: Client) -> None:
    lowkiq.settings.workers = [SyncSide, AsyncSide]
    SyncSide.perform_async(sample_jobs())
    run(AsyncSide.aperform_async(sample_jobs()))
    ids = [str(n) for n in range(40)]
    assert AsyncSide.queries().fetch(ids) == SyncSide.queries().fetch(ids)
    assert AsyncSide.metrics()["length"] == 40
    assert AsyncSide.queries().fetch(["7"])[0]["payloads"] == [
        [{"n": "again"}, 999.0],
        [{"n": 7}, 1007.0],
    ]


def test_a_job_without_score_or_perform_in_takes_redis_time_and_delay_counts_from_it(
    redis_client: Client,
) -> None:
    lowkiq.settings.workers = [AsyncSide]
    run(AsyncSide.aperform_async([{"id": "now"}, {"id": "later", "delay": 60}]))
    seconds, micros = _redis_time(redis_client)
    now = seconds + micros / 1e6
    found = {job["id"]: job for job in AsyncSide.queries().fetch(["now", "later"])}
    assert abs(found["now"]["perform_in"] - now) < 5
    assert found["now"]["payloads"][0][1] == found["now"]["perform_in"]
    assert abs(found["later"]["perform_in"] - (now + 60)) < 5


def _redis_time(client: Client) -> tuple[int, int]:
    if isinstance(client, redis.RedisCluster):
        node: Any = client.get_primaries()[0]  # type: ignore[no-untyped-call]
        reply: Any = client.time(target_nodes=node)  # type: ignore[call-arg]
    else:
        reply = client.time()
    return int(reply[0]), int(reply[1])


def test_one_bad_job_raises_invalid_job_and_nothing_is_written(redis_client: Client) -> None:
    lowkiq.settings.workers = [AsyncSide]
    good = [{"id": n} for n in range(20)]
    with pytest.raises(InvalidJob) as caught:
        run(AsyncSide.aperform_async([*good, {"id": "x", "perform_in": 60}]))
    assert (caught.value.index, caught.value.field) == (20, "perform_in")
    with pytest.raises(InvalidJob, match="wrap it in a list"):
        run(AsyncSide.aperform_async({"id": 1}))  # type: ignore[arg-type]
    assert AsyncSide.metrics()["length"] == 0


def test_a_job_naming_another_group_than_its_queued_id_raises_invalid_job(
    redis_client: Client,
) -> None:
    lowkiq.settings.workers = [AsyncSide]
    run(AsyncSide.aperform_async([{"id": "a", "group": "red"}]))
    others = [{"id": f"o{n}", "group": "blue"} for n in range(10)]
    with pytest.raises(InvalidJob, match="queued in 'red'"):
        run(AsyncSide.aperform_async([*others, {"id": "a", "group": "blue"}]))
    assert AsyncSide.metrics()["length"] == 1  # the call of several shards wrote nothing


def test_client_middlewares_change_add_and_drop_jobs(redis_client: Client) -> None:
    seen: list[str] = []

    def stamp(worker: Any, jobs: Sequence[dict[str, Any]], call_next: Any) -> Any:
        seen.append(worker.__name__)
        return call_next(worker, [{**job, "payload": {"stamped": job["id"]}} for job in jobs])

    def drop(worker: Any, jobs: Sequence[dict[str, Any]], call_next: Any) -> Any:
        kept = [job for job in jobs if job["id"] != "drop"]
        return call_next(worker, kept) if kept else None

    lowkiq.settings.workers = [AsyncSide]
    lowkiq.settings.client_middlewares = [stamp, drop]
    run(AsyncSide.aperform_async([{"id": "keep"}, {"id": "drop"}]))
    run(AsyncSide.aperform_async([{"id": "drop"}]))  # the chain stops: nothing written
    assert seen == ["AsyncSide", "AsyncSide"]
    jobs = AsyncSide.queries().fetch(["keep", "drop"])
    assert [(job["id"], job["payloads"][0][0]) for job in jobs] == [("keep", {"stamped": "keep"})]


def commandstats(client: redis.Redis) -> dict[str, int]:
    """MULTI calls, and script calls (as ``evalsha``: EVALSHA, or FCALL on Redis 7)."""
    stats = client.info("commandstats")
    calls = {
        name: stats.get(f"cmdstat_{name}", {}).get("calls", 0) for name in ("multi", "evalsha")
    }
    calls["evalsha"] += stats.get("cmdstat_fcall", {}).get("calls", 0)
    return calls


@pytest.fixture
def server(redis_url: str) -> Iterator[redis.Redis]:
    """The session's single server, flushed, lowkiq pointed at it."""
    with lowkiq_on(lambda: redis.Redis.from_url(redis_url)) as client:
        assert isinstance(client, redis.Redis)
        yield client


def test_a_call_of_one_round_is_one_write_and_a_huge_call_goes_in_rounds(
    server: redis.Redis,
) -> None:
    lowkiq.settings.workers = [AsyncSide]
    run(AsyncSide.aperform_async([{"id": "warm"}]))  # the layout is read and written once

    async def calls() -> tuple[dict[str, int], dict[str, int]]:
        before = commandstats(server)
        await AsyncSide.aperform_async([{"id": f"a{n}"} for n in range(ROUND_JOBS)])
        middle = commandstats(server)
        await AsyncSide.aperform_async([{"id": f"b{n}"} for n in range(2 * ROUND_JOBS + 500)])
        after = commandstats(server)
        one = {name: middle[name] - before[name] for name in before}
        three = {name: after[name] - middle[name] for name in before}
        return one, three

    one, three = run(calls())
    assert one == {"multi": 1, "evalsha": AsyncSide.shards_count}
    assert three == {"multi": 3, "evalsha": 3 * AsyncSide.shards_count}
    assert AsyncSide.metrics()["length"] == 1 + 3 * ROUND_JOBS + 500


def test_a_script_redis_lost_is_loaded_again(server: redis.Redis) -> None:
    lowkiq.settings.workers = [AsyncSide]

    async def twice() -> None:
        await AsyncSide.aperform_async([{"id": n} for n in range(30)])
        server.script_flush()
        await AsyncSide.aperform_async([{"id": n} for n in range(30, 60)])

    run(twice())
    assert AsyncSide.metrics()["length"] == 60


def test_an_unreachable_redis_raises_redis_unavailable(redis_client: Client) -> None:
    port = free_port()
    lowkiq.settings.redis = lambda: redis.Redis(port=port, socket_connect_timeout=1)
    with pytest.raises(
        RedisUnavailable, match=r"AsyncSide.aperform_async: Redis is unreachable, 2"
    ):
        run(AsyncSide.aperform_async([{"id": 1}, {"id": 2}]))
    with pytest.raises(RedisUnavailable, match=r"AsyncSide.ametrics\(\): Redis is unreachable"):
        run(AsyncSide.ametrics())


def test_replicas_to_wait_for_are_waited_for_on_each_push(
    server: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    lowkiq.settings.workers = [AsyncSide]
    lowkiq.settings.wait_replicas = 1
    lowkiq.settings.wait_timeout = 0.05
    with caplog.at_level(logging.WARNING, logger="lowkiq.storage"):
        run(AsyncSide.aperform_async([{"id": n} for n in range(20)]))
    assert AsyncSide.metrics()["length"] == 20
    assert "AsyncSide: push reached 0 of 1 replica(s) within 50 ms" in caplog.text
    assert server.info("commandstats")["cmdstat_wait"]["calls"] >= 1


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[Callable[..., EmbeddedServer]]:
    """``start(*settings)``: a Redis server of this test's own, stopped after it."""
    started: list[EmbeddedServer] = []

    def start(*config: str) -> EmbeddedServer:
        directory = tmp_path / f"redis-{len(started)}"
        server = start_server(
            directory, binary=redis_server_binary(prefer_path=True), config=config
        )
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


def test_an_evicting_redis_refuses_jobs_unless_eviction_is_allowed(
    own_redis: Callable[..., EmbeddedServer],
) -> None:
    server = own_redis("--maxmemory-policy", "allkeys-lru")
    with lowkiq_on(lambda: redis.Redis.from_url(server.url)) as client:
        lowkiq.settings.workers = [AsyncSide]
        with pytest.raises(ConfigurationError, match="refused, nothing enqueued: .*allkeys-lru"):
            run(AsyncSide.aperform_async([{"id": "a"}]))
        assert client.dbsize() == 0
        lowkiq.settings.allow_eviction = True
        run(AsyncSide.aperform_async([{"id": "a"}]))
        assert AsyncSide.metrics()["length"] == 1


def fill(client: redis.Redis, headroom: int) -> None:
    """Let Redis take only ``headroom`` more bytes (``noeviction``: then it refuses)."""
    client.config_set("maxmemory-policy", "noeviction")
    client.config_set("maxmemory", client.info("memory")["used_memory"] + headroom)


def queued(client: redis.Redis, worker: type[lowkiq.Worker]) -> set[str]:
    """The ids queued in ``worker``'s queue, read without scripts (Redis may be full)."""
    queue = worker.queue()
    ids: set[str] = set()
    for shard in queue.shards:
        for member in client.zrange(queue.keys.fresh_lex_zset(shard), 0, -1):
            ids.add(member.split(b"\0", 1)[0].decode())
    return ids


def test_a_full_redis_raises_redis_full_and_a_split_call_says_which_ids_are_enqueued(
    own_redis: Callable[..., EmbeddedServer],
) -> None:
    server = own_redis()
    with lowkiq_on(lambda: redis.Redis.from_url(server.url)) as client:
        lowkiq.settings.workers = [AsyncSide]
        run(AsyncSide.aperform_async([{"id": "before"}]))
        client.set("ballast", "x" * 1_000_000)
        fill(client, -500_000)  # already over: one round, nothing written
        ids = [str(n) for n in range(50)]
        with pytest.raises(RedisFull) as caught:
            run(AsyncSide.aperform_async([{"id": n, "payload": {"n": n}} for n in ids]))
        assert (caught.value.enqueued, sorted(caught.value.not_confirmed)) == ([], sorted(ids))
        assert queued(client, AsyncSide) == {"before"}
        client.delete("ballast")
        client.config_set("maxmemory", 0)

        count = 30 * ROUND_JOBS
        fill(client, 3_000_000)  # room for some of the 30 rounds, not all
        with pytest.raises(RedisFull) as caught:
            run(AsyncSide.aperform_async([{"id": n, "payload": "p" * 200} for n in range(count)]))
        enqueued, missing = set(caught.value.enqueued), set(caught.value.not_confirmed)
        assert enqueued and missing and not enqueued & missing
        assert enqueued | missing == {str(n) for n in range(count)}
        assert queued(client, AsyncSide) == enqueued | {"before"}
        assert f"{len(enqueued)} job id(s) enqueued, {len(missing)} not enqueued" in str(
            caught.value
        )


def test_a_payload_over_proto_max_bulk_len_raises_invalid_job_and_config_is_read_once(
    own_redis: Callable[..., EmbeddedServer],
) -> None:
    server = own_redis("--proto-max-bulk-len", "1mb")
    with lowkiq_on(lambda: redis.Redis.from_url(server.url)) as client:
        lowkiq.settings.workers = [AsyncSide]

        async def twice() -> list[InvalidJob]:
            errors = []
            for _ in range(2):
                try:
                    await AsyncSide.aperform_async(
                        [{"id": "ok"}, {"id": "big", "payload": "x" * 1_100_000}]
                    )
                except InvalidJob as exc:
                    errors.append(exc)
            return errors

        before = client.info("commandstats").get("cmdstat_config", {}).get("calls", 0)
        errors = run(twice())
        assert [(error.index, error.field) for error in errors] == [(1, "payload")] * 2
        assert "proto-max-bulk-len is 1,048,576 bytes" in str(errors[0])
        after = client.info("commandstats").get("cmdstat_config", {}).get("calls", 0)
        assert after - before == 1
        assert client.dbsize() == 0


def test_each_event_loop_has_a_client_of_its_own(redis_client: Client) -> None:
    lowkiq.settings.workers = [AsyncSide]
    made: dict[str, Any] = {}

    async def enqueue(name: str) -> None:
        await AsyncSide.aperform_async([{"id": name}])
        made[name] = await async_client()
        assert await async_client() is made[name]  # kept for the loop

    def in_thread() -> None:
        asyncio.run(enqueue("thread"))

    thread = threading.Thread(target=in_thread)
    thread.start()
    asyncio.run(enqueue("main"))
    thread.join()
    asyncio.run(enqueue("again"))
    assert len({id(client) for client in made.values()}) == 3
    assert {job["id"] for job in AsyncSide.queries().fetch(["main", "thread", "again"])} == {
        "main",
        "thread",
        "again",
    }


def test_a_client_made_from_other_settings_is_not_reused(redis_client: Client) -> None:
    lowkiq.settings.workers = [AsyncSide]

    async def change() -> None:
        first = await async_client()
        lowkiq.settings.client_pool_size = 3
        second = await async_client()
        assert second is not first
        await AsyncSide.aperform_async([{"id": "x"}])

    run(change())
    assert AsyncSide.metrics()["length"] == 1


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_makes_its_own_client_on_the_same_loop(server: redis.Redis) -> None:
    lowkiq.settings.workers = [AsyncSide]
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(AsyncSide.aperform_async([{"id": "parent"}]))
        parents = loop.run_until_complete(async_client())
        pid = os.fork()
        if pid == 0:  # the child: its own client, then the job
            code = 1
            signal.alarm(30)  # never left hanging
            try:
                child = loop.run_until_complete(async_client())
                loop.run_until_complete(AsyncSide.aperform_async([{"id": "child"}]))
                code = 0 if child is not parents else 2
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        loop.run_until_complete(AsyncSide.aperform_async([{"id": "parent-after"}]))
        assert loop.run_until_complete(async_client()) is parents
        loop.run_until_complete(close_async_client())
    finally:
        loop.close()
    assert AsyncSide.metrics()["length"] == 3


def test_ametrics_and_aqueries_read_the_queue_from_a_loop(redis_client: Client) -> None:
    lowkiq.settings.workers = [AsyncSide]
    AsyncSide.perform_async([{"id": n, "payload": n, "score": n} for n in range(25)])

    async def reads() -> tuple[Any, ...]:
        queries = AsyncSide.aqueries()
        return (
            await AsyncSide.ametrics(),
            await queries.fetch(["3", "missing", "4"]),
            await queries.range_by_id("-", "+", limit=3),
            await queries.morgue_fetch(["3"]),
            await AsyncSide.aqueries(payloads_limit=1).fetch(["3"]),
        )

    metrics, fetched, first, dead, bounded = run(reads())
    assert {**metrics, "lag": 0} == {**AsyncSide.metrics(), "lag": 0}  # lag grows meanwhile
    assert metrics["lag"] > 0
    assert metrics["length"] == 25
    assert fetched == AsyncSide.queries().fetch(["3", "4"])
    assert [job["id"] for job in first] == ["0", "1", "10"]
    assert dead == []
    assert bounded[0]["payloads_count"] == 1
    with pytest.raises(AttributeError, match="no read 'push'"):
        AsyncSide.aqueries().push  # noqa: B018


def test_a_stale_layout_s_retired_shards_refuse_and_the_jobs_go_to_the_new_shards(
    redis_client: Client,
) -> None:
    class Resharded(lowkiq.Worker):
        shards_count = 3

    lowkiq.settings.workers = [Resharded]
    late = [f"late{n}" for n in range(30)]

    async def enqueue_on_a_stale_layout() -> None:
        await Resharded.aperform_async([{"id": "early"}])  # the layout is read: 3 shards
        await asyncio.to_thread(reshard, Resharded.queue(), 5)
        loop_client = await async_client()
        loop_client.layouts[Resharded.queue_name] = (
            Layout(0, 3),
            asyncio.get_running_loop().time(),
        )
        await Resharded.aperform_async([{"id": job_id} for job_id in late])

    run(enqueue_on_a_stale_layout())
    queue = Resharded._current_queue()
    assert queue.layout.new_shards == range(3, 8)
    assert {job["id"] for job in Resharded.queries().fetch(["early", *late])} == {"early", *late}
    for old in range(3):
        assert queue.client.zcard(queue.keys.perform_in_zset(old)) == 0


def test_a_large_call_is_checked_off_the_loop_and_a_small_one_on_it(
    redis_client: Client,
) -> None:
    threads: dict[int, set[str]] = {}

    def dump(payload: Any) -> bytes:
        threads.setdefault(payload["size"], set()).add(threading.current_thread().name)
        return dump_json(payload)

    lowkiq.settings.workers = [AsyncSide]
    lowkiq.settings.dump_payload = dump

    async def both() -> str:
        for size in (1, OFF_LOOP_JOBS):
            await AsyncSide.aperform_async(
                [{"id": f"{size}-{n}", "payload": {"size": size}} for n in range(size)]
            )
        return threading.current_thread().name

    loop_thread = run(both())
    assert threads[1] == {loop_thread}
    assert loop_thread not in threads[OFF_LOOP_JOBS]
    assert AsyncSide.metrics()["length"] == 1 + OFF_LOOP_JOBS


def test_calls_cancelled_mid_way_leave_the_pool_usable(server: redis.Redis) -> None:
    lowkiq.settings.workers = [AsyncSide]
    lowkiq.settings.client_pool_size = 2
    lowkiq.settings.pool_timeout = 2.0
    huge = [{"id": f"h{n}", "payload": "p" * 50} for n in range(40 * ROUND_JOBS)]

    async def cancel_many() -> None:
        await AsyncSide.aperform_async([{"id": "first"}])
        cancelled = 0
        for _ in range(20):  # (redis-py itself lets a few cancellations through)
            before = commandstats(server)["evalsha"]
            task = asyncio.create_task(AsyncSide.aperform_async(huge))
            while commandstats(server)["evalsha"] == before:  # until its rounds are under way
                await asyncio.sleep(0.001)
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                cancelled += 1
            if cancelled == 4:
                break
        assert cancelled == 4
        # Every connection went back to the pool of 2, none with replies left unread.
        for n in range(4):
            await AsyncSide.aperform_async([{"id": f"after{n}", "payload": n}])
        assert (await AsyncSide.ametrics())["length"] >= 5

    run(cancel_many())
    found = AsyncSide.queries().fetch([f"after{n}" for n in range(4)])
    assert [job["payloads"][0][0] for job in found] == [0, 1, 2, 3]


class FanOut(lowkiq.Worker):
    """An ``async def perform`` that enqueues into another queue from its thread's loop."""

    shards_count = 2

    @classmethod
    async def perform(cls, payloads_by_id: dict[str, list[Any]]) -> None:
        await AsyncSide.aperform_async(
            [{"id": f"{job_id}-{n}"} for job_id in payloads_by_id for n in range(3)]
        )


def test_an_async_perform_enqueues_with_aperform_async_on_its_thread_s_loop(
    redis_client: Client,
) -> None:
    lowkiq.settings.workers = [FanOut, AsyncSide]
    FanOut.perform_async([{"id": "a"}, {"id": "b"}])
    drained = drain(FanOut, raise_errors=True)
    assert drained.failed == 0
    assert AsyncSide.metrics()["length"] == 6
