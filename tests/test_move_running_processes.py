"""``actions().move`` of an id whose batch is running, under a real ``lowkiq worker``: the
move waits until the batch ended, so the moved payloads never run beside it, and when
it fails its payloads move too, ahead of the queued ones (in order); on one server and
on a Redis Cluster."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import redis

import lowkiq
from tests.apps.runner import WorkerProcess, eventually
from tests.test_job_actions_processes import queue_on


def seen(record: redis.Redis, worker: str, job_id: str) -> list[int]:
    return [int(v) for v in record.lrange(f"test:seen:{worker}:{job_id}", 0, -1)]


@pytest.mark.parametrize("kind", ["server", "cluster"])
@pytest.mark.parametrize("fails", [False, True], ids=["acked", "failed"])
def test_a_move_waits_for_the_running_batch_of_the_id(
    kind: str,
    fails: bool,
    request: pytest.FixtureRequest,
    redis_client: redis.Redis,
    redis_url: str,
    workers: Callable[..., WorkerProcess],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("REDIS_URL", redis_url)
    from tests.apps.mover import Source, Target

    with queue_on(kind, request, redis_url) as env:
        lowkiq.settings.workers = [Source, Target]
        workers("-r", "tests/apps/mover.py", **env)
        first = {"v": 1, "sleep": 1.5, **({"fail_once": "test:failed"} if fails else {})}
        Source.perform_async([{"id": "x", "payload": first, "score": 1}])
        eventually(lambda: redis_client.lrange("test:started", 0, -1) == [b"Source:x"])
        Source.perform_async([{"id": "x", "payload": {"v": v}, "score": v} for v in (2, 3)])
        moved = Source.actions().move(["x"], to=Target)
        assert moved == 1
        expected = [1, 2, 3] if fails else [2, 3]
        eventually(lambda: seen(redis_client, "Target", "x") == expected, 20)
        assert seen(redis_client, "Source", "x") == ([] if fails else [1])
        assert redis_client.lrange("test:overlaps", 0, -1) == []
        assert Source.metrics()["length"] == 0
