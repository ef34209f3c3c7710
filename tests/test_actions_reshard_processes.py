"""Actions on queued ids while a real ``lowkiq reshard`` command runs (its own process):
every call changes every one of its ids, also those of an old shard the command has
retired and not yet emptied; on one server and on a Redis Cluster."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import time
from collections.abc import Callable

import pytest
import redis

import lowkiq
from tests.apps.runner import ROOT
from tests.test_job_actions_processes import queue_on

IDS = [f"job{n:05d}" for n in range(40_000)]
#: Ids per action call.
CALL = 500


@pytest.mark.parametrize("kind", ["server", "cluster"])
def test_each_action_during_a_reshard_changes_all_its_ids(
    kind: str,
    request: pytest.FixtureRequest,
    redis_client: redis.Redis,
    redis_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("REDIS_URL", redis_url)
    from tests.apps.recorder import Recorder

    with queue_on(kind, request, redis_url) as env:
        lowkiq.settings.workers = [Recorder]
        later = time.time() + 3600  # not due: they stay queued (no worker runs anyway)
        for start in range(0, len(IDS), 5000):
            Recorder.perform_async(
                [{"id": i, "perform_in": later} for i in IDS[start : start + 5000]]
            )
        count = Recorder.queue().refresh_layout().count
        command = subprocess.Popen(
            [sys.executable, "-m", "lowkiq", "reshard", "Recorder", "--shards", str(count + 3),
             "-r", "tests/apps/recorder.py"],
            cwd=ROOT, env={**os.environ, **env, "PYTHONPATH": str(ROOT)},
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        queue = Recorder.queue()
        while queue.refresh_layout().previous is None:  # acts once the reshard began
            assert command.poll() is None, command.communicate()
            time.sleep(0.005)
        actions = Recorder.actions()
        kinds: itertools.cycle[tuple[str, Callable[[list[str]], int]]] = itertools.cycle(
            [
                ("kill", actions.kill),
                ("delete", actions.delete),
                ("perform_now", actions.perform_now),
            ]
        )
        returned: list[tuple[str, int]] = []
        changed: dict[str, list[str]] = {"kill": [], "delete": [], "perform_now": []}
        chunks = (IDS[start : start + CALL] for start in range(0, len(IDS), CALL))
        while command.poll() is None and (chunk := next(chunks, None)) is not None:
            name, action = next(kinds)
            returned.append((name, action(chunk)))
            changed[name] += chunk
        _, errors = command.communicate(timeout=300)
        assert command.returncode == 0, errors
        assert len(returned) >= 6, "the reshard ended before the actions could run"
        assert [n for _, n in returned] == [CALL] * len(returned), returned
        gone = changed["kill"] + changed["delete"]
        assert Recorder.queries().fetch(gone) == []
        dead = Recorder.queries().morgue_fetch(changed["kill"])
        assert sorted(job["id"] for job in dead) == sorted(changed["kill"])
        seconds, micros = redis_client.time()
        due = Recorder.queries().fetch(changed["perform_now"])
        assert len(due) == len(changed["perform_now"])
        assert all(job["perform_in"] <= seconds + micros / 1e6 for job in due)
