"""``lowkiq workflows [ID]``: the list, one workflow, ``--json``, and the actions
(``--cancel``, ``--release-held``, ``--delete-held``) on a real Redis; an unknown ID or a
bad option is a one-line error, exit status 2, that changes nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import CliRunner, Result

import lowkiq
from lowkiq.cli import main
from lowkiq.testing import drain
from tests.apps.runner import ROOT


class Parts(lowkiq.Worker):
    """Members: a payload "die" raises, with no retry (dead at once)."""

    shards_count = 2
    max_retry_count = 0

    @classmethod
    def perform(cls, payloads_by_id: dict[str, list[Any]]) -> None:
        if any("die" in payloads for payloads in payloads_by_id.values()):
            raise RuntimeError("part died")


class Assembled(lowkiq.Worker):
    """The callbacks, and the jobs held after a workflow."""

    shards_count = 1

    @classmethod
    def perform(cls, payloads_by_id: dict[str, list[Any]]) -> None:
        pass


@pytest.fixture
def flows(redis_client: redis.Redis) -> None:
    """wf-ok (succeeded), wf-bad (failed), then wf-run (closed: 3 queued members, a call of
    two jobs held after it)."""
    lowkiq.settings.workers = [Parts, Assembled]
    with lowkiq.Workflow("wf-ok", on_complete=Assembled, on_success=Assembled):
        Parts.perform_async([{"id": "ok-1", "payload": "fine"}])
    with lowkiq.Workflow("wf-bad", on_complete=Assembled):
        Parts.perform_async([{"id": "bad-1", "payload": "fine"}, {"id": "bad-2", "payload": "die"}])
    drain(Parts)
    with lowkiq.Workflow("wf-run", on_complete=Assembled):
        Parts.perform_async([{"id": f"run-{n}", "payload": n} for n in range(3)])
    Assembled.perform_async([{"id": "later-1"}, {"id": "later-2"}], after="wf-run")


def run(*args: str, given: str | None = None) -> Result:
    return CliRunner().invoke(main, ["workflows", *args], input=given)


def test_the_list_is_a_table_newest_first(flows: None) -> None:
    result = run()
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].split() == [
        "ID", "STATUS", "PENDING", "DONE", "FAILED", "DEAD", "DISCARDED", "TOTAL",
        "CREATED", "COMPLETED", "HELD",
    ]  # fmt: skip
    cells = [line.split() for line in lines[1:]]
    assert [(c[0], c[1]) for c in cells] == [
        ("wf-run", "closed"),
        ("wf-bad", "failed"),
        ("wf-ok", "succeeded"),
    ]
    assert cells[0][2:8] == ["3", "0", "0", "0", "0", "3"] and cells[0][-1] == "1"
    assert cells[1][2:8] == ["0", "1", "0", "1", "0", "2"]


def test_the_list_pages_and_its_json(flows: None) -> None:
    paged = run("--limit", "2", "--page", "2")
    assert [line.split()[0] for line in paged.output.splitlines()[1:-1]] == ["wf-ok"]
    assert "page 2 of 2 (3 workflows)" in paged.output
    document = json.loads(run("--json", "--limit", "2").output)
    assert (document["total"], document["page"], document["limit"]) == (3, 1, 2)
    first = document["workflows"][0]
    assert first["id"] == "wf-run" and first["status"] == "closed" and first["held"] == 1
    assert first["counts"] == {
        "pending": 3, "done": 0, "failed": 0, "dead": 0, "discarded": 0, "total": 3
    }  # fmt: skip
    bad = run("--limit", "0")
    assert bad.exit_code == 2 and "must be at least 1" in bad.output


def test_one_workflow_its_counts_callbacks_and_held_calls(flows: None) -> None:
    result = run("wf-bad")
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[:2] == [
        "workflow wf-bad: failed",
        "members: pending 0, done 1, failed 0, dead 1, discarded 0 (total 2)",
    ]
    assert "  on_complete  Assembled  enqueued" in result.output
    assert "held calls: 0" in result.output
    running = run("wf-run").output
    assert "  on_complete  Assembled  not enqueued" in running
    assert "held calls: 1\n  assembled  2 jobs: later-1, later-2\n" in running.replace(
        Assembled.queue_name, "assembled"
    )
    document = json.loads(run("wf-run", "--json").output)
    assert document["held_calls"] == [
        {"queue": Assembled.queue_name, "jobs": ["later-1", "later-2"], "then_after": []}
    ]
    assert document["callbacks"] == [
        {
            "kind": "on_complete",
            "worker": "Assembled",
            "queue": Assembled.queue_name,
            "fired": False,
        }
    ]


def test_an_unknown_workflow_is_an_error(flows: None) -> None:
    for args in (["nope"], ["nope", "--json"], ["nope", "--cancel", "--yes"]):
        result = run(*args)
        assert result.exit_code == 2, args
        assert "Error: no workflow 'nope' (never opened, or expired)" in result.output


def test_cancel_asks_then_deletes_the_queued_members(flows: None) -> None:
    refused = run("wf-run", "--cancel", given="n\n")
    assert refused.exit_code == 1 and "Aborted" in refused.output
    assert lowkiq.workflow("wf-run").status().pending == 3
    result = run("wf-run", "--cancel", given="y\n")
    assert result.exit_code == 0, result.output
    assert "workflow 'wf-run' cancelled: 3 queued member payloads deleted" in result.output
    status = lowkiq.workflow("wf-run").status()
    assert status.complete and not status.succeeded and status.discarded == 3
    assert Parts.metrics()["length"] == 0
    assert run("wf-run").output.startswith("workflow wf-run: cancelled\n")
    again = run("wf-run", "--cancel", "--yes")
    assert again.exit_code == 2 and "is cancelled: nothing to cancel" in again.output


def test_release_and_delete_held(flows: None) -> None:
    released = run("wf-run", "--release-held")
    assert released.exit_code == 0 and "1 held call of 'wf-run' enqueued" in released.output
    assert sorted(j["id"] for j in Assembled.queries().range_by_id("-", "+", 10)) == [
        "later-1", "later-2", "wf-bad", "wf-ok",
    ]  # fmt: skip
    Assembled.perform_async([{"id": "later-3"}], after="wf-run")
    deleted = run("wf-run", "--delete-held", "--yes")
    assert deleted.exit_code == 0 and "1 held call of 'wf-run' deleted" in deleted.output
    assert lowkiq.workflow("wf-run").held() == []


def test_bad_action_options_are_errors_that_change_nothing(flows: None) -> None:
    both = run("wf-run", "--cancel", "--delete-held", "--yes")
    assert both.exit_code == 2 and "give one action, not --cancel and --delete-held" in both.output
    no_id = run("--release-held")
    assert no_id.exit_code == 2 and "--release-held needs the workflow's ID" in no_id.output
    assert lowkiq.workflow("wf-run").status().pending == 3
    assert len(lowkiq.workflow("wf-run").held()) == 1


def test_as_a_process_on_redis_url(flows: None, redis_url: str, tmp_path: Path) -> None:
    env = {**os.environ, "REDIS_URL": redis_url, "PYTHONPATH": str(ROOT)}
    env.pop("LOWKIQ_APP", None)

    def lowkiq_workflows(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "lowkiq", "workflows", *args],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip

    shown = lowkiq_workflows("wf-ok")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("workflow wf-ok: succeeded\n")
    missing = lowkiq_workflows("nope")
    assert missing.returncode == 2 and "no workflow 'nope'" in missing.stderr
