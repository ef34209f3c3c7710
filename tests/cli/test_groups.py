"""``lowkiq groups list|show|pause|resume|delete|limits``, run as real processes on a real
Redis: what each changes, what it prints, and its one-line errors that change nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import redis

import lowkiq
from lowkiq.storage.group_limits import limits_key
from tests.apps.runner import ROOT

APP = """
import lowkiq

class Tenants(lowkiq.Worker):
    shards_count = 3
    group_concurrency = 4

lowkiq.settings.workers = [Tenants]
"""


class Tenants(lowkiq.Worker):
    """The queue of APP's Tenants, read from this process."""

    shards_count = 3
    group_concurrency = 4


@pytest.fixture
def app(tmp_path: Path, redis_client: redis.Redis) -> Path:
    """app.py on the test's flushed Redis; Tenants has 5 jobs of acme and 2 of beta."""
    (tmp_path / "app.py").write_text(APP)
    lowkiq.settings.workers = [Tenants]
    Tenants.perform_async([{"id": f"a{n}", "group": "acme"} for n in range(5)])
    Tenants.perform_async([{"id": f"b{n}", "group": "beta"} for n in range(2)])
    return tmp_path


def groups(app: Path, redis_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m lowkiq groups ARGS -r app.py`` in the app's folder."""
    env = {**os.environ, "REDIS_URL": redis_url, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "lowkiq", "groups", *args, "-r", "app.py"],
        cwd=app, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def stored(redis_client: redis.Redis) -> dict[bytes, bytes]:
    return redis_client.hgetall(limits_key(Tenants.queue().keys))


def test_pause_resume_and_show(app: Path, redis_url: str) -> None:
    done = groups(app, redis_url, "pause", "Tenants", "acme")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "Tenants group 'acme': paused\n"
    assert Tenants.actions().group_state("acme").paused
    shown = groups(app, redis_url, "show", "Tenants", "acme")
    assert shown.stdout == (
        "Tenants group 'acme': paused; 5 queued, 0 in flight; at most 4 batches at once "
        "(the worker's), no rate limit\n"
    )
    listed = groups(app, redis_url, "list", "Tenants")
    assert listed.stdout.splitlines() == [
        "acme: paused; 5 queued, 0 in flight",
        "beta: running; 2 queued, 0 in flight",
    ]
    done = groups(app, redis_url, "resume", "Tenants", "acme")
    assert done.stdout == "Tenants group 'acme': resumed\n"
    assert not Tenants.actions().group_state("acme").paused


def test_limits_are_set_and_cleared(app: Path, redis_url: str) -> None:
    done = groups(app, redis_url, "limits", "Tenants", "acme", "--concurrency", "2",
                  "--rate", "10/s", "--burst", "3")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout == (
        "Tenants group 'acme': running; 5 queued, 0 in flight; at most 2 batches at once "
        "(its own), rate 10/s (burst 3) (its own)\n"
    )
    state = Tenants.actions().group_state("acme")
    assert (state.concurrency, state.rate) == (2, lowkiq.RateLimit(10, burst=3))
    done = groups(app, redis_url, "limits", "Tenants", "acme", "--clear")
    assert "(the worker's), no rate limit" in done.stdout
    assert Tenants.actions().group_settings() == {}


def test_delete_asks_then_deletes_the_groups_queued_jobs(app: Path, redis_url: str) -> None:
    env = {**os.environ, "REDIS_URL": redis_url, "PYTHONPATH": str(ROOT)}
    refused = subprocess.run(
        [sys.executable, "-m", "lowkiq", "groups", "delete", "Tenants", "acme", "-r", "app.py"],
        cwd=app, env=env, input="n\n", capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert refused.returncode != 0
    assert "Delete the 5 queued job(s) of group 'acme' of Tenants?" in refused.stdout
    assert Tenants.actions().group_state("acme").queued == 5
    done = groups(app, redis_url, "delete", "Tenants", "acme", "--yes")
    assert done.stdout == "Tenants group 'acme': 5 jobs deleted\n"
    assert Tenants.metrics()["length"] == 2


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["pause", "Tenants", "nobody"], "Tenants has no group 'nobody'"),
        (["delete", "Tenants", "nobody", "--yes"], "Tenants has no group 'nobody'"),
        (["limits", "Tenants", "acme", "--concurrency", "0"], "concurrency must be an integer"),
        (["limits", "Tenants", "acme", "--concurrency", "-2"], "concurrency must be an integer"),
        (["limits", "Tenants", "acme", "--rate", "fast"], "a rate limit is jobs/period"),
        (["limits", "Tenants", "acme", "--rate", "10/s", "--burst", "0"], "burst"),
        (["limits", "Tenants", "acme", "--burst", "3"], "--burst goes with --rate"),
        (["limits", "Tenants", "acme", "--clear", "--concurrency", "2"], "--clear alone"),
        (["pause", "Nobody", "acme"], "Nobody"),
    ],
)
def test_bad_input_is_one_line_and_changes_nothing(
    app: Path, redis_url: str, redis_client: redis.Redis, args: list[str], message: str
) -> None:
    done = groups(app, redis_url, *args)
    assert done.returncode != 0
    assert message in done.stderr
    assert "Traceback" not in done.stderr
    assert stored(redis_client) == {}
