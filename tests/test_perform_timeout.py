"""``Worker.perform_timeout`` in real ``lowkiq worker`` processes: a sync perform spinning
forever gets ``PerformTimeout``, an ``async def`` one awaiting forever is cancelled, both
fail under the retry rules, and one stuck in a C call turns ``/live`` 503 naming it."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
import redis

from tests.apps.runner import WorkerProcess, eventually
from tests.health.probe import free_ports, verdict

#: The issue's bound, from the perform's own recorded start to the limit seen in it.
WITHIN = 2.5
#: The perform records its start a little after its limit started.
EARLY = 0.1


def start(
    name: str,
    worker_processes: Callable[..., WorkerProcess],
    monkeypatch: pytest.MonkeyPatch,
    redis_url: str,
    *args: str,
) -> tuple[type, WorkerProcess]:
    """Start a one-thread worker process on ``tests/apps/time_limited.py`` serving the
    worker ``name``: its class, and the process."""
    monkeypatch.setenv("REDIS_URL", redis_url)
    from tests.apps.time_limited import WORKERS

    process = worker_processes(
        "-r", "tests/apps/time_limited.py", "--threads", "1", *args, TEST_WORKER=name
    )
    return WORKERS[name], process


def stopped_after(redis_client: redis.Redis, job_id: str, count: int) -> list[float]:
    """How long each of the first ``count`` interrupted performs of ``job_id`` ran."""
    rows = eventually(
        lambda: len(found := redis_client.lrange("test:limit:stopped", 0, -1)) >= count and found,
        timeout=30,
    )
    return [float(row.split()[1]) for row in rows if row.split()[0].decode() == job_id]


def performs(redis_client: redis.Redis) -> list[tuple[str, str, str]]:
    """Every perform's ``(id, thread, retry_count)``, in order."""
    rows = redis_client.lrange("test:limit:threads", 0, -1)
    return [tuple(row.decode().split()) for row in rows]  # type: ignore[misc]


def check_failed_twice(worker: type, redis_client: redis.Redis, job_id: str) -> None:
    """The job timed out, was retried (``retry_count`` -1 then 0), timed out again and
    went to the morgue with an error naming ``PerformTimeout``, the worker, the id and the
    limit; the same thread then performs the next batch as usual."""
    eventually(lambda: worker.metrics()["morgue_length"] == 1, timeout=30)
    [dead] = worker.queries().morgue_fetch([job_id])
    limit = f"{worker.__name__}.perform_timeout ({worker.perform_timeout:g}s)"
    assert dead["error"].startswith(f"PerformTimeout: {worker.__name__}:"), dead
    assert f"perform of '{job_id}' ran past {limit}" in dead["error"], dead
    worker.perform_async([{"id": "after", "payload": {"v": 1}}])
    eventually(lambda: redis_client.lrange("test:limit:done", 0, -1) == [b"1"])
    rows = performs(redis_client)
    assert [(row[0], row[2]) for row in rows] == [(job_id, "-1"), (job_id, "0"), ("after", "-1")]
    assert len({row[1] for row in rows}) == 1  # one thread did all three


def test_a_sync_perform_spinning_forever_gets_perform_timeout_and_is_retried(
    redis_client: redis.Redis,
    redis_url: str,
    worker_processes: Callable[..., WorkerProcess],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spin, _ = start("Spin", worker_processes, monkeypatch, redis_url)
    spin.perform_async([{"id": "s", "payload": {"spin": True}}])
    took = stopped_after(redis_client, "s", 2)
    assert all(spin.perform_timeout - EARLY <= seconds < WITHIN for seconds in took), took
    check_failed_twice(spin, redis_client, "s")


def test_an_async_perform_awaiting_forever_is_cancelled_and_retried(
    redis_client: redis.Redis,
    redis_url: str,
    worker_processes: Callable[..., WorkerProcess],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    forever, _ = start("Forever", worker_processes, monkeypatch, redis_url)
    forever.perform_async([{"id": "f", "payload": {"forever": True}}])
    took = stopped_after(redis_client, "f", 2)
    assert all(forever.perform_timeout - EARLY <= seconds < WITHIN for seconds in took), took
    check_failed_twice(forever, redis_client, "f")


def test_a_perform_stuck_in_a_c_call_makes_live_503_naming_it_past_the_grace(
    redis_client: redis.Redis,
    redis_url: str,
    worker_processes: Callable[..., WorkerProcess],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from lowkiq.perform.timeouts import STUCK_GRACE

    port = free_ports()
    ccall, process = start(
        "CCall",
        worker_processes,
        monkeypatch,
        redis_url,
        "--health-port",
        str(port),
        "--health-host",
        "127.0.0.1",
    )
    eventually(lambda: verdict(port, "/live")[0] == 200)
    sleep = 9
    ccall.perform_async([{"id": "c", "payload": {"sleep": sleep}}])
    started = float(eventually(lambda: redis_client.lrange("test:limit:started:c", 0, -1))[0])
    status, stuck = eventually(lambda: (found := verdict(port, "/live"))[0] == 503 and found)
    seen = time.time() - started
    threshold = ccall.perform_timeout + STUCK_GRACE
    # Not before the threshold; the probes poll every 20 ms, the machine may be slow.
    assert threshold - 0.1 <= seen < threshold + 2, (seen, stuck)
    shard = ccall.queries().shard_of("c")
    assert stuck["reason"].startswith(f"thread 0 in perform of CCall:{shard} ('c') for "), stuck
    assert "past CCall.perform_timeout (1s) + 5s, it could not be interrupted" in stuck["reason"]
    # The C call returns: PerformTimeout lands, the batch fails, the process is live again.
    took = stopped_after(redis_client, "c", 1)
    assert sleep - 0.5 <= took[0] < sleep + 2, took
    eventually(lambda: verdict(port, "/live")[0] == 200)
    assert f"failed: PerformTimeout: CCall:{shard} perform of 'c' ran past" in process.output()
    # Retried (retry_count 0), it runs without the C call and succeeds.
    eventually(lambda: redis_client.lrange("test:limit:started:c", 0, -1)[1:], timeout=30)
    ccall.perform_async([{"id": "after", "payload": {"v": 2}}])
    eventually(lambda: redis_client.lrange("test:limit:done", 0, -1) == [b"2"])
    rows = performs(redis_client)
    assert [(row[0], row[2]) for row in rows] == [("c", "-1"), ("c", "0"), ("after", "-1")]
    assert len({row[1] for row in rows}) == 1
