"""``async def perform`` and ``async def retries_exhausted`` in a real ``lowkiq worker``."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import redis

from tests.apps.runner import WorkerProcess, eventually


def test_coroutine_hooks_run_on_one_event_loop_per_thread(
    redis_client: redis.Redis,
    redis_url: str,
    worker_processes: Callable[..., WorkerProcess],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("REDIS_URL", redis_url)
    from tests.apps.async_app import AsyncRecorder

    worker = worker_processes("-r", "tests/apps/async_app.py", "--threads", "3")
    ids = [str(n) for n in range(60)]
    for job_id in ids:
        # One call per job: batches land on every thread while they run.
        AsyncRecorder.perform_async([{"id": job_id, "payload": {"n": job_id}}])
    AsyncRecorder.perform_async([{"id": "bad", "payload": {"fail": True}}])

    seen = eventually(
        lambda: (
            len(redis_client.lrange("test:async:seen", 0, -1)) >= len(ids)
            and redis_client.lrange("test:async:seen", 0, -1)
        )
    )
    rows = [row.decode().split() for row in seen]
    assert sorted(job_id for job_id, _, _ in rows) == sorted(ids)
    loops_by_thread: dict[str, set[str]] = {}
    for _, thread, loop in rows:
        loops_by_thread.setdefault(thread, set()).add(loop)
    # Each thread kept one loop from batch to batch, and no two threads shared one.
    assert all(len(loops) == 1 for loops in loops_by_thread.values())
    loops = [next(iter(loops)) for loops in loops_by_thread.values()]
    assert len(set(loops)) == len(loops) >= 2

    exhausted = eventually(lambda: redis_client.lrange("test:async:exhausted", 0, -1))
    assert [row.split(b"\n")[0] for row in exhausted] == [b"bad RuntimeError: failing bad"]
    assert AsyncRecorder.metrics()["morgue_length"] == 1
    assert AsyncRecorder.metrics()["length"] == 0
    assert "fatal" not in worker.output()
