"""Fencing tokens never go backwards, also when Redis loses its data: a server restarted
without persistence under a running worker, whose user store keeps the last fence of
every id (the fencing guide's ``WHERE fence <= :fence``)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
import redis

import lowkiq
from lowkiq.clients.embedded import redis_server_binary, start_server
from tests.apps.runner import WorkerProcess, eventually

IDS = [f"order-{n}" for n in range(30)]


def enqueue(url: str, round_: int) -> None:
    from tests.apps.fenced_store import FencedStore

    lowkiq.settings.redis = lambda: redis.Redis.from_url(url)
    try:
        FencedStore.perform_async([{"id": job_id, "payload": round_} for job_id in IDS])
    finally:
        lowkiq.settings.reset()


def fences(db_path: Path) -> dict[str, int]:
    from tests.apps.fenced_store import connect

    connect().close()
    db = sqlite3.connect(db_path)
    try:
        return dict(db.execute("SELECT id, fence FROM writes").fetchall())
    finally:
        db.close()


def refused(db_path: Path) -> list[tuple[str, int, int]]:
    db = sqlite3.connect(db_path)
    try:
        return db.execute("SELECT id, fence, stored FROM refused").fetchall()
    finally:
        db.close()


def test_a_redis_restarted_without_its_data_hands_out_higher_fences(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db_path = tmp_path / "store.db"
    monkeypatch.setenv("FENCE_DB", str(db_path))
    binary = redis_server_binary(prefer_path=True)
    server = start_server(tmp_path / "redis", binary=binary)
    worker = WorkerProcess(
        "-r", "tests/apps/fenced_store.py", env={"REDIS_URL": server.url, "FENCE_DB": str(db_path)}
    )
    try:
        worker.wait_started()
        enqueue(server.url, 1)
        before = eventually(lambda: (found := fences(db_path)) and len(found) == len(IDS) and found)
        server.stop()  # no persistence: the restarted server is empty, the counters gone
        server = start_server(tmp_path / "redis", binary=binary)
        enqueue(server.url, 2)
        after = eventually(
            lambda: (
                (found := fences(db_path)) != before
                and all(found[job_id] != before[job_id] for job_id in IDS)
                and found
            ),
            timeout=40,
        )
        assert refused(db_path) == []
        assert all(after[job_id] > before[job_id] for job_id in IDS)
        assert worker.process.poll() is None, worker.output()
    finally:
        worker.close()
        server.stop()
        lowkiq.settings.reset()


def written_or_refused(db_path: Path, before: dict[str, int]) -> bool:
    """Whether every id was written again since ``before``, or refused."""
    found = fences(db_path)
    refused_ids = {row[0] for row in refused(db_path)}
    return all(found[job_id] != before[job_id] or job_id in refused_ids for job_id in IDS)


def reshard(url: str, shards: int) -> None:
    from lowkiq.ownership.resharding import reshard as run_reshard
    from tests.apps.fenced_store import FencedStore

    lowkiq.settings.redis = lambda: redis.Redis.from_url(url)
    try:
        run_reshard(FencedStore.queue(), shards)
    finally:
        lowkiq.settings.reset()


def test_fences_grow_after_a_reshard_then_a_redis_that_lost_its_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """4 shards resharded to 8 (shards 4..11), the worker restarted with ``shards_count =
    8``, then Redis restarted empty: the queue starts again at shard 0, and every fence
    is still above the one each id stored."""
    db_path = tmp_path / "store.db"
    monkeypatch.setenv("FENCE_DB", str(db_path))
    binary = redis_server_binary(prefer_path=True)
    server = start_server(tmp_path / "redis", binary=binary)

    def start(shards: int) -> WorkerProcess:
        env = {"REDIS_URL": server.url, "FENCE_DB": str(db_path), "FENCE_SHARDS": str(shards)}
        started = WorkerProcess("-r", "tests/apps/fenced_store.py", env=env)
        started.wait_started()
        return started

    def run_round(round_: int) -> dict[str, int]:
        before = fences(db_path)
        enqueue(server.url, round_)
        eventually(lambda: written_or_refused(db_path, before), timeout=40)
        return fences(db_path)

    worker = start(4)
    try:
        enqueue(server.url, 1)
        eventually(lambda: len(fences(db_path)) == len(IDS))
        reshard(server.url, 8)
        resharded = run_round(2)
        worker.close()
        worker = start(8)
        before_loss = run_round(3)
        assert refused(db_path) == []
        assert resharded != before_loss
        server.stop()  # no persistence: the layout and the epoch counters are gone
        server = start_server(tmp_path / "redis", binary=binary)
        after = run_round(4)
        assert refused(db_path) == []
        assert all(after[job_id] > before_loss[job_id] for job_id in IDS)
        assert worker.process.poll() is None, worker.output()
    finally:
        worker.close()
        server.stop()
        lowkiq.settings.reset()
