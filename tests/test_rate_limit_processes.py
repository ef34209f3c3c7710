"""Fleet-wide rate limits with real ``lowkiq worker`` processes: the rate holds summed over
processes, no id starves, the order of each id's payloads is kept, and a limit set at
run time applies without a restart."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest
import redis

import lowkiq
from lowkiq.limits.rate_limit import RateLimit
from tests.apps.runner import WorkerProcess, eventually
from tests.test_pause import cpu_seconds, lowkiq_cli

APP = "tests/apps/limited.py"


@pytest.fixture
def limited(redis_client: redis.Redis, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> type:
    """The limited app's worker class, enqueueing into the test's Redis."""
    monkeypatch.setenv("REDIS_URL", redis_url)
    from tests.apps.limited import Limited

    lowkiq.settings.workers = [Limited]
    return Limited


@pytest.fixture
def limited_processes(redis_url: str) -> Iterator[Callable[..., WorkerProcess]]:
    """Start `lowkiq worker` processes of the limited app; all are killed after the test."""
    started: list[WorkerProcess] = []

    def start(*args: str, **env: str) -> WorkerProcess:
        process = WorkerProcess("-r", APP, *args, env={"REDIS_URL": redis_url, **env})
        started.append(process)
        return process

    yield start
    for process in started:
        process.close()


def starts(record: redis.Redis) -> list[tuple[float, str, list[int]]]:
    """Every recorded start: time, id, payload values."""
    rows = []
    for row in record.lrange("test:starts", 0, -1):
        at, job_id, values = row.decode().split(" ")
        rows.append((float(at), job_id, [int(v) for v in values.split(",")]))
    return rows


def per_window(times: list[float], start: float, end: float, width: float = 5.0) -> list[int]:
    """Starts counted in consecutive windows of ``width`` seconds from ``start`` to ``end``."""
    counts = []
    while start + width <= end:
        counts.append(sum(1 for t in times if start <= t < start + width))
        start += width
    return counts


def test_processes_draining_a_backlog_keep_to_the_limit_in_total(
    redis_client: redis.Redis, limited: type, limited_processes: Callable[..., WorkerProcess]
) -> None:
    ids = [f"order{n}" for n in range(1200)]
    limited.perform_async([{"id": i, "payload": {"v": 1}, "score": 1} for i in ids])
    processes = [limited_processes("--threads", "2") for _ in range(3)]
    for process in processes:
        process.wait_started()
    # A second payload of every id while the backlog drains: it merges into the queued
    # job, or comes as a later job of the id.
    time.sleep(1.0)
    limited.perform_async([{"id": i, "payload": {"v": 2}, "score": 2} for i in ids])

    def drained() -> bool:
        return limited.metrics()["length"] == 0 and limited.metrics()["busy"] == 0

    eventually(drained, 40, interval=0.2)
    rows = starts(redis_client)
    seen: dict[str, list[int]] = {}
    for _, job_id, values in sorted(rows):
        seen.setdefault(job_id, []).extend(values)
    # No id starves or loses a payload, and each id's payloads come in order.
    assert seen == {i: [1, 2] for i in ids}
    times = sorted(at for at, _, _ in rows)
    # The rate over 5-second windows after the first second (the processes start one by
    # one), up to the last full window: the limit, give or take (one batch per shard and
    # the burst may come on top; startup and the tail may fall short).
    windows = per_window(times, times[0] + 1.0, times[-1])
    assert windows, times[-1] - times[0]
    for count in windows:
        assert 800 <= count <= 1050, windows
    assert len(rows) / (times[-1] - times[0]) < 220


def test_a_limit_set_at_run_time_applies_without_a_restart(
    redis_client: redis.Redis, limited: type, limited_processes: Callable[..., WorkerProcess]
) -> None:
    process = limited_processes(TEST_RATE="0")
    process.wait_started()
    limited.set_rate_limit(RateLimit(20))
    eventually(lambda: "Limited: rate limit 20/s" in process.output())
    limited.perform_async([{"id": n, "payload": {"v": 1}} for n in range(400)])
    before = cpu_seconds(process.process.pid)
    time.sleep(3.0)
    used = cpu_seconds(process.process.pid) - before
    # 20 per second, plus the default burst of one batch.
    assert 40 <= len(starts(redis_client)) <= 70
    # Waiting for tokens, the threads sleep: no loop spinning over the due jobs.
    assert used < 0.6, f"the process used {used:.2f}s of CPU in 3s"
    assert limited.clear_rate_limit()
    eventually(lambda: limited.metrics()["length"] == 0, 20)


def test_the_cli_shows_and_changes_the_limit(
    redis_client: redis.Redis, redis_url: str, limited: type
) -> None:
    shown = lowkiq_cli(redis_url, "rate-limit", "Limited", "-r", APP)
    assert shown.returncode == 0, shown.stderr
    assert (
        shown.stdout.strip() == "Limited: rate limit 200/s (the class's); waited for tokens 0 times"
    )
    changed = lowkiq_cli(redis_url, "rate-limit", "Limited", "50/min", "--burst", "3", "-r", APP)
    assert "rate limit 50/min (burst 3) (set at run time)" in changed.stdout
    assert limited.current_rate_limit() == RateLimit(50, per=60.0, burst=3)
    bad = lowkiq_cli(redis_url, "rate-limit", "Limited", "fast", "-r", APP)
    assert bad.returncode != 0 and "100/s" in bad.stderr
    assert limited.current_rate_limit() == RateLimit(50, per=60.0, burst=3)
    assert (
        "rate limit none"
        in lowkiq_cli(redis_url, "rate-limit", "Limited", "none", "-r", APP).stdout
    )
    back = lowkiq_cli(redis_url, "rate-limit", "Limited", "code", "-r", APP)
    assert "rate limit 200/s (the class's)" in back.stdout
