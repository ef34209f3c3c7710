"""Job actions under a real ``lowkiq worker`` draining the queue: the deleted ids never run
(unless a worker had taken them before the delete), every other one runs exactly once, on
one server and on a Redis Cluster."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator

import pytest
import redis

import lowkiq
from tests.apps.runner import WorkerProcess, eventually
from tests.conftest import lowkiq_on

#: Ids enqueued; the ones deleted are due a little later, so they are still queued when
#: the delete runs while the worker drains the rest.
IDS = [f"job{n:04d}" for n in range(1000)]
DELETED = IDS[500:1000:50]
#: Ids deleted while due, spread over the whole drain: the worker has taken the first
#: ones when the delete runs, not the others.
DUE_DELETED = IDS[::20]


@contextlib.contextmanager
def queue_on(kind: str, request: pytest.FixtureRequest, redis_url: str) -> Iterator[dict[str, str]]:
    """``lowkiq.settings`` on the single server or the cluster; yields the workers' env."""
    if kind == "server":
        yield {"REDIS_URL": redis_url}
        return
    cluster = request.getfixturevalue("redis_cluster")
    with lowkiq_on(lambda: redis.RedisCluster.from_url(cluster.url)):
        url = cluster.url.replace("redis://", "redis+cluster://")
        yield {"REDIS_URL": url, "RECORD_URL": redis_url}


@pytest.mark.parametrize("kind", ["server", "cluster"])
def test_deleted_ids_never_run_and_the_others_all_do(
    kind: str,
    request: pytest.FixtureRequest,
    redis_client: redis.Redis,
    redis_url: str,
    workers: Callable[..., WorkerProcess],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("REDIS_URL", redis_url)
    from tests.apps.recorder import Recorder

    with queue_on(kind, request, redis_url) as env:
        lowkiq.settings.workers = [Recorder]
        workers("--threads", "2", **env, TEST_BATCH="5")
        later = time.time() + 3
        Recorder.perform_async(
            [
                {"id": i, "payload": {"v": 1}, **({"perform_in": later} if i in DELETED else {})}
                for i in IDS
            ]
        )
        eventually(lambda: redis_client.llen("test:started") > 0)
        assert Recorder.actions().delete(DELETED) == len(DELETED)
        assert redis_client.llen("test:finished") < len(IDS) - len(DELETED), "still draining"

        drained = lambda: Recorder.metrics()["length"] + Recorder.metrics()["busy"] == 0  # noqa: E731
        eventually(drained, 60)
        time.sleep(3.5)  # past the deleted ids' perform_in: nothing of them comes back
        started = {i.decode() for i in redis_client.lrange("test:started", 0, -1)}
        finished = {i.decode() for i in redis_client.lrange("test:finished", 0, -1)}
        assert started.isdisjoint(DELETED)
        assert finished == set(IDS) - set(DELETED)
        assert Recorder.metrics()["length"] == 0


@pytest.mark.parametrize("kind", ["server", "cluster"])
def test_due_ids_deleted_mid_drain_run_only_if_taken_before_the_delete(
    kind: str,
    request: pytest.FixtureRequest,
    redis_client: redis.Redis,
    redis_url: str,
    workers: Callable[..., WorkerProcess],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A deleted id runs (once) only when the worker had taken it before the delete returned
    (it had started, or was in a processing area); the ones deleted never run; every id not
    deleted runs exactly once."""
    monkeypatch.setenv("REDIS_URL", redis_url)
    from tests.apps.recorder import Recorder

    with queue_on(kind, request, redis_url) as env:
        lowkiq.settings.workers = [Recorder]
        workers("--threads", "2", **env, TEST_BATCH="5")
        Recorder.perform_async([{"id": i, "payload": {"v": 1, "sleep": 0.005}} for i in IDS])
        eventually(lambda: redis_client.llen("test:started") >= 300)
        deleted = Recorder.actions().delete(DUE_DELETED)
        # Taken before the delete returned: in a processing area now, or started (read in
        # this order, so a batch acked between the two reads is seen as started).
        taken = {job["id"] for job in Recorder.queries().processing_data()}
        taken |= {i.decode() for i in redis_client.lrange("test:started", 0, -1)}
        assert len(taken) < len(IDS) - len(DUE_DELETED), "still draining"
        taken_deleted = taken & set(DUE_DELETED)
        assert 0 < deleted < len(DUE_DELETED), "some were taken already, some still queued"
        assert len(taken_deleted) == len(DUE_DELETED) - deleted

        drained = lambda: Recorder.metrics()["length"] + Recorder.metrics()["busy"] == 0  # noqa: E731
        eventually(drained, 60)
        started = [i.decode() for i in redis_client.lrange("test:started", 0, -1)]
        finished = [i.decode() for i in redis_client.lrange("test:finished", 0, -1)]
        expected = (set(IDS) - set(DUE_DELETED)) | taken_deleted
        assert sorted(started) == sorted(finished) == sorted(expected)  # each exactly once
        assert redis_client.llen("test:overlaps") == 0
