"""``lowkiq jobs delete|kill|perform-now|retry|move|clear``, run as real processes on a real
Redis: what each changes, what it prints, and its one-line errors."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

import lowkiq
from tests.apps.runner import ROOT

APP = """
import lowkiq

class OrderWorker(lowkiq.Worker):
    shards_count = 3

class MailWorker(lowkiq.Worker):
    shards_count = 2

lowkiq.settings.workers = [OrderWorker, MailWorker]
"""


class OrderWorker(lowkiq.Worker):
    """The queue of APP's OrderWorker, read from this process."""

    shards_count = 3


class MailWorker(lowkiq.Worker):
    """The queue of APP's MailWorker."""

    shards_count = 2


@pytest.fixture
def app(tmp_path: Path, redis_client: redis.Redis) -> Path:
    """app.py in a folder, on the test's flushed Redis; OrderWorker has jobs a, b, c (due in
    an hour) and dead jobs x, y."""
    (tmp_path / "app.py").write_text(APP)
    lowkiq.settings.workers = [OrderWorker, MailWorker]
    later = time.time() + 3600
    OrderWorker.perform_async([{"id": i, "payload": i, "perform_in": later} for i in "abcxy"])
    OrderWorker.actions().kill(["x", "y"])
    return tmp_path


def jobs(
    app: Path, redis_url: str, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m lowkiq jobs ARGS -r app.py`` in the app's folder."""
    env = {**os.environ, "REDIS_URL": redis_url, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "lowkiq", "jobs", *args, "-r", "app.py"],
        cwd=app, env=env, input=stdin, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def queued() -> list[str]:
    return sorted(job["id"] for job in OrderWorker.queries().range_by_id("-", "+", limit=100))


def dead() -> list[str]:
    return sorted(job["id"] for job in OrderWorker.queries().morgue_range_by_id("-", "+"))


def test_delete_kill_and_perform_now(app: Path, redis_url: str) -> None:
    done = jobs(app, redis_url, "perform-now", "OrderWorker", "a", "nope")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "OrderWorker: 1 job made due now (1 of the ids given are not queued)\n"
    assert OrderWorker.queries().fetch(["a"])[0]["perform_in"] <= time.time() + 1
    done = jobs(app, redis_url, "kill", "OrderWorker", "a")
    assert done.stdout == "OrderWorker: 1 job moved to the morgue\n"
    assert dead() == ["a", "x", "y"]
    done = jobs(app, redis_url, "delete", "OrderWorker", "-", stdin="b\n\nc\nx\n")
    assert done.stdout == "OrderWorker: 2 jobs deleted (1 of the ids given are not queued)\n"
    assert queued() == [] and dead() == ["a", "x", "y"]


def test_perform_now_all_and_retry(app: Path, redis_url: str) -> None:
    done = jobs(app, redis_url, "perform-now", "OrderWorker", "--all")
    assert done.stdout == "OrderWorker: 3 jobs made due now\n"
    assert OrderWorker.metrics()["lag"] >= 0 and OrderWorker.queries().scheduled_count() == 0
    done = jobs(app, redis_url, "retry", "OrderWorker", "x")
    assert done.stdout == "OrderWorker: 1 job queued up\n"
    assert dead() == ["y"] and "x" in queued()
    done = jobs(app, redis_url, "retry", "OrderWorker", "--all")
    assert done.stdout == "OrderWorker: 1 job queued up\n"
    assert dead() == [] and queued() == ["a", "b", "c", "x", "y"]


def test_move_to_another_worker(app: Path, redis_url: str) -> None:
    done = jobs(app, redis_url, "move", "OrderWorker", "a", "b", "--to", "MailWorker")
    assert done.stdout == "OrderWorker: 2 jobs moved to MailWorker\n", done.stderr
    assert queued() == ["c"]
    moved = MailWorker.queries().range_by_id("-", "+")
    assert [(job["id"], job["payloads"][0][0]) for job in moved] == [("a", "a"), ("b", "b")]


def test_clear_asks_first(app: Path, redis_url: str) -> None:
    refused = jobs(app, redis_url, "clear", "OrderWorker", stdin="n\n")
    assert refused.returncode == 1
    assert "Delete all 3 queued job(s) of OrderWorker? This cannot be undone." in refused.stdout
    assert queued() == ["a", "b", "c"]
    done = jobs(app, redis_url, "clear", "OrderWorker", stdin="y\n")
    assert done.returncode == 0 and done.stdout.endswith("OrderWorker: 3 jobs deleted\n")
    assert queued() == [] and dead() == ["x", "y"]
    OrderWorker.perform_async([{"id": "new"}])
    done = jobs(app, redis_url, "clear", "OrderWorker", "--yes")
    assert done.stdout == "OrderWorker: 1 job deleted\n"


@pytest.mark.parametrize(
    ("args", "stdin", "message"),
    [
        (("delete", "OrderWorker"), None, "Error: give the ids of the jobs (or - to read"),
        (("kill", "OrderWorker", "-"), "\n", "Error: give the ids of the jobs"),
        (("retry", "OrderWorker", "x", "--all"), None, "Error: give IDS or --all, not both"),
        (("delete", "Nobody", "a"), None, "Error: no worker 'Nobody' in settings.workers"),
        (("move", "OrderWorker", "a", "--to", "Nobody"), None, "Error: no worker 'Nobody'"),
        (("move", "OrderWorker", "a", "--to", "OrderWorker"), None, "onto their own queue"),
        (("delete", "OrderWorker", "-"), "a\0b\n", "Error: a job id must not contain NUL"),
    ],
)
def test_bad_use_is_a_one_line_error_that_changes_nothing(
    app: Path, redis_url: str, args: tuple[str, ...], stdin: str | None, message: str
) -> None:
    done = jobs(app, redis_url, *args, stdin=stdin)
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and message in done.stderr, done.stderr
    assert queued() == ["a", "b", "c"] and dead() == ["x", "y"]


TRACKED_APP = """
import lowkiq

class TrackedWorker(lowkiq.Worker):
    shards_count = 2
    track = True

class OrderWorker(lowkiq.Worker):
    shards_count = 3

lowkiq.settings.workers = [TrackedWorker, OrderWorker]
"""


class TrackedWorker(lowkiq.Worker):
    """The queue of TRACKED_APP's TrackedWorker."""

    shards_count = 2
    track = True


def test_history_and_events_print_a_tracked_workers_events(
    tmp_path: Path, redis_client: redis.Redis, redis_url: str
) -> None:
    (tmp_path / "app.py").write_text(TRACKED_APP)
    lowkiq.settings.workers = [TrackedWorker, OrderWorker]
    TrackedWorker.perform_async([{"id": "o-1", "payload": 1}, {"id": "o-2", "payload": 2}])
    TrackedWorker.actions().kill(["o-1"])
    done = jobs(tmp_path, redis_url, "history", "TrackedWorker", "o-1")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [line.split(" ")[3] for line in lines] == ["enqueued", "buried"]
    assert all(line.split(" ")[2] == "o-1" for line in lines)
    every = jobs(tmp_path, redis_url, "events", "TrackedWorker", "--since", "600")
    assert every.returncode == 0, every.stderr
    assert sorted(line.split(" ")[2] for line in every.stdout.splitlines()) == ["o-1", "o-1", "o-2"]
    none = jobs(tmp_path, redis_url, "history", "TrackedWorker", "never")
    assert none.returncode == 0 and "no events of 'never' are kept" in none.stdout
    untracked = jobs(tmp_path, redis_url, "history", "OrderWorker", "a")
    assert untracked.returncode != 0
    assert "OrderWorker records no events: set track = True" in untracked.stderr
