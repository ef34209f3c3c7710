"""`lowkiq reshard`: real worker processes keep processing and a feeder keeps
enqueueing while the command changes the queue's shards; nothing is lost, no id
runs twice at a time, every id's versions run in order."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
import redis

import lowkiq
from lowkiq.clients.embedded_cluster import EmbeddedCluster
from lowkiq.ownership.membership import live_processes
from lowkiq.storage.layout import Layout
from tests.apps.runner import ROOT, WorkerProcess, eventually
from tests.conftest import lowkiq_on
from tests.test_scaleout import assert_all_seen_in_order, feed

IDS = [f"order{n}" for n in range(40)]
VERSIONS = range(1, 31)


def lowkiq_command(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run ``python -m lowkiq ARGS`` on the recorder app."""
    return subprocess.run(
        [sys.executable, "-m", "lowkiq", *args, "-r", "tests/apps/recorder.py"],
        cwd=ROOT, env={**env, "PATH": ""}, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


@contextmanager
def feeding(recorder: type) -> Iterator[None]:
    """Enqueue the versions of IDS, a version every few ms, in a thread of its own."""
    thread = threading.Thread(target=feed, args=(recorder, IDS, VERSIONS, 0.001))
    thread.start()
    try:
        yield
    finally:
        thread.join()


def held_shards(client: redis.Redis | redis.RedisCluster) -> set[str]:
    _, processes = live_processes(client)
    return {shard for p in processes for shard in p.info["shards"]}


def reshard_under_load(
    recorder: type,
    record: redis.Redis,
    client: redis.Redis | redis.RedisCluster,
    start: Callable[[], WorkerProcess],
    env: dict[str, str],
) -> None:
    start(), start()
    with feeding(recorder):
        done = lowkiq_command("reshard", "Recorder", "--shards", "7", env=env)
    assert done.returncode == 0, done.stderr
    assert "5 -> 7 shard(s)" in done.stdout and "done" in done.stdout
    assert "Recorder: 7 shard(s), numbers 5..11" in done.stdout
    idle = lambda: recorder.metrics()["length"] == 0 and recorder.metrics()["busy"] == 0  # noqa: E731
    eventually(idle, 90)
    assert_all_seen_in_order(record, IDS, VERSIONS)
    assert record.llen("test:overlaps") == 0
    assert recorder.queue().layout == Layout(5, 7)
    wanted = {f"Recorder:{shard}" for shard in range(5, 12)}
    eventually(lambda: held_shards(client) == wanted, 20)
    status = lowkiq_command("reshard", "Recorder", env=env)
    assert status.stdout.strip() == "Recorder: 7 shard(s), numbers 5..11"


def test_reshard_under_load_on_a_server(
    workers: Callable[..., WorkerProcess], recorder: type, redis_client: redis.Redis, redis_url: str
) -> None:
    env = {"REDIS_URL": redis_url, "TEST_LEASE_TTL": "1"}
    reshard_under_load(recorder, redis_client, redis_client, lambda: workers(**env), env)


def test_reshard_under_load_on_a_cluster(
    redis_cluster: EmbeddedCluster,
    redis_url: str,
    redis_client: redis.Redis,
    worker_processes: Callable[..., WorkerProcess],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("REDIS_URL", redis_url)
    from tests.apps.recorder import Recorder

    env = {
        "REDIS_URL": redis_cluster.url.replace("redis://", "redis+cluster://"),
        "RECORD_URL": redis_url,
        "TEST_LEASE_TTL": "1",
    }
    with lowkiq_on(lambda: redis.RedisCluster.from_url(redis_cluster.url)) as cluster:
        lowkiq.settings.workers = [Recorder]
        start = lambda: worker_processes(**env)  # noqa: E731
        reshard_under_load(Recorder, redis_client, cluster, start, env)


def test_reshard_names_what_is_wrong(redis_url: str, redis_client: redis.Redis) -> None:
    env = {"REDIS_URL": redis_url}
    unknown = lowkiq_command("reshard", "Nobody", "--shards", "3", env=env)
    assert unknown.returncode != 0 and "no worker 'Nobody'" in unknown.stderr
    same = lowkiq_command("reshard", "Recorder", "--shards", "5", env=env)
    assert same.returncode != 0 and "has 5 shard(s) already" in same.stderr
    zero = lowkiq_command("reshard", "Recorder", "--shards", "0", env=env)
    assert zero.returncode != 0 and "--shards" in zero.stderr


def test_reshard_tells_that_static_processes_must_be_restarted(
    workers: Callable[..., WorkerProcess], recorder: type, redis_url: str
) -> None:
    static = workers("--nodes", "2", "--node", "0", REDIS_URL=redis_url)
    done = lowkiq_command("reshard", "Recorder", "--shards", "6", env={"REDIS_URL": redis_url})
    assert done.returncode == 0, done.stderr
    assert f":{static.process.pid} deal shards with a static splitter" in done.stdout
