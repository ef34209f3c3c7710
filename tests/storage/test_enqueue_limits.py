"""Enqueueing at the limits: a huge ``perform_async`` is sent in rounds that each keep
Redis busy briefly, and a failure part-way says exactly which ids are enqueued; a
full Redis (maxmemory, ``noeviction``) raises ``RedisFull``; a payload larger than
Redis's ``proto-max-bulk-len`` is an ``InvalidJob`` that says so.

The tests that change a server's settings start a Redis of their own."""

from __future__ import annotations

import contextlib
import random
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.backoff
import redis.retry

import lowkiq
from lowkiq.clients.connection import Client
from lowkiq.clients.embedded import EmbeddedServer, redis_server_binary, start_server
from lowkiq.errors import EnqueueIncomplete, InvalidJob, RedisFull
from lowkiq.storage.push_plan import ROUND_BYTES, ROUND_JOBS, cut_rounds
from tests.conftest import lowkiq_on

# -- rounds (no Redis) -----------------------------------------------------------


def members(count: int, size: int, prefix: str = "j") -> list[tuple[bytes, bytes]]:
    """Pushed jobs (id, body) of ``size`` bytes each."""
    ids = [f"{prefix}{n}".encode() for n in range(count)]
    return [(job_id, b"x" * (size - len(job_id))) for job_id in ids]


def bytes_of(members: list[tuple[bytes, bytes]]) -> int:
    return sum(len(job_id) + len(body) for job_id, body in members)


def sizes(rounds: list[dict[Any, list[tuple[bytes, bytes]]]]) -> list[int]:
    return [sum(len(group) for group in part.values()) for part in rounds]


def test_rounds_hold_at_most_round_jobs_members() -> None:
    rounds = cut_rounds({(0, None): members(2 * ROUND_JOBS + 500, 20)}, ROUND_JOBS, ROUND_BYTES)
    assert sizes(rounds) == [ROUND_JOBS, ROUND_JOBS, 500]


def test_rounds_hold_at_most_round_bytes() -> None:
    big = ROUND_BYTES // 4
    rounds = cut_rounds({(0, 1e9): members(10, big)}, ROUND_JOBS, ROUND_BYTES)
    assert sizes(rounds) == [4, 4, 2]
    for part in rounds:
        assert sum(bytes_of(group) for group in part.values()) <= ROUND_BYTES


def test_a_member_larger_than_a_round_goes_alone() -> None:
    small, huge = members(1, 10, "a"), members(1, ROUND_BYTES + 1, "b")
    rounds = cut_rounds({(0, None): small + huge + small}, ROUND_JOBS, ROUND_BYTES)
    assert [part[(0, None)] for part in rounds] == [small, huge, small]


def test_rounds_keep_every_member_once_in_order_within_the_bounds() -> None:
    chance = random.Random(31)
    groups = {
        (shard, float(when)): members(
            chance.randrange(1, 700), chance.choice([20, 90_000]), f"{shard}-{when}-"
        )
        for shard in range(5)
        for when in range(4)
    }
    rounds = cut_rounds(groups, ROUND_JOBS, ROUND_BYTES)
    assert len(rounds) > 1
    for part in rounds:
        assert sum(len(group) for group in part.values()) <= ROUND_JOBS
        assert sum(bytes_of(group) for group in part.values()) <= ROUND_BYTES
    for key, expected in groups.items():
        assert [m for part in rounds for m in part.get(key, [])] == expected


# -- rounds on a real Redis --------------------------------------------------------


def script_calls(client: Client) -> int:
    """Script calls (EVALSHA, or FCALL on Redis 7) the server (every master of a cluster)
    has run."""
    if isinstance(client, redis.RedisCluster):
        infos = list(client.info("commandstats", target_nodes=client.PRIMARIES).values())
    else:
        infos = [client.info("commandstats")]
    names = ("cmdstat_evalsha", "cmdstat_fcall")
    return sum(info.get(name, {}).get("calls", 0) for info in infos for name in names)


@pytest.mark.parametrize(
    ("jobs", "calls"), [(ROUND_JOBS, 1), (2 * ROUND_JOBS + 345, 3)], ids=["one", "three"]
)
def test_a_call_is_one_script_call_per_round_and_enqueues_every_job(
    worker: type[lowkiq.Worker], redis_client: Client, jobs: int, calls: int
) -> None:
    worker.perform_async([{"id": "warm-up"}])  # the layout written, the script loaded
    before = script_calls(redis_client)
    worker.perform_async([{"id": n, "payload": {"n": n}} for n in range(jobs)])
    assert script_calls(redis_client) - before == calls
    assert worker.metrics()["length"] == jobs + 1


def test_a_payload_of_megabytes_under_the_limit_is_enqueued(worker: type[lowkiq.Worker]) -> None:
    payload = "x" * 3_000_000
    worker.perform_async([{"id": "big", "payload": payload}, {"id": "small"}])
    [job] = worker.queries().fetch(["big"])
    assert job["payloads"][0][0] == payload


# -- a Redis of the test's own ----------------------------------------------------


class Split(lowkiq.Worker):
    """Two shards: a round is one MULTI of two push calls."""

    shards_count = 2


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


def queued(client: redis.Redis, worker: type[lowkiq.Worker]) -> set[str]:
    """The ids queued in ``worker``'s queue, read without scripts (Redis may be full)."""
    queue = worker.queue()
    ids: set[str] = set()
    for shard in queue.shards:
        for member in client.zrange(queue.keys.fresh_lex_zset(shard), 0, -1):
            ids.add(member.split(b"\0", 1)[0].decode())
    return ids


#: The commands that run a script.
SCRIPT_CALLS = ("evalsha", "fcall", "eval")

PING_LOOP = """
import select, sys, time
import redis
client = redis.Redis.from_url(sys.argv[1])
client.ping()
print("ready", flush=True)
worst, pings = 0.0, 0
while not select.select([sys.stdin], [], [], 0.002)[0]:
    started = time.perf_counter()
    client.ping()
    worst = max(worst, time.perf_counter() - started)
    pings += 1
print(pings, worst, flush=True)
"""


class Pinger:
    """Pings Redis from a process of its own (this process's enqueue holding the GIL
    must not count as Redis's wait) until stopped; ``worst`` is the slowest answer in
    seconds, ``pings`` how many were answered."""

    def __init__(self, url: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", PING_LOOP, url],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        assert self.process.stdout.readline().strip() == "ready"
        self.worst = 0.0
        self.pings = 0

    def stop(self) -> None:
        """Stop pinging and read what was measured."""
        output, _ = self.process.communicate(timeout=30)
        pings, worst = output.split()
        self.pings, self.worst = int(pings), float(worst)


@pytest.mark.parametrize("shards", [1, 5])
def test_a_giant_call_leaves_redis_answering_other_clients_and_enqueues_all(
    own_redis: Callable[..., EmbeddedServer], shards: int
) -> None:
    """Sent in one piece, these jobs keep Redis busy for over a second (one script call
    of 300,000 jobs, or five of 60,000 in one MULTI); in rounds, for some milliseconds
    at a time.  The bounds are generous: a slow machine must not fail it."""
    count = 300_000
    server = own_redis("--slowlog-log-slower-than", "400000")  # 400 ms

    class Giant(lowkiq.Worker):
        shards_count = shards

    with lowkiq_on(lambda: redis.Redis.from_url(server.url)) as client:
        lowkiq.settings.workers = [Giant]
        jobs = [{"id": n} for n in range(count)]
        client.config_resetstat()
        pinger = Pinger(server.url)
        try:
            Giant.perform_async(jobs)
        finally:
            pinger.stop()
        assert Giant.metrics()["length"] == count
        stats = client.info("commandstats")
        calls = sum(stats.get(f"cmdstat_{name}", {}).get("calls", 0) for name in SCRIPT_CALLS)
        assert calls >= count // ROUND_JOBS  # in rounds of at most ROUND_JOBS jobs
        assert client.slowlog_get(128) == []  # no command ran 400 ms or more
        assert pinger.pings > 10
        # (A MULTI of rounds is not in the slowlog: a PING waits for it.  Loose: a
        # loaded host delays the pinger too.)
        assert pinger.worst < 1.0, f"a PING waited {pinger.worst:.3f} s"


def test_a_call_timing_out_part_way_says_truthfully_which_ids_are_enqueued(
    own_redis: Callable[..., EmbeddedServer],
) -> None:
    """Redis busy for a second (another client's long script) part-way through a call:
    the round waiting then times out.  The error names every id of the rounds before
    as enqueued, and none that is not."""
    count = 20 * ROUND_JOBS
    # Redis answers BUSY to the others once a script has run lua-time-limit (5 s): on a
    # loaded host the stall may run that long, and the round would get BUSY at once
    # instead of waiting past its socket timeout.
    server = own_redis("--lua-time-limit", "60000")
    no_retry = redis.retry.Retry(redis.backoff.NoBackoff(), 0)
    impatient = lambda: redis.Redis.from_url(server.url, socket_timeout=0.3, retry=no_retry)  # noqa: E731
    with lowkiq_on(impatient):
        lowkiq.settings.workers = [Split]
        watcher = redis.Redis.from_url(server.url)

        def stall_redis_part_way() -> None:
            while not queued(watcher, Split):
                time.sleep(0.001)
            busy = "local i = 0 while i < tonumber(ARGV[1]) do i = i + 1 end return i"
            # Redis is stalled while it runs, whether or not this read outlives it.
            with contextlib.suppress(redis.TimeoutError):
                watcher.eval(busy, 0, 20_000_000)

        stall = threading.Thread(target=stall_redis_part_way, daemon=True)
        stall.start()
        try:
            Split.perform_async([{"id": n} for n in range(count)])
        except EnqueueIncomplete as caught:
            error = caught
        else:
            # Older redis-py releases send a pipeline again after a read timeout
            # (retry or not): the call then succeeded, and said so truthfully.
            stall.join()
            assert redis.__version__.startswith("5."), "a timeout part-way was not reported"
            assert queued(watcher, Split) == {str(n) for n in range(count)}
            return
        stall.join()
        enqueued, missing = set(error.enqueued), set(error.not_confirmed)
        assert not enqueued & missing
        assert enqueued | missing == {str(n) for n in range(count)}
        # Read back on a patient connection: the producer's times out at 0.3 s, which a
        # read of every shard may take on a loaded host.
        found = queued(watcher, Split)
        assert enqueued <= found  # every id said to be enqueued is
        assert len(found - enqueued) <= ROUND_JOBS  # at most the round that timed out ran
        assert f"{len(enqueued)} job id(s) enqueued, {len(missing)} not confirmed" in str(error)


def fill(client: redis.Redis, headroom: int) -> None:
    """Let Redis take only ``headroom`` more bytes (``noeviction``: then it refuses)."""
    client.config_set("maxmemory-policy", "noeviction")
    client.config_set("maxmemory", client.info("memory")["used_memory"] + headroom)


@pytest.mark.parametrize("shards", [1, 5])
def test_a_full_redis_raises_redis_full_and_enqueues_nothing_of_a_one_round_call(
    own_redis: Callable[..., EmbeddedServer], shards: int
) -> None:
    server = own_redis()

    class Full(lowkiq.Worker):
        shards_count = shards

    with lowkiq_on(lambda: redis.Redis.from_url(server.url)) as client:
        lowkiq.settings.workers = [Full]
        Full.perform_async([{"id": "before"}])
        client.set("ballast", "x" * 1_000_000)
        fill(client, -500_000)  # already over
        ids = [str(n) for n in range(50)]
        with pytest.raises(RedisFull) as caught:
            Full.perform_async([{"id": n, "payload": {"n": n}} for n in ids])
        error = caught.value
        assert (error.enqueued, sorted(error.not_confirmed)) == ([], sorted(ids))
        assert "maxmemory" in str(error) and "0 job id(s) enqueued, 50 not enqueued" in str(error)
        assert queued(client, Full) == {"before"}
        client.delete("ballast")
        client.config_set("maxmemory", 0)
        Full.perform_async([{"id": n} for n in error.not_confirmed])  # enqueued again: fine
        assert queued(client, Full) == {"before", *ids}


def test_a_split_call_filling_redis_says_exactly_which_ids_are_enqueued(
    own_redis: Callable[..., EmbeddedServer],
) -> None:
    count = 30 * ROUND_JOBS
    server = own_redis()
    with lowkiq_on(lambda: redis.Redis.from_url(server.url)) as client:
        lowkiq.settings.workers = [Split]
        Split.perform_async([{"id": "before"}])
        fill(client, 3_000_000)  # room for some of the 30 rounds, not all
        with pytest.raises(RedisFull) as caught:
            Split.perform_async([{"id": n, "payload": "p" * 200} for n in range(count)])
        error = caught.value
        enqueued, missing = set(error.enqueued), set(error.not_confirmed)
        assert enqueued and missing and not enqueued & missing
        assert enqueued | missing == {str(n) for n in range(count)}
        assert queued(client, Split) == enqueued | {"before"}
        assert f"{len(enqueued)} job id(s) enqueued, {len(missing)} not enqueued" in str(error)


# -- proto-max-bulk-len -------------------------------------------------------------


def config_calls(client: redis.Redis) -> int:
    return client.info("commandstats").get("cmdstat_config", {}).get("calls", 0)


def test_a_payload_over_proto_max_bulk_len_raises_invalid_job_saying_so(
    own_redis: Callable[..., EmbeddedServer],
) -> None:
    server = own_redis("--proto-max-bulk-len", "1mb")
    with lowkiq_on(lambda: redis.Redis.from_url(server.url)) as client:
        lowkiq.settings.workers = [Split]
        before = config_calls(client)
        for _ in range(2):
            with pytest.raises(InvalidJob) as caught:
                Split.perform_async([{"id": "ok"}, {"id": "big", "payload": "x" * 1_100_000}])
            assert (caught.value.index, caught.value.field) == (1, "payload")
            assert "proto-max-bulk-len is 1,048,576 bytes" in str(caught.value)
            assert "unreachable" not in str(caught.value)
        assert config_calls(client) - before == 1  # read once for the client
        assert client.dbsize() == 0
        Split.perform_async([{"id": "fits", "payload": "x" * 1_000_000}])
        assert queued(client, Split) == {"fits"}


def test_redis_forbidding_config_is_taken_to_accept_512_mb(
    own_redis: Callable[..., EmbeddedServer],
) -> None:
    server = own_redis("--rename-command", "CONFIG", '""')  # as some managed Redis do
    with lowkiq_on(lambda: redis.Redis.from_url(server.url)) as client:
        lowkiq.settings.workers = [Split]
        Split.perform_async([{"id": "big", "payload": "x" * 2_000_000}])
        assert queued(client, Split) == {"big"}
